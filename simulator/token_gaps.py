"""TokenGaps: every inter-token gap of a run, the samples of vLLM's ITL statistics.

``vllm bench serve`` streams each response and pools, over all requests, the time
between consecutive output tokens of a request (its ``itl`` list: one gap per
generated token after the first). The simulator sees the same thing when a request's
token counter advances: the gap is the time since that request's previous token
(a step it sat out, a prefill step that stalled the decodes, a preemption and its
recompute all lengthen the gap, as a streaming client would see).

Many requests advance in the same step with the same gap, so single gaps (:meth:`add`,
one call per token of a request advanced on its own) are kept as a multiset: a run of
equal gaps added one after another as one gap and its count, appended to typed arrays,
and folded into a sorted ``(gap, count)`` tally whenever more are
pending than the tally has distinct gaps (at least ``MIN_FOLD``), so memory grows with
the distinct gaps, not with the tokens, and no gap is a Python object (a dict of float
keys, filled while requests end, pinned the freed requests' memory pages). A bulk decode
path hands over ``(gap, count)`` pairs instead: :meth:`add_run` (the groups riding the
decode clock that decoded in the previous step too share one gap; one pair per step, 16
bytes, in typed arrays) or :meth:`add_many` (whole arrays). The statistics equal numpy's on the
expanded list: ``np.mean``, ``np.std`` (population, ``ddof=0``), and
``np.percentile`` with linear interpolation between the two closest ranks.
"""

from __future__ import annotations

import math
from array import array
from typing import Final

import numpy as np

#: single gaps pending before they are folded into the tally (or the tally's size, if more)
MIN_FOLD: Final = 1 << 16


