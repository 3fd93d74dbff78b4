"""The V1 serving fit on a recorded-steps replay's batches (calibrate/serving_v1.py), on
made-up logs whose law is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate.serving_v1 import (
    decode_errors,
    describe_rows,
    fit_serving_v1,
    frontend_delay_s,
    predicted_decode_s,
    windows,
)
from pagesim.errors import DataError
from pagesim.records.run import MeasuredRun
from pagesim.simulator.costmodel.recorded import LOG_COLUMNS

LAW = {"const_s": 3e-3, "s_per_seq": 2e-4, "s_per_prefill_token": 5e-6}


def _made_up(n=120, seed=0):
    """Steps of 10 ms whose kernel price and batch vary; requests whose decode time is
    exactly (output − 1) x the mean of (price + LAW) over the steps in their window."""
    rng = np.random.default_rng(seed)
    num_steps = 4000
    start = np.arange(num_steps) * 0.01
    # the batch drifts over the run, so requests' windows differ in their mean batch
    seqs = np.round(30 + 25 * np.sin(start / 3.0) + rng.integers(-4, 5, num_steps))
    ctx = seqs * rng.integers(100, 900, num_steps)
    prefill = np.where(rng.random(num_steps) < 0.3, rng.integers(16, 2048, num_steps), 0)
    price = 0.004 + 1e-5 * seqs + 2e-7 * ctx
    log = np.zeros((num_steps, len(LOG_COLUMNS)))
    col = {c: i for i, c in enumerate(LOG_COLUMNS)}
    log[:, col["start_s"]] = start
    log[:, col["recorded_s"]] = 0.01
    log[:, col["shadow_s"]] = price
    log[:, col["num_seqs"]] = seqs
    log[:, col["context_tokens"]] = ctx
    log[:, col["prefill_tokens"]] = prefill
    first = np.sort(rng.uniform(0, 30, n))
    out = rng.integers(2, 400, n)
    last = np.minimum(first + rng.uniform(0.5, 9, n), 39.9)
    table = pd.DataFrame(
        {
            "arrival_s": first - 0.05,
            "first_token_s": first,
            "finish_s": last,
            "prompt_len": np.full(n, 100),
            "output_len": out,
        }
    )
    run = MeasuredRun("made-up", "test", table, 3.0, sources=(("made-up.json", "0" * 64),))
    # each request's decode time from the law over its window (the window moves with its
    # end: a few rounds settle it)
    for _ in range(5):
        w = windows(run, log)
        table.loc[w.row, "finish_s"] = first[w.row] + predicted_decode_s(w, LAW)
    return run, log, windows(run, log)


def test_the_fit_recovers_the_law_on_held_out_requests():
    run, log, w = _made_up()
    fit, w = fit_serving_v1(run, log, fit_rows=np.arange(60))
    chosen = fit.chosen
    # the law is the seq form (plus the prompt-token term)
    assert chosen.form == "seq"
    assert chosen.coefs.step["const_s"] == pytest.approx(LAW["const_s"], rel=0.05)
    assert chosen.coefs.step["s_per_seq"] == pytest.approx(LAW["s_per_seq"], rel=0.05)
    assert chosen.coefs.s_per_prefill_token == pytest.approx(LAW["s_per_prefill_token"], rel=0.1)
    assert chosen.num_requests == int(np.isin(w.row, np.arange(60)).sum())
    held_out = ~np.isin(w.row, np.arange(60))
    coefs = {**chosen.coefs.step, "s_per_prefill_token": chosen.coefs.s_per_prefill_token}
    after = decode_errors(w, coefs, held_out)
    before = decode_errors(w, {}, held_out)
    assert abs(after["mean"]) < 0.01 and abs(after["p50"]) < 0.02
    assert before["mean"] < -0.2  # the kernels alone are far short
    assert fit.fitted_on == "made-up.json (requests 1-60)"
    path = fit.serving_path(origin="test")
    assert "ttft" not in path.residual_quantiles and "ttft_rms" not in path.fit_error


def test_windows_need_a_priced_log_and_enough_requests():
    run, log, _ = _made_up(n=20)
    bare = log.copy()
    bare[:, LOG_COLUMNS.index("shadow_s")] = np.nan
    with pytest.raises(DataError, match="was not priced"):
        windows(run, bare)
    with pytest.raises(DataError, match="logged no steps"):
        windows(run, np.zeros((0, len(LOG_COLUMNS))))
    with pytest.raises(DataError, match="2 requests to fit"):
        fit_serving_v1(run, log, fit_rows=np.arange(2))


def test_the_front_end_delay_is_where_the_light_requests_meet():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.02, 2.0, 400)
    measured = base + 0.015

    def replay(f):
        # the light requests meet at f = 15 ms; the queued ones are 20% slower whatever f
        return np.where(base < 0.5, base + f, 1.2 * base + f)

    assert frontend_delay_s(replay, measured) == pytest.approx(0.015, abs=1e-4)
    assert frontend_delay_s(lambda f: base + 0.05 + f, measured) == 0.0


def test_rows_are_named_as_ranges():
    assert describe_rows(np.arange(150)) == "1-150"
    assert describe_rows(np.array([0, 1, 2, 5, 9, 10])) == "1-3, 6, 10-11"
    assert describe_rows(np.array([], dtype=int)) == "none"
