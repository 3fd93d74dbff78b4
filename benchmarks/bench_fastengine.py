"""The fast engine against the step engine: wall time, throughput, peak memory, same results.

    python benchmarks/bench_fastengine.py sharegpt [--num-requests N] [--repeats R]
    python benchmarks/bench_fastengine.py azure    [--repeats R] [--engine E]
    python benchmarks/bench_fastengine.py saturate [--num-requests N] [--engine E]
    python benchmarks/bench_fastengine.py sweep    [--num-points P] [--num-requests N] [--engine E]
    python benchmarks/bench_fastengine.py orca     [--num-requests N] [--repeats R]
    python benchmarks/bench_fastengine.py all

Every case prints wall time (median of the repeats), simulated requests per second,
engine steps per second and peak resident memory.

- sharegpt (a): ShareGPT, OPT-13B on A100-40GB, vllm, paged blocks of 16, 10,000
  requests at 2 req/s; both engines, the speed-up measured in this invocation, and
  whether requests, summaries and time series agree (counts exactly, times to 1e-9
  relative). Targets: fast under 2 s and at least 20x the step engine.
- azure (b): the Azure LLM conversation trace replayed at its timestamps on
  Llama-2-7B / A100-80GB (max_model_len 4096, Llama-2's context; every request whose
  prompt + output fits it). Timed as a whole process (``python -c``: imports, trace
  loading, simulation, results), in a child process. Target: under 2 s.
- saturate (c): N synthetic requests (prompt and output lognormal, means 256 / 128,
  cv 0.5) all at t = 0, OPT-13B / A100-40GB. Target for N = 1,000,000: under 60 s and
  2 GiB peak memory.
- orca: the Figure 2 Orca (Max) baseline, ShareGPT at 2 req/s on OPT-13B / A100-40GB
  with 15,728 KV slots (memory-bound: the queue's head waits on most steps); both
  engines, speed-up, same results.
- sweep (d): P ShareGPT runs (N requests each) over arrival rates 0.5-5 req/s, one
  process, one after another. Target: report.

Peak RSS is the process's high-water mark (``resource.getrusage``), so within one
invocation it includes every earlier run; the azure case reports its child's.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import subprocess
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

AZURE = {
    "workload": {"name": "azure-conv", "num_requests": None, "max_prompt_len": None, "min_len": 1},
    "arrivals": {"process": "replay"},
    "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
    "scheduler": {"kind": "vllm", "max_num_batched_tokens": 4096},
    "max_model_len": 4096,
}

AZURE_CHILD = """
import json, sys, time
start = time.perf_counter()
from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict
res = simulate(run_spec_from_dict(json.loads(sys.argv[1])))
print(json.dumps({"requests": len(res.requests), "finished": res.summary["num_finished"],
                  "rejected": res.summary["num_rejected"], "steps": res.extra["num_steps"],
                  "makespan_s": res.extra["makespan_s"], "fast": res.extra.get("fast_engine", 0.0),
                  "in_process_s": time.perf_counter() - start}))
