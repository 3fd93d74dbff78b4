"""Wall time of build_trace for large traces (run: python benchmarks/bench_workloads.py).

Prints one line per case: workload, requests, seconds (best of 3). A case on external
data that is not prepared (azure-conv) prints why it was skipped and what to fetch.
"""

from __future__ import annotations

import time

import numpy as np

from pagesim.errors import DataError
from pagesim.workloads import ArrivalSpec, LengthDist, WorkloadSpec, build_trace

CASES = [
    WorkloadSpec(name="synthetic", num_requests=1_000_000,
                 prompt=LengthDist(dist="lognormal", mean=161.0, cv=1.0, high=1024)),
    WorkloadSpec(name="synthetic", num_requests=1_000_000, shared_prefix_len=64),
    WorkloadSpec(name="sharegpt", num_requests=1_000_000),
    WorkloadSpec(name="azure-conv", num_requests=1_000_000),
    WorkloadSpec(name="sharegpt-chat", num_requests=100_000),
]  # fmt: skip


def main() -> None:
    arrivals = ArrivalSpec(process="poisson", rate_req_s=10.0)
    for spec in CASES:
        best = float("inf")
        try:
            for _ in range(3):
                start = time.perf_counter()
                rng = np.random.default_rng(0)
                trace = build_trace(spec, arrivals, max_model_len=2048, rng=rng)
                best = min(best, time.perf_counter() - start)
        except DataError as exc:
            print(f"{spec.name:<14} skipped: {exc}")
            continue
        extra = f" shared_prefix_len={spec.shared_prefix_len}" if spec.shared_prefix_len else ""
        print(f"{spec.name:<14}{extra:<22} {len(trace):>9,} requests  {best:6.2f} s")


if __name__ == "__main__":
    main()
