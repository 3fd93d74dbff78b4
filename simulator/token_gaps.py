"""TokenGaps: every inter-token gap of a run, the samples of vLLM's ITL statistics.

``vllm bench serve`` streams each response and pools, over all requests, the time
between consecutive output tokens of a request (its ``itl`` list: one gap per
generated token after the first). The simulator sees the same thing when a request's
token counter advances: the gap is the time since that request's previous token
(a step it sat out, a prefill step that stalled the decodes, a preemption and its
recompute all lengthen the gap, as a streaming client would see).

Many requests advance in the same step with the same gap, so single gaps (:meth:`add`,
one call per token of a request advanced on its own) are kept as a multiset ``gap_s -> count``
(memory grows with the distinct gaps, not with the tokens); a bulk decode path hands
over ``(gap, count)`` pairs instead: :meth:`add_run` (the groups riding the decode
clock that decoded in the previous step too share one gap; one pair per step, 16 bytes,
in typed arrays) or
:meth:`add_many` (whole arrays). The statistics equal numpy's on the
expanded list: ``np.mean``, ``np.std`` (population, ``ddof=0``), and
``np.percentile`` with linear interpolation between the two closest ranks.
"""

from __future__ import annotations

import math
from array import array
from itertools import repeat

import numpy as np


class TokenGaps:
    """A multiset of inter-token gaps in seconds (see the module docstring)."""

    def __init__(self) -> None:
        self._gap_to_count: dict[float, int] = {}
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._run_gaps = array("d")
        self._run_counts = array("q")
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, gap_s: float, count: int = 1) -> None:
        if count > 0:
            self._gap_to_count[gap_s] = self._gap_to_count.get(gap_s, 0) + count
            self._sorted = None

    def add_run(self, gap_s: float, count: int) -> None:
        """``count`` gaps of ``gap_s`` seconds, appended to typed arrays (one call a step)."""
        self._run_gaps.append(gap_s)
        self._run_counts.append(count)
        self._sorted = None

    def add_tick_runs(self, prev_s: float, ends_s: list[float], count: int) -> None:
        """``add_run(end - previous end, count)`` for each end of ``ends_s`` in turn, the
        first one's previous end being ``prev_s`` (the steps of a steady run)."""
        append = self._run_gaps.append
        for end_s in ends_s:
            append(end_s - prev_s)
            prev_s = end_s
        self._run_counts.extend(repeat(count, len(ends_s)))
        self._sorted = None

    def add_many(self, gaps_s: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts[k]`` gaps of ``gaps_s[k]`` seconds for every k (a bulk path's tally)."""
        values = np.asarray(gaps_s, dtype=np.float64)
        counts = np.asarray(counts, dtype=np.int64)
        if values.shape != counts.shape:
            raise ValueError(f"{values.shape[0]} gaps but {counts.shape[0]} counts")
        keep = counts > 0
        self._chunks.append((values[keep].copy(), counts[keep].copy()))
        self._sorted = None

    @property
    def num_gaps(self) -> int:
        return (
            sum(self._gap_to_count.values())
            + sum(int(c.sum()) for _, c in self._chunks)
            + sum(self._run_counts)
        )

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)``: the distinct gaps, sorted, and how many of each (the same
        whichever way the gaps were added, so the statistics are too)."""
        if self._sorted is None:
            n = len(self._gap_to_count)
            values = [np.fromiter(self._gap_to_count.keys(), dtype=np.float64, count=n)]
            counts = [np.fromiter(self._gap_to_count.values(), dtype=np.int64, count=n)]
            values += [v for v, _ in self._chunks]
            counts += [c for _, c in self._chunks]
            values.append(np.frombuffer(self._run_gaps, dtype=np.float64))
            counts.append(np.frombuffer(self._run_counts, dtype=np.int64))
            distinct, index = np.unique(np.concatenate(values), return_inverse=True)
            summed = np.bincount(index, weights=np.concatenate(counts), minlength=len(distinct))
            self._sorted = (distinct, summed.astype(np.int64))
        return self._sorted

    def mean(self) -> float:
        values, counts = self.arrays()
        return math.fsum(values * counts) / int(counts.sum()) if len(values) else math.nan

    def std(self) -> float:
        values, counts = self.arrays()
        if not len(values):
            return math.nan
        mean = self.mean()
        return math.sqrt(math.fsum((values - mean) ** 2 * counts) / int(counts.sum()))

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
