import numpy as np

from pagesim.workloads.spec import LengthDist
from pagesim.workloads.synthetic import ALPACA_LIKE_OUTPUT, ALPACA_LIKE_PROMPT, sample_lengths

N = 200_000


def _draw(dist: LengthDist, n: int = N, seed: int = 0) -> np.ndarray:
    return sample_lengths(dist, n, np.random.default_rng(seed))


def test_fixed_and_uniform():
    assert (_draw(LengthDist(dist="fixed", mean=37.4), 10) == 37).all()
    u = _draw(LengthDist(dist="uniform", low=3, high=9))
    assert u.min() == 3 and u.max() == 9 and u.dtype == np.int64


def test_lognormal_mean_and_cv():
    dist = LengthDist(dist="lognormal", mean=200.0, cv=0.8, low=1, high=100_000)
    v = _draw(dist)
    assert abs(v.mean() - 200.0) < 5 * 0.8 * 200.0 / np.sqrt(N)
    assert abs(v.std() / v.mean() - 0.8) < 0.02


def test_zipf_mean_and_bounds():
    dist = LengthDist(dist="zipf", a=1.5, mean=64.0, low=1, high=4096)
    v = _draw(dist)
    assert v.min() >= 1 and v.max() <= 4096
    # Heavy tail: compare with a tolerance from the sample's own standard error.
    assert abs(v.mean() - 64.0) < 6 * v.std() / np.sqrt(N) + 0.5
    assert np.median(v) < v.mean()


def test_alpaca_like_means_are_the_papers():
    p, o = _draw(ALPACA_LIKE_PROMPT), _draw(ALPACA_LIKE_OUTPUT, seed=1)
    assert abs(p.mean() - 19.31) < 5 * p.std() / np.sqrt(N) + 0.05
    assert abs(o.mean() - 58.45) < 5 * o.std() / np.sqrt(N) + 0.05


def test_deterministic():
    dist = LengthDist(dist="zipf", a=2.0, mean=10.0)
    assert np.array_equal(_draw(dist, 100, 4), _draw(dist, 100, 4))
