"""TokenGaps: every inter-token gap of a run, the samples of vLLM's ITL statistics.

``vllm bench serve`` streams each response and pools, over all requests, the time
between consecutive output tokens of a request (its ``itl`` list: one gap per
generated token after the first). The simulator sees the same thing when a request's
token counter advances: the gap is the time since that request's previous token
(a step it sat out, a prefill step that stalled the decodes, a preemption and its
recompute all lengthen the gap, as a streaming client would see).

Many requests advance in the same step with the same gap, so the gaps are kept as a
multiset ``gap_s -> count`` (memory grows with the distinct gaps, not with the
tokens), and :meth:`add` takes a count so that a bulk decode path can record a whole
step at once. The statistics equal numpy's on the expanded list: ``np.mean``,
``np.std`` (population, ``ddof=0``), and ``np.percentile`` with linear interpolation
between the two closest ranks.
"""

from __future__ import annotations

import math

import numpy as np


class TokenGaps:
    """A multiset of inter-token gaps in seconds (see the module docstring)."""

    def __init__(self) -> None:
        self._gap_to_count: dict[float, int] = {}
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, gap_s: float, count: int = 1) -> None:
        if count > 0:
            self._gap_to_count[gap_s] = self._gap_to_count.get(gap_s, 0) + count
            self._sorted = None

    def add_counts(self, gap_to_count: dict[float, int]) -> None:
        """Add a whole ``gap_s -> count`` mapping (a hot loop's local tally)."""
        if not self._gap_to_count:
            self._gap_to_count = {g: c for g, c in gap_to_count.items() if c > 0}
            self._sorted = None
            return
        for gap_s, count in gap_to_count.items():
            self.add(gap_s, count)

    @property
    def num_gaps(self) -> int:
        return sum(self._gap_to_count.values())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)`` sorted by value."""
        if self._sorted is None:
            n = len(self._gap_to_count)
            values = np.fromiter(self._gap_to_count.keys(), dtype=np.float64, count=n)
            counts = np.fromiter(self._gap_to_count.values(), dtype=np.int64, count=n)
            order = np.argsort(values, kind="stable")
            self._sorted = (values[order], counts[order])
        return self._sorted

    def mean(self) -> float:
        values, counts = self.arrays()
        return float(values @ counts / counts.sum()) if len(values) else math.nan

    def std(self) -> float:
        values, counts = self.arrays()
        if not len(values):
            return math.nan
        mean = values @ counts / counts.sum()
        return float(math.sqrt(((values - mean) ** 2) @ counts / counts.sum()))

    def percentile(self, q: float) -> float:
        """numpy's default (linear) percentile of the expanded list of gaps."""
        values, counts = self.arrays()
        if not len(values):
            return math.nan
        cum = np.cumsum(counts)
        rank = (int(cum[-1]) - 1) * q / 100.0
        lo = math.floor(rank)
        hi = min(lo + 1, int(cum[-1]) - 1)
        below, above = (float(values[np.searchsorted(cum, r, side="right")]) for r in (lo, hi))
        return below + (rank - lo) * (above - below)
