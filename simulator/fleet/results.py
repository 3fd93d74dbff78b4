"""A fleet's RunResult: the run's summary over all its requests, and per replica.

- per request: the single server's table plus ``replica`` (the replica that served it;
  for a disaggregated fleet the decode instance, -1 where none did);
- summary (``METRIC_COLUMNS`` and vLLM's): over every request of the fleet, as for one
  server. The step-based metrics add up the replicas: ``avg_batch_size`` = the decode
  steps' batch sizes summed over all replicas / their decode steps; the ``mem_*_frac``
  = slot-seconds per category summed over the replicas / the sum of each replica's
  capacity x its recorded time; preemptions, swapped and copied blocks, steps: sums;
  ``prefix_hit_rate`` = hit tokens / queried tokens over all replicas; vLLM's ITL over
  every replica's inter-token gaps;
- ``RunResult.replicas``: one row per replica (``replica``, ``role``, requests routed to
  it, its KV capacity and the same summary columns over its own requests and steps,
  its makespan from the fleet's first arrival to its last step);
- time series: each replica's rows, with a ``replica`` column first.

With one replica every figure is the single server's.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from pagesim.allocators.base import PrefixCacheCounters
from pagesim.simulator.metrics import MEM_FRAC_COLUMNS, StepRecorder
from pagesim.simulator.result import RunResult
from pagesim.simulator.summary import num_unfinished, summarize
from pagesim.simulator.token_gaps import TokenGaps
from pagesim.simulator.vllm_metrics import vllm_summary


class RecordersTogether:
    """Several replicas' recorders read as one (what ``summarize`` reads of a recorder;
    module docstring)."""

    def __init__(self, recorders: list[StepRecorder]) -> None:
        self.recorders = recorders

    @property
    def avg_batch_size(self) -> float:
        steps = sum(r.num_decode_steps for r in self.recorders)
        return sum(r.decode_batch_sum for r in self.recorders) / steps if steps else 0.0

    def mem_fracs(self) -> dict[str, float]:
        for r in self.recorders:
            r.mem_fracs()  # closes the open window
        denom = sum(r.total_s * r.capacity_slots for r in self.recorders)
        return {
            name: (sum(r.mem_slot_s[k] for r in self.recorders) / denom if denom > 0 else 0.0)
            for k, name in enumerate(MEM_FRAC_COLUMNS)
        }

    @property
    def num_swapped_blocks(self) -> int:
        return sum(r.num_swapped_blocks for r in self.recorders)

    @property
    def num_copied_blocks(self) -> int:
        return sum(r.num_copied_blocks for r in self.recorders)

    @property
    def num_steps(self) -> int:
        return sum(r.num_steps for r in self.recorders)

    @property
    def sharing_saved_frac(self) -> float:
        for r in self.recorders:
            r.mem_fracs()
        saved = sum(r.shared_saved_slot_s for r in self.recorders)
        held = sum(r.mem_slot_s[0] + r.mem_slot_s[1] + r.mem_slot_s[2] for r in self.recorders)
        return saved / (held + saved) if held + saved > 0 else 0.0


def hit_rate(counters: list[PrefixCacheCounters]) -> float:
    """Prefix-cache hit tokens / queried tokens over several pools (0 when none queried)."""
    queried = sum(c.queried_tokens for c in counters)
    return sum(c.hit_tokens for c in counters) / queried if queried else 0.0


def gaps_together(all_gaps: list[TokenGaps]) -> TokenGaps:
    """Several replicas' inter-token gaps as one multiset (the first itself when alone)."""
    if len(all_gaps) == 1:
        return all_gaps[0]
    together = TokenGaps()
    for gaps in all_gaps:
        together.add_many(*gaps.arrays())
    return together


def fleet_result(
    trace,
    requests: pd.DataFrame,
    *,
    recorders: list[StepRecorder],
    num_preemptions: list[int],
    prefix_counters: list[PrefixCacheCounters],
    token_gaps: list[TokenGaps],
    end_s: list[float],
    roles: list[str],
    capacities: list[int],
    metrics_spec,
    wall_start: float,
) -> RunResult:
    """The fleet's RunResult (module docstring); ``requests`` has its ``replica`` column."""
    first_arrival = float(trace.table["arrival_s"].iloc[0]) if trace.num_requests else 0.0
    makespan_s = max(end_s) - first_arrival
    together = RecordersTogether(recorders)
    summary = summarize(
        requests,
        together,
        makespan_s=makespan_s,
        num_preemptions=sum(num_preemptions),
        prefix_hit_rate=hit_rate(prefix_counters),
        sim_wall_s=time.perf_counter() - wall_start,
    )
    summary.update(
        vllm_summary(
            requests,
            duration_s=makespan_s,
            spec=metrics_spec,
            token_gaps=gaps_together(token_gaps),
        )
    )
    extra = {
        "makespan_s": makespan_s,
        "num_steps": float(together.num_steps),
        "num_unfinished": float(num_unfinished(requests)),
        "num_copied_blocks": float(together.num_copied_blocks),
        "mem_sharing_saved_frac": together.sharing_saved_frac,
        "num_replicas": float(len(recorders)),
    }
    rows = []
    replica_col = requests["replica"].to_numpy()
    for i, recorder in enumerate(recorders):
        mine = requests[replica_col == i]
        span_s = end_s[i] - first_arrival
        row = {"replica": i, "role": roles[i], "num_requests": len(mine)}
        row["kv_capacity_slots"] = capacities[i]
        row.update(
            summarize(
                mine,
                recorder,
                makespan_s=span_s,
                num_preemptions=num_preemptions[i],
                prefix_hit_rate=prefix_counters[i].hit_rate,
                sim_wall_s=0.0,
            )
        )
        del row["sim_wall_s"]  # the fleet's, in the summary (kept out: not deterministic)
        row.update(vllm_summary(mine, duration_s=span_s, spec=metrics_spec, token_gaps=None))
        row["num_steps"] = recorder.num_steps
        row["makespan_s"] = span_s
        rows.append(row)
    series = []
    for i, recorder in enumerate(recorders):
        frame = recorder.timeseries()
        frame.insert(0, "replica", np.full(len(frame), i, dtype=np.int64))
        series.append(frame)
    return RunResult(
        summary=summary,
        requests=requests,
        timeseries=pd.concat(series, ignore_index=True),
        extra=extra,
        replicas=pd.DataFrame(rows),
    )
