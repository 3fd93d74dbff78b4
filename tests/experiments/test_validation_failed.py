"""A run with failed requests (pagesim.records.run: the rule): the replay keeps them,
the comparison leaves them out of both sides, and the page says how many."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.experiments.validation.compare import closed_loop_rows
from pagesim.experiments.validation.replay import Replay
from pagesim.experiments.validation.report import failed_lines
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun
from pagesim.records.run import MeasuredRun, check_records


def _study(failed):
    df = pd.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "prompt_len": [10, 20, 30],
            "output_len": [2, 2, 2],
            "first_token_s": [0.1, np.nan if failed[1] else 1.1, 2.1],
            "finish_s": [0.3, np.nan if failed[1] else 1.3, 2.3],
            "failed": failed,
        }
    )
    run = MeasuredRun("r1", "d", check_records(df, "x"), 1.0)
    vrun = ValidationRun(run=run, launch="x", role="held_out", settings={})
    cost = CostModelChoice("kernels", None, headline=True)
    return Study(dataset="d", title="t", runs=[vrun], cost_models=[cost]), vrun


def test_failed_requests_are_left_out_of_both_sides_and_said_on_the_page():
    study, vrun = _study([False, True, False])
    predicted = pd.DataFrame(
        {"request_id": [2, 0, 1], "ttft_s": [0.3, 0.1, 50.0], "tpot_s": [0.2] * 3,
         "e2e_s": [0.5, 0.3, 99.0]}
    )  # fmt: skip
    rep = Replay(requests=predicted, timeseries=pd.DataFrame(), description="", kv_blocks=1)
    rows = {(r["metric"], r["stat"]): r for r in closed_loop_rows(study, vrun, "kernels", rep)}
    assert rows[("ttft", "mean")]["measured_ms"] == pytest.approx(100.0)
    assert rows[("ttft", "mean")]["predicted_ms"] == pytest.approx(200.0)  # 0.1 and 0.3 only
    assert rows[("e2e", "p90")]["predicted_ms"] < 1000
    (text,) = [line for line in failed_lines(study) if line]
    assert text.startswith("Failed requests (r1: 1 of 3)")
    assert "left out of the measured and the predicted statistics" in text


def test_a_run_without_failures_adds_nothing_to_the_page():
    study, _ = _study([False, False, False])
    assert failed_lines(study) == []
