"""Arrival processes: when each request arrives (all randomness from the one rng).

:data:`ARRIVAL_PROCESSES` registers them by the name ``arrivals.process`` uses (adding
one is one entry; the spec's allowed names and ``pagesim list`` follow from it):

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagesim.errors import ConfigError
from pagesim.workloads.spec import ArrivalSpec

#: ``(arrivals, num, rng)`` -> ``num`` values: gaps, or arrival times
Draw = Callable[[ArrivalSpec, int, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class ArrivalProcess:
    """How one process makes a trace's arrival times (see the module docstring): from
    ``gaps`` drawn at ``arrivals.rate_req_s``, as ``times`` for a number of requests,
    or (``until``) as the arrivals before a duration; ``no_count`` says why it makes
    no times for a given number of requests (replay: ``build.py`` takes the trace's)."""

    description: str
    gaps: Draw | None = None
    times: Draw | None = None
    until: Callable[[ArrivalSpec, float, np.random.Generator], np.ndarray] | None = None
    no_count: str = ""

    @property
    def draws_at_rate(self) -> bool:
        """Whether it draws times at ``arrivals.rate_req_s`` (which it then requires)."""
        return self.gaps is not None or self.until is not None


def _exponential_gaps(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    assert arrivals.rate_req_s is not None  # ArrivalSpec requires it
    return rng.exponential(1.0 / arrivals.rate_req_s, size=num)


def _gamma_gaps(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    assert arrivals.rate_req_s is not None  # ArrivalSpec requires it
    shape = 1.0 / arrivals.cv**2
    return rng.gamma(shape, arrivals.cv**2 / arrivals.rate_req_s, size=num)


def _quantized_until(
    arrivals: ArrivalSpec, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    assert arrivals.rate_req_s is not None  # ArrivalSpec requires it
    return quantized_poisson(arrivals.rate_req_s, arrivals.quantum_s, duration_s, rng)


def _all_at_zero(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    return np.zeros(num)


ARRIVAL_PROCESSES: dict[str, ArrivalProcess] = {
    "poisson": ArrivalProcess("exponential gaps at rate_req_s", gaps=_exponential_gaps),
    "gamma": ArrivalProcess("gamma gaps at rate_req_s with variation cv", gaps=_gamma_gaps),
    "quantized-poisson": ArrivalProcess(
        "the paper artifact's: Poisson counts per quantum_s over workload.duration_s",
        until=_quantized_until,
        no_count="draws a random number of requests over workload.duration_s; "
        "give workload.duration_s",
    ),
    "replay": ArrivalProcess(
        "the trace's own timestamps / time_scale",
        no_count="takes the trace's timestamps; it generates none",
    ),
    "burst": ArrivalProcess("every request at t = 0", times=_all_at_zero),
}


def rate_processes() -> list[str]:
    """The registered processes that draw at ``rate_req_s``, in registry order."""
    return [name for name, process in ARRIVAL_PROCESSES.items() if process.draws_at_rate]


def arrival_times(arrivals: ArrivalSpec, num: int, rng: np.random.Generator) -> np.ndarray:
    """``num`` non-decreasing arrival times (s) for a generated process (not replay)."""
    process = ARRIVAL_PROCESSES[arrivals.process]
    if process.times is not None:
        return process.times(arrivals, num, rng)
    if process.gaps is None:
        raise ConfigError(f"arrivals.process {arrivals.process!r} {process.no_count}")
    return np.cumsum(process.gaps(arrivals, num, rng))


def arrivals_until(
    arrivals: ArrivalSpec, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times strictly before ``duration_s`` (a process that draws at a rate)."""
    process = ARRIVAL_PROCESSES[arrivals.process]
    if not process.draws_at_rate:
        raise ConfigError(
            f"workload.duration_s needs arrivals.process {', '.join(rate_processes())} or "
            f"replay, got {arrivals.process!r}"
        )
    assert arrivals.rate_req_s is not None
    if process.until is not None:
        return process.until(arrivals, duration_s, rng)
    assert process.gaps is not None
    expected = arrivals.rate_req_s * duration_s
    chunk = int(expected + 6 * np.sqrt(expected) * max(1.0, arrivals.cv) + 16)
    times = np.cumsum(process.gaps(arrivals, chunk, rng))
    while times[-1] < duration_s:
        more = times[-1] + np.cumsum(process.gaps(arrivals, chunk, rng))
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
