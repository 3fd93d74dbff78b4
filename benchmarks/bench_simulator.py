"""Step-engine speed (``engine: step``, the SimPy reference): ShareGPT, OPT-13B on one
A100-40GB, vLLM scheduler, paged blocks of 16, 10,000 requests at 2 req/s. Prints wall
seconds and simulated steps per second. The fast engine: ``bench_fastengine.py``.

    python benchmarks/bench_simulator.py [--num-requests N] [--repeats R]

Target: under 20 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    spec = run_spec_from_dict(
        {
            "workload": {"name": "sharegpt", "num_requests": args.num_requests},
            "arrivals": {"process": "poisson", "rate_req_s": 2.0},
            "hardware": {"model": "opt-13b", "gpu": "a100-40gb"},
            "allocator": {"kind": "paged", "block_size": 16},
            "scheduler": {"kind": "vllm"},
            "engine": "step",
        }
    )
    walls, steps = [], 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = simulate(spec)
        walls.append(time.perf_counter() - start)
        steps = result.extra["num_steps"]
    wall = statistics.median(walls)
    print(
        f"requests: {args.num_requests}  steps: {int(steps)}  simulated: {result.extra['makespan_s']:.0f} s"
    )
    print(f"wall: {wall:.2f} s (median of {len(walls)})  steps/s: {steps / wall:,.0f}")


if __name__ == "__main__":
    main()
