"""Spread of a cost model (intervals): one draw per term per run, from its residuals."""

from __future__ import annotations

import numpy as np
import pytest

from pagesim.experiments.validation.intervals import conformal_factor
from pagesim.simulator import simulate
from pagesim.simulator.costmodel.factory import replicate_rng, resolve_profile
from pagesim.simulator.costmodel.serving import RESIDUAL_QUANTILES
from pagesim.simulator.costmodel.spread import apply, draw, draw_residual
from pagesim.simulator.model_gpu_specs import get_gpu
from pagesim.simulator.spec import run_spec_from_dict

Q = (-0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2)


def test_residuals_are_drawn_by_inverse_cdf_through_the_quantiles():
    for p, q in zip(RESIDUAL_QUANTILES, Q, strict=True):
        assert draw_residual(Q, p) == pytest.approx(q)
    assert draw_residual(Q, 0.3) == pytest.approx(-0.05 + 0.05 * (0.05 / 0.25))
    # past the outer quantiles, extended along the outer segments
    assert draw_residual(Q, 0.0) == pytest.approx(-0.2 - 0.05 * 2)
    assert draw_residual(Q, 1.0) == pytest.approx(0.2 + 0.05 * 2)
    draws = np.array([draw_residual(Q, u) for u in np.random.default_rng(0).random(20000)])
    assert np.mean(draws <= 0.0) == pytest.approx(0.5, abs=0.02)
    assert np.mean(draws <= 0.1) == pytest.approx(0.9, abs=0.02)


def test_a_draw_multiplies_each_varied_term_and_is_fixed_by_its_seed():
    profile = resolve_profile("a100-80gb-vidur", get_gpu("a100-80gb"))
    a = draw(profile, ("cost",), replicate_rng(0, 3))
    b = draw(profile, ("cost",), replicate_rng(0, 3))
    c = draw(profile, ("cost",), replicate_rng(0, 4))
    assert a == b and a.multipliers != c.multipliers
    varied = {n for n, t in profile.terms.items() if t.heldout_residual_quantiles is not None}
    assert set(a.multipliers) == varied and varied
    perturbed = apply(profile, a)
    for name in varied:
        want = profile.term(name).time_s(bytes_=1e9, flops=1e12, seqs=4, tokens=100)
        got = perturbed.term(name).time_s(bytes_=1e9, flops=1e12, seqs=4, tokens=100)
        assert got == pytest.approx(want * a.multipliers[name])


def test_a_spread_replicate_changes_the_run_deterministically():
    doc = {
        "workload": {"num_requests": 40},
        "hardware": {"gpu": "a100-80gb", "profile": "a100-80gb-vidur"},
    }
    plain = simulate(run_spec_from_dict(doc)).requests
    doc["spread"] = {"sources": ["cost"], "replicate": 2}
    one = simulate(run_spec_from_dict(doc))
    two = simulate(run_spec_from_dict(doc))
    assert one.requests.equals(two.requests)
    assert not one.requests["e2e_s"].equals(plain["e2e_s"])
    assert "one replicate of an interval" in one.notes["cost_model_description"]


def test_the_conformal_factor_is_the_split_conformal_quantile():
    scores = np.arange(1, 20, dtype=float)  # 19 scores: rank ceil(20 x 0.9) = 18
    assert conformal_factor(scores, 0.9) == 18.0
    assert conformal_factor(np.array([1.0, 2.0]), 0.9) == float("inf")  # too few to say
