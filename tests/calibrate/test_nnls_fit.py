"""NNLS meets its optimality conditions; the roofline fit recovers known coefficients."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.calibrate.fit import fit_all, fit_coefficients, predict
from pagesim.calibrate.nnls import nnls
from pagesim.errors import DataError


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_nnls_satisfies_kkt(seed, n):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((20, n))
    b = rng.standard_normal(20)
    x = nnls(a, b)
    grad = a.T @ (b - a @ x)  # minus the gradient of 0.5||Ax - b||^2
    assert (x >= 0).all()
    assert np.all(grad <= 1e-8)  # no descent direction into the feasible set
    assert np.allclose(grad[x > 0], 0, atol=1e-8)


def test_nnls_exact_nonnegative_solution():
    rng = np.random.default_rng(0)
    a = rng.random((30, 4))
    x = np.array([1.0, 0.0, 2.5, 0.25])
    np.testing.assert_allclose(nnls(a, a @ x), x, atol=1e-10)


def _roofline_points(rng, coefs, n=200):
    feats = {
        "bytes": 10 ** rng.uniform(4, 9, n),
        "blocks": rng.integers(1, 10_000, n).astype(float),
        "seqs": np.zeros(n),
        "tokens": np.zeros(n),
    }
    feats["flops"] = feats["bytes"] * 10 ** rng.uniform(-1, 3, n)  # both regimes
    return feats, predict(coefs, feats)


def test_fit_recovers_both_roofline_regimes_without_noise():
    truth = {"const_s": 5e-6, "s_per_byte": 1 / 2e12, "s_per_flop": 1 / 300e12, "s_per_block": 1e-9}
    feats, y = _roofline_points(np.random.default_rng(1), truth)
    got = fit_coefficients(feats, y, ("blocks",))
    for key, value in truth.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key


def test_fit_drops_a_roofline_coefficient_that_never_binds():
    rng = np.random.default_rng(2)
    feats = {
        "bytes": 10 ** rng.uniform(4, 9, 50),
        "blocks": np.zeros(50),
        "seqs": np.zeros(50),
        "tokens": np.zeros(50),
    }
    feats["flops"] = feats["bytes"] * 0.5  # always memory-bound
    got = fit_coefficients(feats, 1e-6 + feats["bytes"] / 1e12, ())
    assert "s_per_flop" not in got
    assert got["s_per_byte"] == pytest.approx(1e-12, rel=1e-6)


def test_coefficients_stay_nonnegative_on_adversarial_data():
    rng = np.random.default_rng(4)
    feats, _ = _roofline_points(rng, {"const_s": 1e-6})
    y = 1e-3 - feats["bytes"] * 1e-13  # time falls with bytes: a negative slope is unphysical
    y = np.clip(y, 1e-6, None)
    got = fit_coefficients(feats, y, ("blocks",))
    assert all(v >= 0 for v in got.values())


def test_holdout_is_seeded_and_twenty_percent():
    rng = np.random.default_rng(5)
    feats, y = _roofline_points(rng, {"const_s": 1e-5, "s_per_byte": 1e-12})
    df = pd.DataFrame({**feats, "median_s": y, "term": "gemm"})
    a = fit_all(df, np.random.default_rng(9))["gemm"]
    b = fit_all(df, np.random.default_rng(9))["gemm"]
    assert a.is_heldout.sum() == 40
    np.testing.assert_array_equal(a.is_heldout, b.is_heldout)
    assert a.coefficients == b.coefficients
    assert a.heldout_mape < 1e-6


def test_unknown_term_is_an_error():
    df = pd.DataFrame(
        {
            "term": ["warp_drive"],
            "bytes": [1.0],
            "flops": [0.0],
            "blocks": [0.0],
            "seqs": [0.0],
            "tokens": [0.0],
            "median_s": [1.0],
        }
    )
    with pytest.raises(DataError, match="warp_drive"):
        fit_all(df, np.random.default_rng(0))
