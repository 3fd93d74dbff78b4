"""The search for one configuration's capacity: a bracket, then bisection.

From a start rate r0 (the run's own rate, or ``--start-rate``):

1. bracket: r0 is simulated; while a rate passes, the next is twice it, while it fails,
   half of it, until one passes and one fails (at most :data:`MAX_BRACKET_STEPS` steps
   each way: a server that passes at r0 x 2^12 or fails at r0 / 2^12 is reported as
   beyond the search, never with a rate);
2. bisection: the middle of the highest passing and the lowest failing rate, until they
   are within the precision (``Precision``: absolute in req/s, or relative to the passing
   rate).

The capacity reported is the highest rate that passed, with the lowest that failed above
it: the true capacity lies between them, if the statistic grows with the rate. Seeds share
their draws across rates (the same seed draws the same mix order and the same Poisson
gaps, scaled by the rate: common random numbers), which keeps the statistic close to
monotone in the rate; a search that finds it not monotone (a pass above a failure) says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pagesim.errors import ConfigError

#: doublings (or halvings) from the start rate before the search gives up bracketing
MAX_BRACKET_STEPS = 12


@dataclass(frozen=True)
class Precision:
    """How close the passing and failing rates must end: ``value`` req/s, or a fraction of
    the passing rate when ``relative``."""

    value: float
    relative: bool

    def text(self) -> str:
        return f"{self.value:.0%} of the rate" if self.relative else f"{self.value:g} req/s"

    def reached(self, low: float, high: float) -> bool:
        width = high - low
        return width <= (self.value * low if self.relative else self.value)


def parse_precision(text: str) -> Precision:
    """``0.1`` (req/s) or ``5%`` (relative), or a one-line ConfigError."""
    raw = str(text).strip()
    relative = raw.endswith("%")
    try:
        value = float(raw.rstrip("%")) / (100 if relative else 1)
    except ValueError:
        raise ConfigError(f"--precision {text!r}: give req/s (0.1) or a percentage (5%)") from None
    if not math.isfinite(value) or value <= 0 or (relative and value >= 1):
        raise ConfigError(f"--precision {text!r}: must be positive (and under 100%)")
    return Precision(value, relative)


@dataclass
class RateSearch:
    """One configuration's search (module docstring): ``next_rate`` until None."""

    start: float
    precision: Precision
    #: rate -> passed, in the order tried
    tried: dict[float, bool] = field(default_factory=dict)

    @property
    def passing(self) -> float | None:
        """The highest rate that passed below the lowest that failed (None: none did)."""
        failing = self.failing
        ok = [r for r, p in self.tried.items() if p and (failing is None or r < failing)]
        return max(ok) if ok else None

    @property
    def failing(self) -> float | None:
        bad = [r for r, p in self.tried.items() if not p]
        return min(bad) if bad else None

    @property
    def is_monotone(self) -> bool:
        """No rate passed above a rate that failed."""
        failing = self.failing
        return failing is None or not any(p and r > failing for r, p in self.tried.items())

    def next_rate(self) -> float | None:
        """The next rate to simulate, None when the search is over."""
        if not self.tried:
            return self.start
        low, high = self.passing, self.failing
        if low is None:
            lowest = min(self.tried)
            return lowest / 2 if lowest > self.start / 2**MAX_BRACKET_STEPS else None
        if high is None:
            return low * 2 if low < self.start * 2**MAX_BRACKET_STEPS else None
        if self.precision.reached(low, high):
            return None
        return (low + high) / 2

    def record(self, rate: float, passed: bool) -> None:
        self.tried[rate] = passed

    @property
    def is_bracketed(self) -> bool:
        return self.passing is not None and self.failing is not None

    def answer(self) -> str:
        """The capacity in words: a bracketed rate, or where the search stopped."""
        low, high = self.passing, self.failing
        if low is not None and high is not None:
            return f"{low:.4g} req/s (passes; {high:.4g} fails; precision {self.precision.text()})"
        if low is None:
            return f"below {min(self.tried):.4g} req/s (the lowest rate tried fails)"
        return f"above {max(self.tried):.4g} req/s (the highest rate tried passes)"
