"""Intervals' cost: 20 replicates of the 10k-request ShareGPT benchmark, on one core.

    python benchmarks/bench_intervals.py [--replicates 20] [--requests 10000]

Runs `pagesim run` of one point (ShareGPT, 2 req/s, OPT-13B on an A100-80GB with the
a100-80gb-vidur profile) with ``--intervals 90`` into a temporary folder, ``--jobs 1``,
sources seeds and cost, and prints the wall time of the whole command (Python start and
outputs included) and per replicate. The target (docs/intervals.md): at most 10 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXPERIMENT = """
name: bench_intervals
base:
  workload: {{name: sharegpt, num_requests: {requests}}}
  arrivals: {{process: poisson, rate_req_s: 2.0}}
  hardware: {{gpu: a100-80gb, profile: a100-80gb-vidur}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_intervals.yaml"
        path.write_text(EXPERIMENT.format(requests=args.requests))
        cmd = [
            sys.executable, "-m", "pagesim", "run", str(path), "--out", str(Path(tmp) / "out"),
            "--jobs", "1", "--intervals", "90", "--replicates", str(args.replicates),
            "--spread", "seeds,cost",
        ]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - start
    print(
        f"intervals: {args.replicates} replicates of {args.requests:,} ShareGPT requests, one core: "
        f"{wall:.2f} s ({wall / args.replicates:.3f} s per replicate); target <= 10 s: "
        f"{'met' if wall <= 10 else 'missed'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
