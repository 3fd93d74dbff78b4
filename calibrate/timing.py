"""The timing rule: warm up, then repeat until the spread is tight; report median and IQR.

A measurement is ``run_once()`` (one timed launch, in seconds: on a GPU the elapsed
time between two CUDA events around the launch), preceded by ``before_each()`` (on a GPU,
an L2 flush: writing a buffer larger than L2 so that every run reads from DRAM, as a
serving step does for a KV cache far larger than L2). After ``num_warmup`` untimed runs
it repeats until at least ``min_repeats`` samples have IQR / median <= ``max_rel_iqr``,
or ``max_repeats`` samples are taken; ``is_converged`` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagesim.errors import ConfigError


@dataclass(frozen=True)
class TimingPolicy:
    num_warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    max_rel_iqr: float = 0.05

    def __post_init__(self) -> None:
        if not 1 <= self.min_repeats <= self.max_repeats:
            raise ConfigError(
                f"timing: need 1 <= min_repeats <= max_repeats, got {self.min_repeats}, {self.max_repeats}"
            )
        if self.num_warmup < 0 or self.max_rel_iqr <= 0:
            raise ConfigError("timing: num_warmup must be >= 0 and max_rel_iqr > 0")


QUICK_POLICY = TimingPolicy(num_warmup=2, min_repeats=3, max_repeats=15, max_rel_iqr=0.08)


@dataclass(frozen=True)
class TimingStats:
    median_s: float
    iqr_s: float
    min_s: float
    mean_s: float
    num_repeats: int
    is_converged: bool

    @property
    def rel_iqr(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else float("inf")

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "median_s": self.median_s,
            "iqr_s": self.iqr_s,
            "min_s": self.min_s,
            "mean_s": self.mean_s,
            "num_repeats": self.num_repeats,
            "is_converged": self.is_converged,
        }


def summarize(samples_s: list[float], is_converged: bool) -> TimingStats:
    x = np.asarray(samples_s, dtype=float)
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return TimingStats(
        float(med), float(q3 - q1), float(x.min()), float(x.mean()), len(x), is_converged
    )


def measure(
    run_once: Callable[[], float],
    policy: TimingPolicy,
    before_each: Callable[[], None] | None = None,
) -> TimingStats:
    """Time ``run_once`` under ``policy`` (see the module docstring)."""
    for _ in range(policy.num_warmup):
        if before_each is not None:
            before_each()
        run_once()
    samples: list[float] = []
    while len(samples) < policy.max_repeats:
        if before_each is not None:
            before_each()
        samples.append(float(run_once()))
        if len(samples) >= policy.min_repeats:
            stats = summarize(samples, True)
            if stats.rel_iqr <= policy.max_rel_iqr:
                return stats
    return summarize(samples, False)
