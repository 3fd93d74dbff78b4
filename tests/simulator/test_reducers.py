"""Named reducers: hand-made time series with exact expectations, and real runs.

The hand-made series are built the way ``metrics.every_step`` writes them: one row
per step (``num_steps`` 1) and idle rows (``num_steps`` 0) between steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.metrics import MEM_FRAC_COLUMNS, TIMESERIES_COLUMNS
from pagesim.simulator.reducers import REDUCERS, reduce
from pagesim.simulator.spec import run_spec_from_dict


def series(rows: list[dict]) -> pd.DataFrame:
    """A time series with every column; unspecified columns are 0."""
    base = dict.fromkeys(TIMESERIES_COLUMNS, 0.0)
    return pd.DataFrame([{**base, "num_steps": 1, **row} for row in rows])[list(TIMESERIES_COLUMNS)]


def mem(token: float, reserved: float = 0.0, internal: float = 0.0, saved: float = 0.0) -> dict:
    free = 1.0 - token - reserved - internal
    return {
        "mem_token_frac": token, "mem_reserved_frac": reserved,
        "mem_internal_frag_frac": internal, "mem_external_frag_frac": free / 2,
        "mem_unused_frac": free / 2, "mem_shared_saved_frac": saved,
    }  # fmt: skip


def test_fig2_is_a_plain_mean_over_steps_in_the_window():
    ts = series([
        {"t_s": 299.9, "duration_s": 1.0, **mem(0.9)},    # before the window
        {"t_s": 300.0, "duration_s": 10.0, **mem(0.2)},   # a long step weighs as much ...
        {"t_s": 310.0, "duration_s": 0.01, **mem(0.6)},   # ... as a short one
        {"t_s": 310.01, "duration_s": 50.0, "num_steps": 0, **mem(0.0)},  # idle: not a step
        {"t_s": 900.0, "duration_s": 0.1, **mem(0.4, reserved=0.1)},  # on the end: inside
        {"t_s": 900.1, "duration_s": 0.1, **mem(0.05)},   # after the window
    ])  # fmt: skip
    got = reduce(ts, "artifact-fig2")
    assert got.reducer == "artifact-fig2" and got.num_steps == 3
    assert got.values["mem_token_frac"] == pytest.approx((0.2 + 0.6 + 0.4) / 3)
    assert got.values["mem_reserved_frac"] == pytest.approx(0.1 / 3)
    assert sum(got.values.values()) == pytest.approx(1.0)
    # pagesim's own reduction of the same series weighs by time and counts idle time
    tw = reduce(ts, "time-weighted")
    assert tw.reducer == "time-weighted"
    total = 1.0 + 10.0 + 0.01 + 50.0 + 0.1 + 0.1
    want = (0.9 * 1.0 + 0.2 * 10.0 + 0.6 * 0.01 + 0.4 * 0.1 + 0.05 * 0.1) / total
    assert tw.values["mem_token_frac"] == pytest.approx(want)


def test_fig13_counts_every_step_from_600_s_to_the_end():
    ts = series([
        {"t_s": 599.0, "batch_size": 100},
        {"t_s": 600.0, "batch_size": 3},   # a prefill step: its prompts are the batch
        {"t_s": 600.5, "batch_size": 7},
        {"t_s": 601.0, "batch_size": 0, "num_steps": 0, "duration_s": 5.0},  # idle
        {"t_s": 4000.0, "batch_size": 8},  # long after: still inside ("to the end")
    ])  # fmt: skip
    got = reduce(ts, "artifact-fig13")
    assert got.values == {"avg_batch_size": pytest.approx(6.0)} and got.num_steps == 3
    assert got.as_row()["reducer"] == "artifact-fig13"


def test_fig15_is_one_minus_the_inverse_mean_reference_ratio():
    # held 0.5 with 0.5 saved: L / P = 2; held 0.3 with 0.0 saved: 1; nothing held: skipped
    ts = series([
        {"t_s": 300.0, **mem(0.4, internal=0.1, saved=0.5)},
        {"t_s": 500.0, **mem(0.2, reserved=0.1)},
        {"t_s": 600.0, **mem(0.0)},
        {"t_s": 901.0, **mem(0.1, saved=0.9)},  # after the window
    ])  # fmt: skip
    got = reduce(ts, "artifact-fig15")
    assert got.values["mean_logical_per_physical_block"] == pytest.approx(1.5)
    assert got.values["sharing_saved_frac"] == pytest.approx(1 - 1 / 1.5)
    assert (got.num_steps, got.num_skipped) == (2, 1)


def test_artifact_reducers_refuse_sampled_windows_and_empty_windows():
    sampled = series([{"t_s": 400.0, "num_steps": 12, **mem(0.5)}])
    for name in ("artifact-fig2", "artifact-fig13", "artifact-fig15"):
        with pytest.raises(ConfigError, match=f"reducer '{name}'.*metrics.every_step: true"):
            reduce(sampled, name)
    short = series([{"t_s": 10.0, **mem(0.5)}])
    with pytest.raises(ConfigError, match="no scheduler step between 300 s and 900 s"):
        reduce(short, "artifact-fig2")
    with pytest.raises(ConfigError, match="no scheduler step between 600 s and the end"):
        reduce(short, "artifact-fig13")
    with pytest.raises(ConfigError, match="unknown reducer 'mean'; known: time-weighted"):
        reduce(short, "mean")
    assert REDUCERS["time-weighted"].needs_every_step is False


def run(doc: dict):
    base = {
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15728},
        "metrics": {"every_step": True},
    }
    return simulate(run_spec_from_dict({**base, **doc}))


def test_on_a_real_run_time_weighted_is_the_summary_and_steps_are_rows():
    result = run({"workload": {"name": "alpaca-like", "num_requests": 200, "n": 2},
                  "arrivals": {"rate_req_s": 20.0}})  # fmt: skip
    ts = result.timeseries
    assert set(ts["num_steps"]) <= {0, 1}
    tw = reduce(ts, "time-weighted")
    for col in MEM_FRAC_COLUMNS:
        assert tw.values[col] == pytest.approx(result.summary[col], rel=1e-9, abs=1e-12)
    # the new column is the summary's sharing saving, per row
    held = ts["mem_token_frac"] + ts["mem_reserved_frac"] + ts["mem_internal_frag_frac"]
    w = ts["duration_s"]
    saved = float((ts["mem_shared_saved_frac"] * w).sum())
    unshared = float((held * w).sum()) + saved
    assert saved / unshared == pytest.approx(result.extra["mem_sharing_saved_frac"])
    assert saved > 0
    # fig15 on a run that shares (window from 0 s: the run is short)
    from pagesim.simulator.reducers import artifact_fig15

    got = artifact_fig15(ts, start_s=0.0, end_s=float(ts["t_s"].max()))
    assert 0.0 < got.values["sharing_saved_frac"] < 0.5


def test_fig15_of_a_run_that_shares_nothing_is_zero():
    result = run({"workload": {"name": "alpaca-like", "num_requests": 100},
                  "arrivals": {"rate_req_s": 20.0}})  # fmt: skip
    from pagesim.simulator.reducers import artifact_fig15

    got = artifact_fig15(result.timeseries, start_s=0.0, end_s=np.inf)
    assert got.values["sharing_saved_frac"] == 0.0
    assert (result.timeseries["mem_shared_saved_frac"] == 0.0).all()


def test_metrics_reducers_add_columns_named_after_the_reducer():
    result = run({"workload": {"name": "alpaca-like", "num_requests": 100},
                  "arrivals": {"rate_req_s": 20.0},
                  "metrics": {"every_step": True, "reducers": ["time-weighted"]}})  # fmt: skip
    for col in MEM_FRAC_COLUMNS:
        assert result.extra[f"time_weighted_{col}"] == pytest.approx(result.summary[col])
    assert result.extra["time_weighted_num_steps"] == float(result.timeseries["num_steps"].sum())


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"reducers": ["artifact-fig2"]},
         "metrics.reducers artifact-fig2 average over scheduler steps: set metrics.every_step"),
        ({"every_step": True, "reducers": ["fig2"]},
         "unknown reducer 'fig2' in metrics.reducers; known: time-weighted, artifact-fig2"),
        ({"every_step": True, "reducers": ["time-weighted", "time-weighted"]},
         "metrics.reducers must be distinct"),
    ],
)  # fmt: skip
def test_metrics_reducers_are_validated(metrics, message):
    with pytest.raises(ConfigError, match=message):
        run_spec_from_dict({"metrics": metrics}, "exp.yaml")
