"""RunResult: what one simulation returns, and the names of its metric columns.

Nothing here writes files or plots: experiments turn results into CSVs and charts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

#: Summary metric columns, in output order (units in the names; see DESIGN.md "Outputs").
METRIC_COLUMNS = (
    "throughput_req_s",
    "throughput_tok_s",
    "normalized_latency_s_per_tok",
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "avg_batch_size",
    "mem_token_frac",
    "mem_reserved_frac",
    "mem_internal_frag_frac",
    "mem_external_frag_frac",
    "mem_unused_frac",
    "num_preemptions",
    "num_swapped_blocks",
    "prefix_hit_rate",
    "num_finished",
    "num_rejected",
    "sim_wall_s",
)

#: Columns of the per-request table.
REQUEST_COLUMNS = (
    "request_id",
    "arrival_s",
    "prompt_len",
    "output_len",
    "n",
    "beam_width",
    "status",  # "finished" | "rejected" | "unfinished" (run hit max_sim_time_s)
    "reason",  # why rejected / unfinished; "" when finished
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "normalized_latency_s_per_tok",
    "num_preemptions",
    "num_cached_tokens",
)


@dataclass(frozen=True)
class RunResult:
    """Summary (METRIC_COLUMNS -> value), per-request table, sampled time series.

    ``timeseries`` has one row per sample window (or per step with
    ``metrics.every_step``): ``t_s``, ``duration_s``, ``num_steps``, ``batch_size``,
    ``num_prefill_tokens``, ``num_decode_tokens``, the five ``mem_*_frac`` columns,
    ``num_free_blocks``, ``num_copied_blocks``, ``num_swapped_blocks``,
    ``num_waiting``, ``num_running``, ``num_swapped``, ``prefix_hit_tokens``,
    ``mem_shared_saved_frac``. ``reducers.py`` reduces it the paper artifact's ways.
    """

    summary: dict[str, float]
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    extra: dict[str, float] = field(default_factory=dict)
    #: Text about the run (``simulator.provenance``: why requests were dropped or
    #: rejected, where the step costs came from); results.csv shows it as columns.
    notes: dict[str, str] = field(default_factory=dict)
    #: a fleet's run: one row per replica (``simulator/fleet/results.py``); None for one
    #: server
    replicas: pd.DataFrame | None = None

    def summary_row(self) -> dict[str, float]:
        return {k: self.summary[k] for k in METRIC_COLUMNS}

    @property
    def summary_frame(self) -> pd.DataFrame:
        """The run's metrics as one row (summary, then the extras and the notes)."""
        return pd.DataFrame([{**self.summary, **self.extra, **self.notes}])
