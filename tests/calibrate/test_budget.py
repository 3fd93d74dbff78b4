"""Timing within a budget: the order, the estimates, the stop, and a calibration that still fits."""

import json

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate.budget import (
    SimulatedClock,
    prior_cost_s,
    priority_order,
    run_budgeted,
)
from pagesim.calibrate.grid import FULL_GRID, SAMPLE_PREFIX, plan_grid
from pagesim.calibrate.models import model_dims
from pagesim.calibrate.pipeline import calibrate, rebuild_report
from pagesim.calibrate.synthetic import SyntheticBackend, reference_profile
from pagesim.calibrate.timing import TimingPolicy
from pagesim.errors import ConfigError
from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.profile import load_profile
from pagesim.simulator.model_gpu_specs import GPUS

PRIOR = analytic_profile(GPUS["h100-sxm"])


@pytest.fixture(scope="module")
def ordered():
    cases = plan_grid(model_dims("opt-13b"), FULL_GRID, np.random.default_rng(0))
    return cases, priority_order(cases, np.random.default_rng(1))


def test_order_is_a_permutation_with_planned_shapes_before_the_sample(ordered):
    cases, order = ordered
    assert sorted(map(id, order)) == sorted(map(id, cases))
    is_sample = [c.shape_id.startswith(SAMPLE_PREFIX) for c in order]
    first_sample = is_sample.index(True)
    assert not any(is_sample[:first_sample]) and all(is_sample[first_sample:])


def test_a_cut_leaves_every_term_the_same_share_of_its_planned_shapes(ordered):
    _, order = ordered
    planned = [c for c in order if not c.shape_id.startswith(SAMPLE_PREFIX)]
    head = planned[: len(planned) // 2]
    for term in {c.term for c in planned}:
        share = sum(c.term == term for c in head) / sum(c.term == term for c in planned)
        assert 0.4 <= share <= 0.6, term


def test_a_contiguous_shape_is_timed_right_after_its_paged_twin(ordered):
    _, order = ordered
    for i, case in enumerate(order):
        if case.term == "contiguous_decode_attention":
            twin = order[i - 1]
            assert (twin.term, twin.shape_id) == ("paged_decode_attention", case.shape_id)


def test_prior_cost_grows_with_the_bytes_and_swap_pays_for_pinned_memory(ordered):
    cases, _ = ordered
    policy = TimingPolicy()
    writes = sorted((c for c in cases if c.term == "kv_write"), key=lambda c: c.features.bytes_)
    costs = [prior_cost_s(c, policy, PRIOR) for c in writes]
    assert costs == sorted(costs) and costs[0] > 0
    swap = max((c for c in cases if c.term == "swap"), key=lambda c: c.features.bytes_)
    assert prior_cost_s(swap, policy, PRIOR) > swap.features.bytes_ / 3.5e9


def test_timing_stops_when_the_budget_is_spent_and_counts_what_it_skipped(ordered, monkeypatch):
    _, order = ordered
    clock = SimulatedClock()
    backend = SyntheticBackend(reference_profile(), np.random.default_rng(2), clock=clock)
    saved, at = [], []
    monkeypatch.setattr("pagesim.calibrate.budget.CHECKPOINT_S", 1.0)
    start = clock()

    def checkpoint(rows):
        saved.append(rows)
        at.append(clock())

    df, summary = run_budgeted(
        order, backend, TimingPolicy(), 8.0, PRIOR, clock=clock, checkpoint=checkpoint
    )
    assert 0 < summary.num_timed == len(df) < len(order)
    assert summary.num_timed + summary.num_skipped == summary.num_planned == len(order)
    assert summary.spent_s <= 8.0 * 1.02
    assert summary.estimated_plan_s > summary.spent_s
    assert set(summary.skipped_by_term) <= {c.term for c in order}
    # a checkpoint follows the first shape to end 1 s or more after the last one: every
    # gap is at least 1 s and under 1 s plus the longest shape
    longest = float(df["wall_s"].max())
    gaps = np.diff([start, *at])
    assert len(saved) >= 3 and (gaps >= 1.0).all() and (gaps < 1.0 + longest + 1e-9).all(), gaps
    assert all(isinstance(s, pd.DataFrame) for s in saved)
    assert [len(s) for s in saved] == sorted(len(s) for s in saved) and len(saved[-1]) <= len(df)
    assert df["wall_s"].sum() == pytest.approx(summary.spent_s)
    assert set(df["term"]) == {c.term for c in order}  # every term has points


def _budgeted(tmp_path, budget_s):
    clock = SimulatedClock()
    backend = SyntheticBackend(reference_profile(), np.random.default_rng(5), clock=clock)
    return calibrate(
        model_dims("opt-13b"),
        backend,
        tmp_path,
        np.random.default_rng(4),
        command="test",
        budget_s=budget_s,
        clock=clock,
    )


def test_a_cut_calibration_still_fits_every_term_and_says_how_much_it_timed(tmp_path):
    out = _budgeted(tmp_path, 6.0)
    meta = json.loads(out.meta.read_text())
    budget = meta["budget"]
    assert budget["num_timed"] < budget["num_planned"] and budget["budget_s"] == 6.0
    profile = load_profile(out.profile)
    assert set(profile.terms) == set(reference_profile().terms)
    assert f"a 6 s budget timed {budget['num_timed']} of {budget['num_planned']}" in profile.notes
    report = out.report.read_text()
    assert f"{budget['num_timed']} of {budget['num_planned']} planned shapes timed" in report
    assert "not timed for lack of time:" in report
    assert len(pd.read_csv(out.measurements)) == budget["num_timed"]


def test_a_budget_too_small_for_one_shape_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="--budget-s"):
        _budgeted(tmp_path, 0.001)


class _Killed(Exception):
    pass


def test_a_run_stopped_from_outside_leaves_a_folder_that_report_refits(tmp_path, monkeypatch):
    clock = SimulatedClock()
    backend = SyntheticBackend(reference_profile(), np.random.default_rng(5), clock=clock)
    time_case = backend.time_case
    calls = []

    def dying(case, policy):
        calls.append(case)
        if len(calls) > 150:
            raise _Killed  # the machine's time limit, mid-run
        return time_case(case, policy)

    monkeypatch.setattr(backend, "time_case", dying)
    monkeypatch.setattr("pagesim.calibrate.budget.CHECKPOINT_S", 0.5)
    with pytest.raises(_Killed):
        calibrate(
            model_dims("opt-13b"), backend, tmp_path, np.random.default_rng(4), budget_s=60.0,
            clock=clock,
        )  # fmt: skip
    assert not (tmp_path / "profile.yaml").exists()
    saved = pd.read_csv(tmp_path / "measurements.csv")
    assert 100 < len(saved) <= 150
    report, _ = rebuild_report(tmp_path)
    assert f"{len(saved)} measurements" in report.read_text()
