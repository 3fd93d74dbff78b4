"""The engine's speed: wall time, steps per second, peak memory, and the same cases
on another pagesim build for comparison.

    python benchmarks/bench_engine.py [CASE ...] [--baseline PYTHON] [--repeats R]
        [--azure-csv PATH] [--num-requests N]

CASE is any of ``sharegpt``, ``azure``, ``saturate``, ``beam``, ``parallel``, ``prefix``,
``orca``, ``v1`` (default: all). Every case runs in a child process (so peak memory is its
own) and prints the median wall time of its repeats, simulated requests and engine
steps per second, and the child's peak resident memory.

It starts with where its figures come from: this build's commit and whether its
engine modules run compiled (``pagesim._native``), the Python, the machine's processor
and cores, and the load average when it started (the wall-time targets are absolute
seconds, and the machines it runs on differ in speed; compare builds by their ratio in
one sitting, not by figures from different machines).

After each case with a target it prints the target (wall time, peak memory) and
whether this run met it.

``--baseline PYTHON`` runs each case a second time under another Python environment
with pagesim installed (for instance a checkout of an earlier commit, ``pip install
-e`` into its own venv), right after this build, and prints the ratio and whether
both gave the same results (requests finished and rejected, steps, throughput; to
1e-9). The children run with ``python -P`` (no current directory on ``sys.path``), so
each imports the pagesim its environment installed wherever the command is run.

Cases (targets in parentheses):

- sharegpt: 10,000 ShareGPT requests, OPT-13B on A100-40GB, vllm, paged blocks of 16,
  Poisson at 2 req/s (<= 1.0 s);
- azure: the Azure LLM conversation trace (19,366 requests, ``--azure-csv``, default
  ``../shared/data/azure_llm_2023/conv.csv`` beside the repository) replayed at its
  timestamps on Llama-2-7B / A100-80GB with max_model_len 4096, timed as a whole
  process: interpreter start, imports, trace loading, simulation (<= 1.5 s);
- saturate: 1,000,000 synthetic requests (lognormal prompt 256 / output 128, cv 0.5)
  all at t = 0, OPT-13B / A100-40GB (<= 40 s, peak RSS <= 1.5 GiB);
- beam, parallel, prefix: 10,000 requests each with beam width 4 (alpaca-like, 8 req/s),
  n = 4 parallel samples (alpaca-like, 8 req/s), and prefix caching over a 256-token
  shared system prompt (ShareGPT, 2 req/s);
- orca: Orca (Max) over a buddy heap, ShareGPT at 2 req/s, 3,000 requests, the Figure 2
  KV pool of 15,728 slots;
- v1: the sharegpt case under vLLM V1's scheduler and KV cache manager (``vllm-v1`` on
  ``paged-v1``, prefix caching on, as V1 runs), timed beside the sharegpt case itself
  (``vllm``) in the same sitting, with the ratio of the two (<= 1.5x ``vllm``'s time).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_AZURE = ROOT.parent / "shared" / "data" / "azure_llm_2023" / "conv.csv"

POISSON = {"process": "poisson", "rate_req_s": 2.0}
ALPACA = {"name": "alpaca-like", "num_requests": 10_000}
SHAREGPT = {
    "workload": {"name": "sharegpt", "num_requests": 10_000},
    "arrivals": POISSON,
    "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm"},
}


def variant(repeats: int, **parts: dict) -> dict:
    """A case on the ShareGPT case's model, GPU, allocator and scheduler, with ``parts``
    (workload, arrivals, ...) in place of its own."""
    return {"doc": {**SHAREGPT, **parts}, "repeats": repeats}


CASES: dict[str, dict] = {
    "sharegpt": {
        "doc": SHAREGPT,
        "repeats": 3,
        "target": {"max_wall_s": 1.0},
    },
    "azure": {
        "doc": {
            "workload": {
                "name": "csv",
                "path": "AZURE_CSV",
                "num_requests": None,
                "max_prompt_len": None,
                "min_len": 1,
            },
            "arrivals": {"process": "replay"},
            "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb"},
            "scheduler": {"kind": "vllm", "max_num_batched_tokens": 4096},
            "max_model_len": 4096,
        },
        "repeats": 3,
        "whole_process": True,
        "target": {"max_wall_s": 1.5},
    },
    "saturate": {
        "doc": {
            "workload": {
                "name": "synthetic",
                "num_requests": 1_000_000,
                "prompt": {"dist": "lognormal", "mean": 256.0, "cv": 0.5},
                "output": {"dist": "lognormal", "mean": 128.0, "cv": 0.5},
            },
            "arrivals": {"process": "burst"},
            "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
        },
        "repeats": 1,
        "target": {"max_wall_s": 40.0, "max_rss_mib": 1536.0},
    },
    "beam": variant(
        1, workload={**ALPACA, "beam_width": 4}, arrivals={**POISSON, "rate_req_s": 8.0}
    ),
    "parallel": variant(1, workload={**ALPACA, "n": 4}, arrivals={**POISSON, "rate_req_s": 8.0}),
    "prefix": variant(
        1,
        workload={"name": "sharegpt", "num_requests": 10_000, "shared_prefix_len": 256},
        allocator={"kind": "paged", "block_size": 16, "prefix_caching": True},
    ),
    "orca": variant(
        3,
        workload={"name": "sharegpt", "num_requests": 3_000},
        hardware={"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15_728},
        scheduler={"kind": "orca"},
        allocator={"kind": "max"},
    ),
    "v1": {
        "doc": {
            **SHAREGPT,
            "allocator": {"kind": "paged-v1", "block_size": 16},
            "scheduler": {"kind": "vllm-v1"},
        },
        "beside": SHAREGPT,
        "repeats": 3,
        "target": {"max_ratio_beside": 1.5},
    },
}

#: run in the child: simulate the case `repeats` times, print one JSON line
CHILD = r"""
import json, resource, statistics, sys, time
start = time.perf_counter()
from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict
doc, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
spec = run_spec_from_dict(doc)
walls = []
for _ in range(repeats):
    t = time.perf_counter()
    res = simulate(spec)
    walls.append(time.perf_counter() - t)