class TokenGaps:
    """A multiset of inter-token gaps in seconds (see the module docstring).

    Gaps wait in typed arrays (single ones, bulk chunks, per-step runs) until they are
    folded into one sorted tally: single ones when enough are pending, all of them when
    :meth:`arrays` is asked or :meth:`compact` called (``run_engine`` calls it as soon
    as the run ends, so that a long run's arrays are freed before the per-request table
    is built)."""

    def __init__(self) -> None:
        #: distinct gaps ascending, and how many of each: everything folded so far
        self._tally: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0, dtype=np.int64))
        self._fold_at = MIN_FOLD
        #: the single gaps added last, all equal (the groups decoding in one step mostly
        #: share their last token's time): one gap and its count, not yet pending
        self._open_gap = math.nan
        self._open_count = 0
        self._clear_pending()
        self._clear_runs()

    def _clear_pending(self) -> None:
        """No single gaps or chunks wait to be folded."""
        self._pending_gaps = array("d")
        self._pending_counts = array("q")
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []

    def _clear_runs(self) -> None:
        """No per-step runs or tick runs wait to be folded."""
        self._run_gaps = array("d")
        self._run_counts = array("q")
        #: runs of ticks (:meth:`add_tick_runs`): every step's end, and per run the end
        #: before its first step, its length and its gaps per step (the gaps are taken
        #: when folded: the same subtractions)
        self._tick_ends = array("d")
        self._tick_prev = array("d")
        self._tick_lens = array("q")
        self._tick_counts = array("q")

    def add(self, gap_s: float, count: int = 1) -> None:
        if count <= 0:
            return
        if gap_s == self._open_gap:
            self._open_count += count
            return
        if self._open_count:
            self._close_open()
            if len(self._pending_gaps) >= self._fold_at:
                self._fold(with_runs=False)
        self._open_gap = gap_s
        self._open_count = count

    def _close_open(self) -> None:
        """The open run of equal single gaps becomes one pending (gap, count)."""
        self._pending_gaps.append(self._open_gap)
        self._pending_counts.append(self._open_count)
        self._open_count = 0
        self._open_gap = math.nan

    def add_run(self, gap_s: float, count: int) -> None:
        """``count`` gaps of ``gap_s`` seconds, appended to typed arrays (one call a step)."""
        self._run_gaps.append(gap_s)
        self._run_counts.append(count)

    def add_tick_runs(self, prev_s: float, ends_s: list[float], count: int) -> None:
        """``add_run(end - previous end, count)`` for each end of ``ends_s`` in turn, the
        first one's previous end being ``prev_s`` (the steps of a steady run). The ends
        are kept as they are and subtracted when folded."""
        if ends_s and count > 0:
            self._tick_ends.fromlist(ends_s)
            self._tick_prev.append(prev_s)
            self._tick_lens.append(len(ends_s))
            self._tick_counts.append(count)

    def add_many(self, gaps_s: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts[k]`` gaps of ``gaps_s[k]`` seconds for every k (a bulk path's tally)."""
        values = np.asarray(gaps_s, dtype=np.float64)
        counts = np.asarray(counts, dtype=np.int64)
        if values.shape != counts.shape:
            raise ValueError(f"{values.shape[0]} gaps but {counts.shape[0]} counts")
        keep = counts > 0
        self._chunks.append((values[keep].copy(), counts[keep].copy()))

    @property
    def num_gaps(self) -> int:
        return (
            int(self._tally[1].sum())
            + sum(self._pending_counts)
            + self._open_count
            + sum(int(c.sum()) for _, c in self._chunks)
            + sum(self._run_counts)
            + sum(map(int.__mul__, self._tick_lens, self._tick_counts))
        )

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)``: the distinct gaps, sorted, and how many of each (the same
        whichever way the gaps were added, so the statistics are too)."""
        self.compact()
        return self._tally

    def compact(self) -> None:
        """Fold every gap added so far into the tally (the statistics do not change)."""
        if (
            self._open_count
            or self._pending_gaps
            or self._chunks
            or self._run_gaps
            or self._tick_ends
        ):
            self._fold(with_runs=True)

    def _fold(self, *, with_runs: bool) -> None:
        """Fold the pending single gaps and chunks (and the runs) into the tally; the next
        fold of single gaps waits for as many as the tally has distinct gaps (so a gap
        takes part in O(log n) folds)."""
        if self._open_count:
            self._close_open()
        values = [self._tally[0], np.frombuffer(self._pending_gaps, dtype=np.float64)]
        counts = [self._tally[1], np.frombuffer(self._pending_counts, dtype=np.int64)]
        values += [v for v, _ in self._chunks]
        counts += [c for _, c in self._chunks]
        if with_runs:
            values.append(np.frombuffer(self._run_gaps, dtype=np.float64))
            counts.append(np.frombuffer(self._run_counts, dtype=np.int64))
            if self._tick_ends:
                gaps, gap_counts = self._tick_gaps()
                values.append(gaps)
                counts.append(gap_counts)
        self._tally = _tally(np.concatenate(values), np.concatenate(counts))
        del values, counts
        self._clear_pending()
        if with_runs:
            self._clear_runs()
        self._fold_at = max(MIN_FOLD, len(self._tally[0]))

    def _tick_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """The tick runs' gaps (each end less the end before it in its run, the run's
        first less the run's previous end) and their counts."""
        ends = np.frombuffer(self._tick_ends, dtype=np.float64)
        lens = np.frombuffer(self._tick_lens, dtype=np.int64)
        prev = np.empty_like(ends)
        prev[1:] = ends[:-1]
        prev[np.cumsum(lens) - lens] = np.frombuffer(self._tick_prev, dtype=np.float64)
        counts = np.repeat(np.frombuffer(self._tick_counts, dtype=np.int64), lens)
        return ends - prev, counts

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


def _tally(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``values`` ascending and the sum of their ``counts``: a sort and a
    segmented sum, which holds about four arrays of the input's length at once (a
    million-request run has millions of ``(gap, count)`` pairs; ``np.unique`` with
    its inverse index held about seven)."""
    order = np.argsort(values)
    values = values[order]
    counts = counts[order]
    del order
    is_first = np.empty(len(values), dtype=bool)
    is_first[:1] = True
    np.not_equal(values[1:], values[:-1], out=is_first[1:])
    starts = np.flatnonzero(is_first)
    return values[starts], np.add.reduceat(counts, starts)
