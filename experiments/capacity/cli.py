"""``pagesim capacity``: the command (only argparse at module level)."""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  pagesim capacity run-2.json --model llama-3.1-8b --gpu H100 --vllm-version 0.19.0 \\
      --slo ttft_p99=500ms,tpot_p99=50ms --out out/capacity
  pagesim capacity run-2.json --model llama-3.1-8b --gpu H100 --vllm-version 0.19.0 \\
      --goodput 0.9 --slo ttft=1s,tpot=100ms --seeds 3 --precision 0.1 --out out/goodput
  pagesim capacity run-2.json --model llama-2-7b --gpu a100-80gb --slo ttft_p99=1s \\
      --vary scheduler.max_num_seqs=128,256 --vary hardware.gpu=a100-80gb,h100-sxm \\
      --gpu-cost a100-80gb=1.8,h100-sxm=3.5 --out out/what-if
  pagesim capacity latency_vs_rate --slo e2el_p99=30s --out out/capacity-exp
"""


def _cmd_capacity(args: argparse.Namespace) -> int:
    from pagesim.experiments.capacity.api import capacity
    from pagesim.experiments.capacity.report import CHART, PAGE, SUMMARY
    from pagesim.experiments.cli import _check_executor, _parse_set, _say

    _check_executor(args)
    server = {
        key: getattr(args, key)
        for key in ("model", "gpu", "profile", "vllm_version", "scheduler", "server_args")
        if getattr(args, key)
    }
    outcome = capacity(
        args.source, args.out, slo=args.slo, goodput=args.goodput, precision=args.precision,
        seeds=args.seeds, vary=args.vary, gpu_cost=args.gpu_cost, server=server,
        overrides=_parse_set(args.set), workload=args.workload, num_requests=args.num_requests,
        duration_s=args.duration_s, start_rate=args.start_rate, executor=args.executor,
        jobs=args.jobs, ray_address=args.ray_address, progress=True if args.progress else None,
        say=_say,
    )  # fmt: skip
    for point, search in zip(outcome.points, outcome.searches, strict=True):
        print(f"{point.label}: {search.answer()}")
    print(f"page: {args.out}/{PAGE}; answers: {args.out}/{SUMMARY}; chart: {args.out}/{CHART}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``capacity``."""
    cap = subparsers.add_parser(
        "capacity",
        help="the highest request rate a server holds within SLOs (per configuration)",
        description=(
            "Find the highest request rate that meets the SLOs, for the request mix of a "
            "vllm bench serve result (its requests re-drawn with Poisson arrivals at each "
            "rate) or an experiment's base spec: a bracket (doubling or halving from the "
            "run's rate) then bisection to --precision, seeds as replicates (a rate passes "
            "when the SLO holds on the requests of every seed pooled). --vary gives the "
            "capacity of each configuration; --gpu-cost prices them. Writes capacity.md, "
            "capacity.csv (one row per configuration, rate and statistic), capacities.csv "
            "and capacity.png into --out (docs/your_server.md)."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cap.add_argument(
        "source", help="a vllm bench serve result (.json), or an experiment YAML / shipped name"
    )
    from pagesim.experiments.cli import _add_server_flags

    _add_server_flags(cap, gpu_required=False)
    _add_search_flags(cap)
    cap.set_defaults(func=_cmd_capacity)


def _add_search_flags(cap: argparse.ArgumentParser) -> None:
    """The SLOs, the search, the mix, where it runs."""
    cap.add_argument(
        "--slo",
        required=True,
        help="bounds, comma-separated: METRIC_pQ=VALUE (ttft, tpot, itl, e2el; p50, p90, p99; "
        "ms or s), e.g. ttft_p99=500ms,tpot_p99=50ms; with --goodput: METRIC=VALUE per request",
    )
    cap.add_argument(
        "--goodput",
        type=float,
        default=None,
        metavar="F",
        help="the SLO is goodput as vllm bench serve --goodput defines it: at least F (e.g. 0.9) "
        "of requests meet every --slo bound",
    )
    cap.add_argument(
        "--precision",
        default="5%",
        help="stop when the passing and failing rates are this close: req/s (0.1) or relative "
        "(5%%, the default)",
    )
    cap.add_argument("--seeds", type=int, default=1, help="replicates per rate (default 1)")
    cap.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a RunSpec path and its values; several make a grid (repeatable)",
    )
    cap.add_argument(
        "--gpu-cost",
        default=None,
        metavar="GPU=USD_H,...",
        help="USD per GPU-hour: adds cost per unit of capacity, names the cheapest",
    )
    cap.add_argument(
        "--workload", default=None, help="a named workload instead of the run's request mix"
    )
    cap.add_argument(
        "--num-requests",
        type=int,
        default=None,
        help="requests per run (default: the run's count; 1000 for --workload)",
    )
    cap.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="instead: as many of the run's requests as arrive in this many seconds",
    )
    cap.add_argument(
        "--start-rate", type=float, default=None, help="first rate tried (default: the run's)"
    )
    cap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any other RunSpec key"
    )
    cap.add_argument("--out", required=True, help="output folder")
    cap.add_argument("--executor", choices=("local", "ray"), default="local")
    cap.add_argument("--jobs", type=int, default=None, help="parallel runs (default: all cores)")
    cap.add_argument("--ray-address", default=None, metavar="ADDRESS")
    cap.add_argument(
        "--progress", action="store_true", help="show the progress bar even off a terminal"
    )