s = res.summary
print(json.dumps({
    "wall_s": statistics.median(walls),
    "process_s": time.perf_counter() - start,
    "requests": len(res.requests),
    "steps": res.extra["num_steps"],
    "finished": s["num_finished"], "rejected": s["num_rejected"],
    "throughput_tok_s": s["throughput_tok_s"], "mem_token_frac": s["mem_token_frac"],
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def run_child(python: str, doc: dict, repeats: int, whole_process: bool) -> dict:
    """One case in a child process; whole-process cases are timed from outside, once per
    repeat (interpreter start included), and report the median."""
    import statistics
    import time

    walls, info = [], {}
    for _ in range(repeats if whole_process else 1):
        start = time.perf_counter()
        out = subprocess.run(
            [python, "-P", "-c", CHILD, json.dumps(doc), "1" if whole_process else str(repeats)],
            check=True,
            capture_output=True,
            text=True,
        )
        walls.append(time.perf_counter() - start)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    if whole_process:
        info["wall_s"] = statistics.median(walls)
    return info


def same(a: dict, b: dict) -> bool:
    keys = ("requests", "steps", "finished", "rejected", "throughput_tok_s", "mem_token_frac")
    return all(math.isclose(a[k], b[k], rel_tol=1e-9) for k in keys)


def processor_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.startswith("model name"):
                    return row.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown processor"


def build_commit(python: str) -> str:
    """The commit of the pagesim checkout that ``python`` imports (its short hash, with
    "+changes" when the work tree differs from it), or why there is none."""
    out = subprocess.run(
        [
            python,
            "-P",
            "-c",
            "import pagesim, pathlib; print(pathlib.Path(pagesim.__file__).parents[1])",
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        return "pagesim not importable"
    root = out.stdout.strip()
    head = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        return f"{root} (not a git checkout)"
    dirty = subprocess.run(
        ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head.stdout.strip() + (" +changes" if dirty else "")


def engine_modules(python: str) -> str:
    """Whether ``python``'s pagesim runs the engine's modules compiled (``pagesim._native``)."""
    out = subprocess.run(
        [python, "-P", "-c", "from pagesim import _native; print(_native.status)"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else "pure Python (a build before mypyc)"


def where(baseline: str | None) -> list[str]:
    """The header: the builds compared and the machine they run on."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    rows = [
        f"this build: {build_commit(sys.executable)}, engine modules {engine_modules(sys.executable)}"
        f"   Python {platform.python_version()}",
        f"machine: {processor_name()}, {os.cpu_count()} logical cores, {platform.system()}; "
        f"load average {load} at the start",
    ]
    if baseline:
        rows.insert(
            1,
            f"baseline: {build_commit(baseline)}, engine modules {engine_modules(baseline)}"
            f"   ({baseline})",
        )
    return rows


def line(label: str, info: dict) -> str:
    wall = info["wall_s"]
    return (
        f"  {label}: {wall:.3f} s   {info['requests'] / wall:,.0f} simulated req/s   "
        f"{info['steps'] / wall:,.0f} steps/s   peak RSS {info['rss_mib']:.0f} MiB"
    )


def verdicts(target: dict, this: dict) -> list[str]:
    """Each of the case's targets, met or not."""
    out = []
    if "max_wall_s" in target:
        limit, wall = target["max_wall_s"], this["wall_s"]
        out.append(f"<= {limit:g} s: {'met' if wall <= limit else 'not met'} ({wall:.3f} s)")
    if "max_rss_mib" in target:
        limit, rss = target["max_rss_mib"], this["rss_mib"]
        out.append(
            f"peak RSS <= {limit:,.0f} MiB: {'met' if rss <= limit else 'not met'} ({rss:,.0f} MiB)"
        )
    if "max_ratio_beside" in target:
        limit, ratio = target["max_ratio_beside"], this["ratio_beside"]
        out.append(
            f"<= {limit:g}x the time of the case beside it: "
            f"{'met' if ratio <= limit else 'not met'} ({ratio:.2f}x)"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cases", nargs="*", choices=list(CASES), default=[])
    parser.add_argument("--baseline", metavar="PYTHON", help="another build's python, to compare")
    parser.add_argument("--repeats", type=int, help="repeats per case (default: per case)")
    parser.add_argument("--num-requests", type=int, help="override every case's request count")
    parser.add_argument("--azure-csv", type=Path, default=DEFAULT_AZURE)
    args = parser.parse_args()
    for row in where(args.baseline):
        print(row, flush=True)
    for name in args.cases or list(CASES):
        case = CASES[name]
        doc = json.loads(json.dumps(case["doc"]))
        if name == "azure":
            if not args.azure_csv.is_file():
                print(f"azure: skipped: {args.azure_csv} not found (give --azure-csv PATH)")
                continue
            doc["workload"]["path"] = str(args.azure_csv)
        if args.num_requests and doc["workload"].get("num_requests"):
            doc["workload"]["num_requests"] = args.num_requests
        repeats = args.repeats or case["repeats"]
        whole = case.get("whole_process", False)
        print(f"{name}: {json.dumps(doc)}  (median of {repeats})", flush=True)
        this = run_child(sys.executable, doc, repeats, whole)
        print(
            line("this build", this)
            + (f"   (whole process; {this['process_s']:.2f} s in the last run)" if whole else ""),
            flush=True,
        )
        print(
            f"    {int(this['requests']):,} requests, {int(this['finished']):,} finished, "
            f"{int(this['rejected']):,} rejected, {int(this['steps']):,} steps",
            flush=True,
        )
        if "beside" in case:
            beside_doc = json.loads(json.dumps(case["beside"]))
            if args.num_requests:
                beside_doc["workload"]["num_requests"] = args.num_requests
            beside = run_child(sys.executable, beside_doc, repeats, whole)
            this["ratio_beside"] = this["wall_s"] / beside["wall_s"]
            print(line(f"beside it, {json.dumps(beside_doc['scheduler'])}", beside), flush=True)
            print(f"    this case / beside it: {this['ratio_beside']:.2f}x the time", flush=True)
        if args.baseline:
            base = run_child(args.baseline, doc, repeats, whole)
            print(line("baseline", base), flush=True)
            print(
                f"    this build / baseline: {this['wall_s'] / base['wall_s']:.2f}x the time "
                f"({base['wall_s'] / this['wall_s']:.1f}x the speed)   same results: "
                f"{same(this, base)}",
                flush=True,
            )
        if "target" in case:
            if args.num_requests and name != "azure":
                print("    target: not judged (--num-requests changes the case)", flush=True)
            else:
                for verdict in verdicts(case["target"], this):
                    print(f"    target: {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
