"""A fleet's speed: cost per simulated request of R replicas behind a router, against one
replica replaying 1/R of the requests at 1/R of the rate.

    python benchmarks/bench_fleet.py [--replicas R] [--num-requests N] [--router NAME]
        [--repeats K] [--rate-per-replica X]

Default: 64 replicas replaying 1,000,000 synthetic requests (lognormal prompt 256 /
output 128, cv 0.5, OPT-13B on A100-40GB, vllm on paged blocks of 16) arriving as a
Poisson process at 4 req/s per replica (256 req/s for the fleet): loaded, not
overloaded (one replica alone at 4 req/s: 18 requests a decode step, 41% of the KV pool
holding tokens, TTFT p99 0.13 s, no preemption; at 6 req/s it preempts and its TTFT p99
reaches seconds; it serves at most ~6.5 req/s). The summary lines print the TTFT p99 to
show it. The single replica replays 1/R of the requests (15,625) at 4 req/s. Both run in child processes, one after the other, in one
sitting; each prints the median wall time of its repeats, and the ratio is

    (fleet wall time / fleet requests) / (single wall time / single requests)

with its target (<= 1.5x). As ``bench_engine.py``, it starts with this build's commit,
whether its engine modules run compiled, the Python and the machine; compare figures
from one sitting, not across machines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import where  # noqa: E402  (the header's build and machine lines)

sys.path.pop(0)

#: the ratio of costs per request the fleet must stay within
MAX_RATIO = 1.5

CHILD = r"""
import json, resource, statistics, sys, time
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
    "wall_s": statistics.median(walls), "walls": walls,
    "requests": len(res.requests), "finished": s["num_finished"],
    "steps": res.extra["num_steps"], "ttft_s_p99": s["ttft_s_p99"],
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def doc_of(num_requests: int, rate_req_s: float, replicas: int, router: str) -> dict:
    doc = {
        "workload": {
            "name": "synthetic",
            "num_requests": num_requests,
            "prompt": {"dist": "lognormal", "mean": 256.0, "cv": 0.5},
            "output": {"dist": "lognormal", "mean": 128.0, "cv": 0.5},
        },
        "arrivals": {"process": "poisson", "rate_req_s": rate_req_s},
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
        "allocator": {"kind": "paged", "block_size": 16},
        "scheduler": {"kind": "vllm"},
    }
    if replicas > 1:
        doc["cluster"] = {"replicas": replicas, "router": router}
    return doc


def run_child(doc: dict, repeats: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, json.dumps(doc), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(label: str, info: dict) -> None:
    per_req_us = 1e6 * info["wall_s"] / info["requests"]
    print(
        f"  {label}: {info['wall_s']:.2f} s (runs: {', '.join(f'{w:.2f}' for w in info['walls'])})"
        f"   {per_req_us:.1f} us per request   {int(info['requests']):,} requests, "
        f"{int(info['finished']):,} finished, {int(info['steps']):,} steps, "
        f"TTFT p99 {info['ttft_s_p99']:.3f} s, peak RSS {info['rss_mib']:.0f} MiB",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=1_000_000)
    parser.add_argument("--router", default="round-robin")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate-per-replica", type=float, default=4.0)
    args = parser.parse_args()
    for row in where(None):
        print(row, flush=True)
    r = args.replicas
    single_doc = doc_of(args.num_requests // r, args.rate_per_replica, 1, args.router)
    fleet_doc = doc_of(args.num_requests, args.rate_per_replica * r, r, args.router)
    print(f"single: {json.dumps(single_doc)}  (median of {args.repeats})", flush=True)
    single = run_child(single_doc, args.repeats)
    show("single replica", single)
    print(f"fleet: {json.dumps(fleet_doc)}  (median of {args.repeats})", flush=True)
    fleet = run_child(fleet_doc, args.repeats)
    show(f"{r} replicas", fleet)
    ratio = (fleet["wall_s"] / fleet["requests"]) / (single["wall_s"] / single["requests"])
    verdict = "met" if ratio <= MAX_RATIO else "not met"
    print(f"  cost per request, fleet / single: {ratio:.2f}x   target <= {MAX_RATIO}x: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
