"""Arrival processes: when each request arrives (all randomness from the one rng).

- poisson: exponential gaps with mean ``1 / rate_req_s`` (the paper's load model,
  §6.1); the first request arrives after the first gap;
- gamma: gamma gaps with mean ``1 / rate_req_s`` and coefficient of variation ``cv``
  (shape ``1 / cv^2``, scale ``cv^2 / rate``); cv = 1 is Poisson, cv > 1 is bursty;
- quantized-poisson: the PagedAttention artifact's generator
  (``astra/benchmark/trace.py``): ``floor(duration_s / quantum_s)`` quanta, a Poisson
  count with mean ``rate_req_s * quantum_s`` drawn for each, and every request of
  quantum i at ``i * quantum_s``; only bounded by a duration (its count is random);
- replay: the trace's own timestamps divided by ``time_scale`` (handled by
  ``build.py``, which knows the table);
- burst: every request at t = 0.

``arrivals_until`` draws gaps in chunks sized from the expected count (mean + 6
standard deviations), so a duration-bounded trace usually costs one draw.
"""

from __future__ import annotations

import numpy as np

from pagesim.errors import ConfigError
from pagesim.workloads.spec import GENERATED_PROCESSES, ArrivalSpec


def _gaps_s(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    rate = arrivals.rate_req_s
    assert rate is not None  # ArrivalSpec requires it for poisson and gamma
    if arrivals.process == "poisson":
        return rng.exponential(1.0 / rate, size=num)
    shape = 1.0 / arrivals.cv**2
    return rng.gamma(shape, arrivals.cv**2 / rate, size=num)


def arrival_times(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    """``num`` non-decreasing arrival times (s) for a generated process (not replay)."""
    if arrivals.process == "burst":
        return np.zeros(num)
    if arrivals.process == "replay":
        raise ConfigError(
            "arrivals.process 'replay' takes the trace's timestamps; it generates none"
        )
    if arrivals.process == "quantized-poisson":
        raise ConfigError(
            "arrivals.process 'quantized-poisson' draws a random number of requests over "
            "workload.duration_s; give workload.duration_s"
        )
    return np.cumsum(_gaps_s(arrivals, num, rng))


def arrivals_until(
    arrivals: ArrivalSpec, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times strictly before ``duration_s`` (poisson, gamma or quantized-poisson)."""
    if arrivals.process not in GENERATED_PROCESSES:
        raise ConfigError(
            f"workload.duration_s needs arrivals.process {', '.join(GENERATED_PROCESSES)} or "
            f"replay, got {arrivals.process!r}"
        )
    assert arrivals.rate_req_s is not None
    if arrivals.process == "quantized-poisson":
        return quantized_poisson(arrivals.rate_req_s, arrivals.quantum_s, duration_s, rng)
    expected = arrivals.rate_req_s * duration_s
    chunk = int(expected + 6 * np.sqrt(expected) * max(1.0, arrivals.cv) + 16)
    times = np.cumsum(_gaps_s(arrivals, chunk, rng))
    while times[-1] < duration_s:
        more = times[-1] + np.cumsum(_gaps_s(arrivals, chunk, rng))
        times = np.concatenate([times, more])
    return times[times < duration_s]


def quantized_poisson(
    rate_req_s: float, quantum_s: float, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """The artifact's arrivals: Poisson counts per quantum, each at its quantum's start.

    The quanta number ``floor(duration_s / quantum_s)`` (a ratio within 1e-9 of an
    integer counts as that integer, so 900 s / 10 ms is 90,000 quanta, as the
    artifact's ``int(duration * 1000 / time_quantum)`` gives).
    """
    num_quanta = int(np.floor(duration_s / quantum_s + 1e-9))
    counts = rng.poisson(rate_req_s * quantum_s, size=num_quanta)
    return np.repeat(np.arange(num_quanta) * quantum_s, counts)
