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

    def add(self, gap_s: float, count: int = 1) -> None:
        if count > 0:
            self._gap_to_count[gap_s] = self._gap_to_count.get(gap_s, 0) + count

    @property
    def num_gaps(self) -> int:
        return sum(self._gap_to_count.values())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)`` sorted by value."""
        values = np.array(sorted(self._gap_to_count), dtype=np.float64)
        counts = np.array([self._gap_to_count[v] for v in values.tolist()], dtype=np.int64)
        return values, counts

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
