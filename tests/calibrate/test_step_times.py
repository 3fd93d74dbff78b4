"""Step times read off per-request records (calibrate/step_times.py), on made-up V1 runs
whose step times are known: every step gives every decoding request one token."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate.step_times import reconstruct, split_half_errors
from pagesim.errors import DataError
from pagesim.records.run import MeasuredRun


def _run(step_of, num: int = 240, horizon_s: float = 60.0, seed: int = 0) -> MeasuredRun:
    """A run whose steps last ``step_of(t)`` s: each request's first token is a step end,
    its last token ``output - 1`` steps later."""
    ends, t = [], 0.0
    while t < horizon_s + 30.0:
        t += step_of(t)
        ends.append(t)
    ends = np.array(ends)
    rng = np.random.default_rng(seed)
    first_step = rng.integers(0, int(np.searchsorted(ends, horizon_s)), num)
    output = rng.integers(20, 400, num)
    last_step = np.minimum(first_step + output - 1, len(ends) - 1)
    output = last_step - first_step + 1
    first = ends[first_step]
    table = pd.DataFrame(
        {
            "arrival_s": np.maximum(first - 0.1, 0.0),
            "prompt_len": np.full(num, 100),
            "output_len": output,
            "first_token_s": first,
            "finish_s": ends[last_step],
        }
    ).sort_values("arrival_s", kind="stable", ignore_index=True)
    return MeasuredRun(name="made-up", dataset="test", table=table, rate_req_s=4.0)


def test_a_constant_step_time_is_read_back():
    run = _run(lambda t: 0.03)
    steps = reconstruct(run)
    assert steps.num_clamped == 0 and steps.num_requests == 240
    busy = steps.edges_s[:-1] < 60.0
    assert np.allclose(steps.step_s[busy], 0.03, rtol=0.02)
    assert np.median(np.abs(split_half_errors(run))) < 0.01


def test_a_step_time_that_changes_is_followed():
    run = _run(lambda t: 0.02 if t < 30.0 else 0.05)
    steps = reconstruct(run)
    assert steps.at(10.0) == pytest.approx(0.02, rel=0.03)
    assert steps.at(50.0) == pytest.approx(0.05, rel=0.03)
    # outside the run the nearest bin's step time
    assert steps.at(-5.0) == steps.step_s[0] and steps.at(1e6) == steps.step_s[-1]
    # each request's decode holds its steps
    t = run.table
    counted = steps.steps_between(t["first_token_s"].to_numpy(), t["finish_s"].to_numpy())
    assert np.median(np.abs(counted / (t["output_len"].to_numpy() - 1) - 1)) < 0.02


def test_too_few_decodes_is_a_one_line_error():
    run = _run(lambda t: 0.03, num=3)
    one = MeasuredRun(
        name="tiny",
        dataset="test",
        table=run.table.assign(output_len=[1, 1, 5]),
        rate_req_s=1.0,
    )
    with pytest.raises(DataError, match="run tiny: 1 requests with two or more output tokens"):
        reconstruct(one)


def test_decode_times_are_priced_over_the_steps_in_each_real_window():
    from pagesim.calibrate.step_times import priced_decode_times

    table = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.0, 0.5],
            "prompt_len": [10, 10, 10],
            "output_len": [4, 1, 3],
            "first_token_s": [1.0, 1.0, 2.0],
            "finish_s": [4.0, 1.0, 3.0],
        }
    )
    run = MeasuredRun(name="r", dataset="test", table=table, rate_req_s=1.0)
    # steps start every 0.5 s from 0; the shadow prices step k at k ms
    log = np.array([[0.5 * k, 0.5, k * 1e-3] for k in range(10)])
    predicted, measured = priced_decode_times(run, log)
    # request 0: steps starting at 1.0 .. 3.5 (k = 2..7); request 2: 2.0, 2.5 (k = 4, 5)
    assert predicted == pytest.approx([sum(range(2, 8)) * 1e-3, 9e-3])
    assert measured.tolist() == [3.0, 1.0]


def test_steps_are_read_from_every_token_time_and_idle_stretches_are_not_steps():
    """Two requests decode through steps of 20 ms, then 50 ms; the server idles from 1.0
    to 3.0 s; a third request decodes through 30 ms steps. Each step's tokens reach the
    client up to 2 ms apart."""
    from pagesim.calibrate.step_times import from_token_times, step_count_errors

    rng = np.random.default_rng(1)
    ends_a = np.concatenate([np.arange(1, 21) * 0.02, 0.4 + np.arange(1, 13) * 0.05])
    ends_b = 3.0 + np.arange(1, 31) * 0.03
    tokens = [ends_a, ends_a + rng.uniform(0, 0.002, len(ends_a)), ends_b]
    table = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.0, 3.0],
            "prompt_len": [10, 10, 10],
            "output_len": [len(t) for t in tokens],
            "first_token_s": [t[0] for t in tokens],
            "finish_s": [t[-1] for t in tokens],
        }
    )
    run = MeasuredRun(name="r", dataset="test", table=table, rate_req_s=1.0)
    steps = from_token_times(run, np.concatenate(tokens))
    assert steps.at(0.1) == pytest.approx(0.02, abs=0.0021)
    assert steps.at(0.8) == pytest.approx(0.05, abs=0.0021)
    assert steps.at(3.5) == pytest.approx(0.03, abs=1e-9)
    # the idle stretch (1.0 to 3.0 s, nothing in flight) keeps the step time before it
    assert steps.num_clamped == 1 and steps.at(2.0) == pytest.approx(0.05, abs=0.0021)
    assert np.abs(step_count_errors(run, steps)).max() < 0.01
