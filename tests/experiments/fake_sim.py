"""A small deterministic stand-in for ``pagesim.simulator.simulate``.

Its numbers are a pure function of the RunSpec (allocator, block size, rate, seed),
shaped like a RunResult, so runner, cache, aggregation and charts can be tested
without the simulator. ``sim_wall_s`` is real wall time, so it differs run to run
like the real one does.
"""

from __future__ import annotations

import time
import zlib

import numpy as np
import pandas as pd

from pagesim.simulator.result import METRIC_COLUMNS, REQUEST_COLUMNS, RunResult
from pagesim.simulator.spec import RunSpec

ALLOCATOR_TO_TOKEN_FRAC = {"max": 0.2, "pow2": 0.27, "oracle": 0.38, "paged": 0.9}


def fake_simulate(spec: RunSpec, *, trace=None, progress=False) -> RunResult:
    start = time.perf_counter()
    key = (
        f"{spec.allocator.kind}|{spec.allocator.block_size}|{spec.arrivals.rate_req_s}|{spec.seed}"
    )
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    token = ALLOCATOR_TO_TOKEN_FRAC[spec.allocator.kind] + 0.01 * rng.random()
    reserved = (1 - token) * 0.3
    internal = (1 - token) * 0.3
    external = (1 - token) * 0.2
    unused = 1 - token - reserved - internal - external
    rate = spec.arrivals.rate_req_s or 1.0
    num_requests = spec.workload.num_requests or 10
    summary = {name: float(rng.random()) for name in METRIC_COLUMNS}
    summary.update(
        throughput_req_s=rate * (0.5 + token),
        normalized_latency_s_per_tok=0.05 * rate / token + 0.001 * spec.allocator.block_size,
        avg_batch_size=30.0 * token,
        mem_token_frac=token,
        mem_reserved_frac=reserved,
        mem_internal_frag_frac=internal,
        mem_external_frag_frac=external,
        mem_unused_frac=unused,
        num_finished=float(num_requests),
        num_rejected=0.0,
    )
    requests = pd.DataFrame(
        {col: np.arange(num_requests, dtype=float) * 0.5 for col in REQUEST_COLUMNS}
    ).assign(status="finished", reason="")
    t_s = np.arange(5, dtype=float)
    timeseries = pd.DataFrame(
        {
            "t_s": t_s,
            "mem_token_frac": token * (1 - np.exp(-t_s)),
            "mem_reserved_frac": reserved,
            "mem_internal_frag_frac": internal,
            "mem_external_frag_frac": external,
            "mem_unused_frac": unused,
            "batch_size": 30.0 * token,
        }
    )
    summary["sim_wall_s"] = time.perf_counter() - start
    return RunResult(summary, requests, timeseries, extra={"mem_sharing_saved_frac": 0.1 * token})
