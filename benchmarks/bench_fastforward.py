"""Fast-forward vs step-by-step simulation: wall time, speed-up, peak memory, same results.

    python benchmarks/bench_fastforward.py sharegpt [--num-requests N] [--repeats R]
    python benchmarks/bench_fastforward.py azure    [--repeats R]
    python benchmarks/bench_fastforward.py saturate [--num-requests N]
    python benchmarks/bench_fastforward.py sweep    [--num-points P] [--num-requests N]

- sharegpt: ShareGPT, OPT-13B on A100-40GB, vllm, paged blocks of 16, 10,000 requests
  at 2 req/s; both engines, median wall of the repeats, the speed-up, and whether the
  requests and summaries agree (1e-9 relative). Targets: fast under 2 s, >= 20x step.
- azure: the Azure conversation trace replayed at its timestamps on Llama-2-7B /
  A100-80GB, every request that fits ``max_model_len`` (``max_prompt_len`` null);
  whole-process time of one fast run (trace building included). Target: under 2 s.
- saturate: N synthetic requests (prompt and output lognormal, means 256 / 128) all
  at t = 0 (vllm, OPT-13B / A100-40GB); wall and peak RSS of one fast run. Target for
  1,000,000: under 60 s and 2 GiB.
- sweep: P runs of ShareGPT (N requests each) over a rate grid, fast engine, in one
  process; total wall. Target for 100 points: report.

Peak RSS is the process's high-water mark (``resource.getrusage``), so it includes
every earlier run in the same process.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import sys
import time

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

SHAREGPT = {
    "workload": {"name": "sharegpt"},
    "arrivals": {"process": "poisson", "rate_req_s": 2.0},
    "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm"},
}


def peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def timed(doc: dict, repeats: int = 1):
    spec = run_spec_from_dict(doc)
    walls, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = simulate(spec)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), result


def same_results(a, b, rtol: float = 1e-9) -> bool:
    if list(a.requests.columns) != list(b.requests.columns) or len(a.requests) != len(b.requests):
        return False
    for col in a.requests.columns:
        x, y = a.requests[col].tolist(), b.requests[col].tolist()
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float):
                if not ((math.isnan(u) and math.isnan(v)) or math.isclose(u, v, rel_tol=rtol)):
                    return False
            elif u != v:
                return False
    for key, u in a.summary.items():
        v = b.summary[key]
        if key != "sim_wall_s" and not (
            (math.isnan(u) and math.isnan(v)) or math.isclose(u, v, rel_tol=rtol)
        ):
            return False
    return True


def bench_sharegpt(args) -> None:
    doc = {**SHAREGPT, "workload": {"name": "sharegpt", "num_requests": args.num_requests}}
    fast_wall, fast = timed({**doc, "engine": "fast"}, args.repeats)
    step_wall, step = timed({**doc, "engine": "step"}, args.repeats)
    steps = fast.extra["num_steps"]
    ff = fast.extra["num_fast_forwarded_steps"]
    print(
        f"sharegpt: {args.num_requests} requests, {int(steps)} steps ({ff / steps:.1%} fast-forwarded)"
    )
    print(
        f"step: {step_wall:.2f} s   fast: {fast_wall:.2f} s   speed-up: {step_wall / fast_wall:.1f}x"
    )
    print(f"same results: {same_results(step, fast)}   peak RSS: {peak_rss_mib():.0f} MiB")


def bench_azure(args) -> None:
    doc = {
        "workload": {"name": "azure-conv", "num_requests": None, "max_prompt_len": None},
        "arrivals": {"process": "replay"},
        "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
        "engine": args.engine,
    }
    wall, res = timed(doc, args.repeats)
    steps = res.extra["num_steps"]
    ff = res.extra.get("num_fast_forwarded_steps", 0.0)
    print(
        f"azure-conv replay ({args.engine}): {len(res.requests)} requests "
        f"({int(res.summary['num_finished'])} finished), {int(steps)} steps "
        f"({ff / steps:.1%} fast-forwarded), simulated {res.extra['makespan_s']:.0f} s"
    )
    print(f"wall (trace + simulation): {wall:.2f} s   peak RSS: {peak_rss_mib():.0f} MiB")


def bench_saturate(args) -> None:
    doc = {
        "workload": {
            "name": "synthetic",
            "num_requests": args.num_requests,
            "prompt": {"dist": "lognormal", "mean": 256.0, "cv": 0.5},
            "output": {"dist": "lognormal", "mean": 128.0, "cv": 0.5},
        },
        "arrivals": {"process": "burst"},
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
        "engine": args.engine,
    }
    wall, res = timed(doc)
    steps = res.extra["num_steps"]
    ff = res.extra.get("num_fast_forwarded_steps", 0.0)
    print(
        f"saturate ({args.engine}): {args.num_requests} requests, {int(steps)} steps "
        f"({ff / steps:.1%} fast-forwarded), avg batch {res.summary['avg_batch_size']:.0f}"
    )
    print(
        f"wall: {wall:.2f} s ({args.num_requests / wall:,.0f} req/s)   "
        f"peak RSS: {peak_rss_mib():.0f} MiB"
    )


def bench_sweep(args) -> None:
    rates = [0.5 + 4.5 * i / max(args.num_points - 1, 1) for i in range(args.num_points)]
    start = time.perf_counter()
    for rate in rates:
        simulate(
            run_spec_from_dict(
                {
                    **SHAREGPT,
                    "workload": {"name": "sharegpt", "num_requests": args.num_requests},
                    "arrivals": {"process": "poisson", "rate_req_s": rate},
                    "engine": args.engine,
                }
            )
        )
    wall = time.perf_counter() - start
    print(
        f"sweep ({args.engine}): {args.num_points} points x {args.num_requests} ShareGPT "
        f"requests, rates 0.5-5 req/s: {wall:.2f} s ({wall / args.num_points:.3f} s/point)   "
        f"peak RSS: {peak_rss_mib():.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("case", choices=["sharegpt", "azure", "saturate", "sweep"])
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--num-points", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--engine", choices=["fast", "step"], default="fast")
    args = parser.parse_args()
    defaults = {"sharegpt": 10_000, "azure": None, "saturate": 1_000_000, "sweep": 1000}
    if args.num_requests is None:
        args.num_requests = defaults[args.case]
    {
        "sharegpt": bench_sharegpt,
        "azure": bench_azure,
        "saturate": bench_saturate,
        "sweep": bench_sweep,
    }[args.case](args)


if __name__ == "__main__":
    main()
