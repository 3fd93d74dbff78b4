"""``pagesim simulate``: run one configuration from flags (or a minimal YAML RunSpec)
and print its summary table."""

from __future__ import annotations

import argparse

EPILOG = """examples:
  pagesim simulate --allocator paged --rate 2 --num-requests 1000
  pagesim simulate --scheduler orca --allocator max --kv-slots 15728 --rate 2
  pagesim simulate --workload alpaca-like --beam-width 4 --rate 10 --num-requests 500
  pagesim simulate --config run.yaml --seed 3
flags given on the command line override the --config file's values.
"""

# flag -> (RunSpec section, key)
_FLAGS = {
    "model": ("hardware", "model"),
    "gpu": ("hardware", "gpu"),
    "kv_slots": ("hardware", "kv_slots"),
    "kv_gib": ("hardware", "kv_budget_gib"),
    "workload": ("workload", "name"),
    "num_requests": ("workload", "num_requests"),
    "n": ("workload", "n"),
    "beam_width": ("workload", "beam_width"),
    "rate": ("arrivals", "rate_req_s"),
    "scheduler": ("scheduler", "kind"),
    "allocator": ("allocator", "kind"),
    "block_size": ("allocator", "block_size"),
    "watermark": ("allocator", "watermark"),
    "prefix_caching": ("allocator", "prefix_caching"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run one configuration and print its summary",
        description="Simulate one serving configuration and print the summary metrics.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE", help="a YAML RunSpec (any subset of its keys)")
    p.add_argument("--model", help="model name, e.g. opt-13b")
    p.add_argument("--gpu", help="GPU name, e.g. a100-40gb")
    kv = p.add_mutually_exclusive_group()
    kv.add_argument("--kv-slots", type=int, help="KV pool size in token slots")
    kv.add_argument("--kv-gib", type=float, help="KV pool size in GiB")
    p.add_argument("--workload", help="workload name, e.g. sharegpt")
    p.add_argument("--num-requests", type=int)
    p.add_argument("--rate", type=float, help="Poisson arrival rate, requests per second")
    # the registered names (``pagesim list`` prints them; a plug-in adds itself), checked
    # by the handler: building the parser imports no registry, so --help stays fast
    p.add_argument(
        "--scheduler", metavar="KIND", help="a registered scheduler (`pagesim list` names them)"
    )
    p.add_argument(
        "--allocator", metavar="KIND", help="a registered allocator (`pagesim list` names them)"
    )
    p.add_argument("--block-size", type=int)
    p.add_argument("--watermark", type=float, help="fraction of GPU blocks kept free at admission")
    p.add_argument("--prefix-caching", action="store_true", default=None)
    p.add_argument("--n", type=int, help="parallel samples per request")
    p.add_argument("--beam-width", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--max-sim-time", type=float, metavar="SECONDS")
    p.add_argument("--check-invariants", action="store_true", default=None)
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.set_defaults(func=_run)


def spec_doc_from_args(args: argparse.Namespace, base: dict) -> dict:
    """The RunSpec document: the --config file's, with the given flags on top."""
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for flag, (section, key) in _FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            doc.setdefault(section, {})[key] = value
    for flag, key in (
        ("seed", "seed"),
        ("max_sim_time", "max_sim_time_s"),
        ("check_invariants", "check_invariants"),
    ):
        value = getattr(args, flag)
        if value is not None:
            doc[key] = value
    return doc


def _check_registered(args: argparse.Namespace) -> None:
    """``--scheduler`` and ``--allocator`` name registered plug-ins (argparse's own words)."""
    from pagesim.allocators.registry import ALLOCATORS
    from pagesim.errors import ConfigError
    from pagesim.simulator.schedulers import SCHEDULERS

    for flag, value, registry in (
        ("--scheduler", args.scheduler, SCHEDULERS),
        ("--allocator", args.allocator, ALLOCATORS),
    ):
        if value is not None and value not in registry:
            allowed = ", ".join(repr(k) for k in sorted(registry))
            raise ConfigError(f"argument {flag}: invalid choice: {value!r} (choose from {allowed})")


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pagesim.errors import ConfigError
    from pagesim.simulator.costmodel.factory import make_cost_model
    from pagesim.simulator.footprint import memory_problem
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model
    from pagesim.simulator.result import METRIC_COLUMNS
    from pagesim.simulator.run import simulate
    from pagesim.simulator.spec import run_spec_from_dict
    from pagesim.simulator.vllm_metrics import vllm_metric_columns

    _check_registered(args)
    base: dict = {}
    source = "command line"
    if args.config:
        from pagesim import yamlio

        path = Path(args.config)
        if not path.is_file():
            raise ConfigError(f"--config: file not found: {path}")
        base = yamlio.read(path, "RunSpec file") or {}
        if not isinstance(base, dict):
            raise ConfigError(f"{path}: a RunSpec file must be a mapping of sections")
        source = str(path)
    spec = run_spec_from_dict(spec_doc_from_args(args, base), source)
    too_large = memory_problem(spec)
    if too_large is not None:
        raise ConfigError(f"{source}: {too_large}")
    result = simulate(spec, progress=args.progress)
    if result.summary["num_finished"] == 0:
        why = [f"{len(result.requests)} requests in the run"]
        if result.extra.get("num_dropped"):
            why.append(f"dropped by the workload filters: {result.notes['dropped_reasons']}")
        if result.summary["num_rejected"]:
            why.append(f"rejected: {result.notes['rejected_reasons']}")
        raise ConfigError(f"{source}: no request was served ({'; '.join(why)})")
    hw = spec.hardware
    cost = make_cost_model(hw, get_model(hw.model), get_gpu(hw.gpu))
    print(
        f"{hw.model} on {hw.gpu} | {spec.scheduler.kind} scheduler, {spec.allocator.kind} allocator | "
        f"{spec.workload.name} x {len(result.requests)} | {int(result.extra['kv_capacity_slots'])} KV slots"
    )
    print(f"cost model: {cost.description}")
    vllm_columns = vllm_metric_columns(spec.metrics)
    width = max(len(c) for c in (*METRIC_COLUMNS, *vllm_columns))
    for name in METRIC_COLUMNS:
        print(f"  {name:<{width}}  {result.summary[name]:.6g}")
    print("  as vllm bench serve names them (docs/metrics.md):")
    for name in vllm_columns:
        print(f"  {name:<{width}}  {result.summary[name]:.6g}")
    rejected = result.requests[result.requests["status"] == "rejected"]
    for reason, count in rejected["reason"].value_counts().items():
        print(f"  rejected x{count}: {reason}")
    if result.extra.get("num_dropped"):
        print(f"  dropped by the workload filters: {result.notes['dropped_reasons']}")
    return 0
