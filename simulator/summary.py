"""Per-request rows and the run's summary row (METRIC_COLUMNS).

Per request (REQUEST_COLUMNS): TTFT = first token − arrival; TPOT = (finish − first
token) / (output_len − 1) (NaN for one-token outputs); e2e = finish − arrival;
normalized latency = e2e / output_len (the paper's metric, §6.1). Rejected and
unfinished requests have NaN times. (``simulator.request_log.RequestLog.frame``
builds that table; this module summarises it.)

Summary: latency statistics are over finished requests. Throughput is over the
makespan (first arrival to the end of the last step): ``throughput_req_s`` counts
finished requests, ``throughput_tok_s`` their returned tokens (``output_len`` × n for
parallel sampling; ``output_len`` for beam search, which returns one beam).
``num_preemptions`` counts preemption events (recompute and swap);
``num_swapped_blocks`` blocks moved either way over PCIe.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.request import FINISHED, REJECTED, UNFINISHED
from pagesim.simulator.result import METRIC_COLUMNS, RunResult


def summarize(
    requests: pd.DataFrame,
    recorder: StepRecorder,
    *,
    makespan_s: float,
    num_preemptions: int,
    prefix_hit_rate: float,
    sim_wall_s: float,
) -> dict[str, float]:
    is_finished = requests["status"] == FINISHED
    num_finished = int(is_finished.sum())

    def finished(col: str) -> pd.Series:
        """One column of the finished requests (not a copy of the whole table)."""
        return requests.loc[is_finished, col]

    out_tokens = (
        np.where(finished("beam_width").to_numpy() > 1, 1, finished("n").to_numpy())
        * finished("output_len").to_numpy()
    )

    def pct(col: str, q: float) -> float:
        v = finished(col).to_numpy(dtype=np.float64)
        v = v[~np.isnan(v)]
        return float(np.percentile(v, q)) if len(v) else float("nan")

    summary: dict[str, float] = {
        "throughput_req_s": num_finished / makespan_s if makespan_s > 0 else 0.0,
        "throughput_tok_s": float(out_tokens.sum()) / makespan_s if makespan_s > 0 else 0.0,
        "normalized_latency_s_per_tok": (
            float(finished("normalized_latency_s_per_tok").mean()) if num_finished else float("nan")
        ),
        "ttft_s_p50": pct("ttft_s", 50),
        "ttft_s_p99": pct("ttft_s", 99),
        "tpot_s_p50": pct("tpot_s", 50),
        "tpot_s_p99": pct("tpot_s", 99),
        "e2e_s_p50": pct("e2e_s", 50),
        "e2e_s_p99": pct("e2e_s", 99),
        "avg_batch_size": recorder.avg_batch_size,
        **recorder.mem_fracs(),
        "num_preemptions": float(num_preemptions),
        "num_swapped_blocks": float(recorder.num_swapped_blocks),
        "prefix_hit_rate": prefix_hit_rate,
        "num_finished": float(num_finished),
        "num_rejected": float((requests["status"] == REJECTED).sum()),
        "sim_wall_s": sim_wall_s,
    }
    assert tuple(summary) == METRIC_COLUMNS, "summary keys drifted from METRIC_COLUMNS"
    return summary


def run_result(
    trace,
    requests: pd.DataFrame,
    recorder: StepRecorder,
    *,
    end_s: float,
    num_preemptions: int,
    prefix_hit_rate: float,
    wall_start: float,
) -> RunResult:
    """The RunResult of a replay that ended at ``end_s`` (either engine): summary row
    (makespan from the first arrival), extra values, time series."""
    first_arrival = float(trace.table["arrival_s"].iloc[0]) if trace.num_requests else 0.0
    makespan_s = end_s - first_arrival
    summary = summarize(
        requests,
        recorder,
        makespan_s=makespan_s,
        num_preemptions=num_preemptions,
        prefix_hit_rate=prefix_hit_rate,
        sim_wall_s=time.perf_counter() - wall_start,
    )
    extra = {
        "makespan_s": makespan_s,
        "num_steps": float(recorder.num_steps),
        "num_unfinished": float(num_unfinished(requests)),
        "num_copied_blocks": float(recorder.num_copied_blocks),
        "mem_sharing_saved_frac": recorder.sharing_saved_frac,
    }
    return RunResult(
        summary=summary, requests=requests, timeseries=recorder.timeseries(), extra=extra
    )


def num_unfinished(requests: pd.DataFrame) -> int:
    return int((requests["status"] == UNFINISHED).sum())
