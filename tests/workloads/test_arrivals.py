import numpy as np
import pytest

from pagesim.errors import ConfigError
from pagesim.workloads.arrivals import arrival_times, arrivals_until
from pagesim.workloads.spec import ArrivalSpec

N = 100_000


def test_poisson_mean_gap_within_five_standard_errors():
    rate = 2.5
    times = arrival_times(
        ArrivalSpec(process="poisson", rate_req_s=rate), N, np.random.default_rng(1)
    )
    gaps = np.diff(np.r_[0.0, times])
    # The mean of N exponential gaps has std (1/rate)/sqrt(N).
    assert abs(gaps.mean() - 1 / rate) < 5 * (1 / rate) / np.sqrt(N)
    assert (gaps >= 0).all()


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_mean_and_cv(cv):
    rate = 4.0
    spec = ArrivalSpec(process="gamma", rate_req_s=rate, cv=cv)
    gaps = np.diff(np.r_[0.0, arrival_times(spec, N, np.random.default_rng(2))])
    mean = 1 / rate
    assert abs(gaps.mean() - mean) < 5 * cv * mean / np.sqrt(N)
    # Gamma with shape k = 1/cv^2: var(s^2) = sigma^4 (2 + 6/k) / N, so the sample cv has
    # standard error about cv * sqrt(2 + 6/k) / (2 sqrt(N)).
    shape = 1 / cv**2
    se_cv = cv * np.sqrt(2 + 6 / shape) / (2 * np.sqrt(N))
    assert abs(gaps.std() / gaps.mean() - cv) < 6 * se_cv


def test_burst_is_all_zero_and_replay_generates_nothing():
    assert (arrival_times(ArrivalSpec(process="burst"), 5, np.random.default_rng(0)) == 0).all()
    with pytest.raises(ConfigError, match="replay"):
        arrival_times(ArrivalSpec(process="replay"), 5, np.random.default_rng(0))


def test_arrivals_until_duration():
    spec = ArrivalSpec(process="poisson", rate_req_s=50.0)
    times = arrivals_until(spec, 100.0, np.random.default_rng(3))
    assert (times < 100.0).all() and (np.diff(times) >= 0).all()
    expected = 50.0 * 100.0
    assert abs(len(times) - expected) < 5 * np.sqrt(expected)  # Poisson count: std sqrt(mean)
    with pytest.raises(ConfigError, match="duration_s"):
        arrivals_until(ArrivalSpec(process="burst"), 1.0, np.random.default_rng(0))


def test_same_seed_same_times():
    spec = ArrivalSpec(process="gamma", rate_req_s=3.0, cv=3.0)
    a = arrival_times(spec, 1000, np.random.default_rng(7))
    b = arrival_times(spec, 1000, np.random.default_rng(7))
    c = arrival_times(spec, 1000, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_rate_must_be_positive():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="rate_req_s"):
        ArrivalSpec(rate_req_s=0.0)