"""


def peak_rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    kib = resource.getrusage(who).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def timed(doc: dict, repeats: int = 1):
    spec = run_spec_from_dict(doc)
    walls, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = simulate(spec)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), result


def rates_line(label: str, wall: float, res) -> str:
    steps = res.extra["num_steps"]
    return (
        f"{label}: {wall:.2f} s   {len(res.requests) / wall:,.0f} simulated req/s   "
        f"{steps / wall:,.0f} steps/s"
    )


def same_results(a, b, rtol: float = 1e-9) -> bool:
    """Requests, summaries and time series agree: counts exactly, floats to ``rtol``."""

    def close(u, v) -> bool:
        if isinstance(u, float) or isinstance(v, float):
            return (math.isnan(u) and math.isnan(v)) or math.isclose(
                u, v, rel_tol=rtol, abs_tol=1e-12
            )
        return u == v

    for x, y in ((a.requests, b.requests), (a.timeseries, b.timeseries)):
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return False
        for col in x.columns:
            if not all(close(u, v) for u, v in zip(x[col].tolist(), y[col].tolist(), strict=True)):
                return False
    return all(close(v, b.summary[k]) for k, v in a.summary.items() if k != "sim_wall_s")


def compare_engines(doc: dict, repeats: int):
    """Both engines on ``doc`` (median walls); prints the comparison; returns the fast result."""
    fast_wall, fast = timed({**doc, "engine": "fast"}, repeats)
    step_wall, step = timed({**doc, "engine": "step"}, repeats)
    print(rates_line("  step engine", step_wall, step))
    print(rates_line("  fast engine", fast_wall, fast))
    print(
        f"  speed-up: {step_wall / fast_wall:.1f}x   same results: {same_results(step, fast)}   "
        f"fast engine ran: {fast.extra['fast_engine'] == 1.0}   peak RSS: {peak_rss_mib():.0f} MiB"
    )
    return fast


def bench_sharegpt(args) -> None:
    doc = {**SHAREGPT, "workload": {"name": "sharegpt", "num_requests": args.num_requests}}
    print(f"(a) sharegpt: {args.num_requests} requests at 2 req/s; median of {args.repeats}")
    fast = compare_engines(doc, args.repeats)
    print(f"  {int(fast.extra['num_steps'])} steps, simulated {fast.extra['makespan_s']:.0f} s")


def bench_orca(args) -> None:
    doc = {
        **SHAREGPT,
        "workload": {"name": "sharegpt", "num_requests": args.num_requests},
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15728},
        "scheduler": {"kind": "orca"},
        "allocator": {"kind": "max"},
    }
    print(f"orca (max): {args.num_requests} requests at 2 req/s; median of {args.repeats}")
    fast = compare_engines(doc, args.repeats)
    print(f"  {int(fast.extra['num_steps'])} steps, avg batch {fast.summary['avg_batch_size']:.1f}")


def bench_azure(args) -> None:
    import json

    from pagesim import datapaths

    if not datapaths.is_prepared("azure-conv"):  # external data: never shipped
        print("(b) azure-conv replay skipped: " + datapaths.get_dataset("azure-conv").missing_message(
            datapaths.data_dir()))  # fmt: skip
        return
    doc = {**AZURE, "engine": args.engine}
    walls, info = [], {}
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", AZURE_CHILD, json.dumps(doc)],
            check=True,
            capture_output=True,
            text=True,
        )
        walls.append(time.perf_counter() - start)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    wall = statistics.median(walls)
    print(
        f"(b) azure-conv replay ({args.engine} engine ran: {info['fast'] == 1.0}): "
        f"{info['requests']} requests ({int(info['finished'])} finished, "
        f"{int(info['rejected'])} rejected), {int(info['steps'])} steps, "
        f"simulated {info['makespan_s']:.0f} s"
    )
    print(
        f"  whole process: {wall:.2f} s (median of {len(walls)}; {info['in_process_s']:.2f} s after "
        f"interpreter start)   {info['requests'] / wall:,.0f} simulated req/s   "
        f"{info['steps'] / wall:,.0f} steps/s   peak RSS: {peak_rss_mib(resource.RUSAGE_CHILDREN):.0f} MiB"
    )


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
    wall, res = timed(doc, args.repeats)
    print(
        f"(c) saturate ({args.engine}): {args.num_requests:,} requests at t = 0, "
        f"{int(res.extra['num_steps']):,} steps, {int(res.summary['num_preemptions']):,} preemptions, "
        f"avg batch {res.summary['avg_batch_size']:.1f}, {int(res.summary['num_finished']):,} finished"
    )
    print(rates_line("  wall", wall, res) + f"   peak RSS: {peak_rss_mib():.0f} MiB")


def bench_sweep(args) -> None:
    points = args.num_points
    rates = [0.5 + 4.5 * i / max(points - 1, 1) for i in range(points)]
    num_steps = num_requests = 0
    start = time.perf_counter()
    for rate in rates:
        res = simulate(
            run_spec_from_dict(
                {
                    **SHAREGPT,
                    "workload": {"name": "sharegpt", "num_requests": args.num_requests},
                    "arrivals": {"process": "poisson", "rate_req_s": rate},
                    "engine": args.engine,
                }
            )
        )
        num_steps += res.extra["num_steps"]
        num_requests += len(res.requests)
    wall = time.perf_counter() - start
    print(
        f"(d) sweep ({args.engine}): {points} points x {args.num_requests:,} ShareGPT requests, "
        f"rates 0.5-5 req/s: {wall:.2f} s ({wall / points:.3f} s/point)"
    )
    print(
        f"  {num_requests / wall:,.0f} simulated req/s   {num_steps / wall:,.0f} steps/s   "
        f"peak RSS: {peak_rss_mib():.0f} MiB"
    )


CASES = {
    "sharegpt": bench_sharegpt,
    "azure": bench_azure,
    "saturate": bench_saturate,
    "sweep": bench_sweep,
    "orca": bench_orca,
}
DEFAULT_REQUESTS = {
    "sharegpt": 10_000,
    "azure": None,
    "saturate": 1_000_000,
    "sweep": 2_000,
    "orca": 3_000,
}
DEFAULT_REPEATS = {"sharegpt": 3, "azure": 3, "saturate": 1, "sweep": 1, "orca": 3}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("case", choices=[*CASES, "all"])
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--num-points", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--engine", choices=["fast", "step"], default="fast")
    args = parser.parse_args()
    for case in CASES if args.case == "all" else [args.case]:
        case_args = argparse.Namespace(**vars(args))
        if case_args.num_requests is None:
            case_args.num_requests = DEFAULT_REQUESTS[case]
        if case_args.repeats is None:
            case_args.repeats = DEFAULT_REPEATS[case]
        CASES[case](case_args)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
