"""Beam ancestry: which of the current beams each beam of the next step continues.

What a beam step does in the paper's prototype (GitHub ``sosp-ae-39/sosp-ae-astra``,
``astra/cacheflow/models/sample.py`` and ``master/scheduler.py``): the group's ``k``
running beams are scored by the model; the ``k`` best (beam, token) candidates of all
``k × vocab`` are kept. A beam that is the parent of at least one candidate continues
its own line (its first candidate); a beam that is the parent of none is freed and
re-forked from a parent with more than one candidate, sharing the parent's blocks by
reference (copy on write at the next append). Beams never finish early (no stop
token; every beam runs ``output_len`` steps), so a group always has ``k`` beams.

pagesim has no model to score the candidates: :func:`beam_parents` draws the parent of
each of the ``k`` candidate slots, and the scheduler applies the rule above to the
counts (``Scheduler._beam_step``). One parameter, ``scheduler.beam_keep_prob`` = p:

- slot i (i < the number of current beams) is beam i's own continuation with
  probability p; otherwise (probability 1 - p) its parent is drawn uniformly, with
  replacement, among the current beams. So beam i is the parent of slot i with
  probability p + (1 - p) / k and of each other slot with probability (1 - p) / k;
- p = 0 (the default) is the uniform draw, the same random stream as before the
  option existed (one ``rng.integers`` call per beam step); p = 1 never coalesces;
- right after the prompt under ``vllm`` (one beam, ``k`` slots) there is only beam 0,
  and every slot continues it; ``vllm-paper`` admits the group with ``k`` identical
  beams (as the prototype does), so which parent a slot takes then changes no memory.

Why such a model: a real language model's next-token distribution is often peaked
(mid-word, punctuation, copied spans), so each beam's own best token is among the
``k`` best candidates more often than a uniform draw gives, and real beams stay apart
longer than uniform parents (a Wright-Fisher ancestry, whose lines coalesce at a rate
that grows with ``k``) would keep them. Sharing hardly moves until p is large: beams
that coalesce at all within a 16-token block still share everything but their last
block. For the paper's Figure 15 (``experiments/paper_fig15.yaml``) p = 0.85 was
fitted on beam width 4 alone and validated on widths 2 and 6.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

#: what a beam step does to a group's beams (:func:`beam_plan`)
BeamPlan = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]


#: 2 ** 32: the uniform draws' 32-bit values lie in [0, TWO_32)
TWO_32: Final = 1 << 32
#: 32-bit values :class:`UniformDraws` takes from the generator in one call
CHUNK: Final = 4096


class UniformDraws:
    """The values of ``rng.integers(0, n, size)`` calls (``n`` < 2 ** 32), in the order
    made, from 32-bit values taken from ``rng`` ahead, ``CHUNK`` in one call.

    numpy draws a bounded integer in a range of ``n`` < 2 ** 32 values from one 32-bit
    value ``u`` of its bit generator at a time (Lemire's method: ``(u * n) >> 32``,
    drawing again while the low 32 bits of ``u * n`` are below ``(2 ** 32 - n) % n``,
    which is 0 when ``n`` is a power of two; a range of one value takes none), and
    ``rng.integers(0, 2 ** 32, size)`` hands out those 32-bit values themselves. So the
    values are exactly those of the calls; the generator itself runs up to a chunk ahead
    of them (:attr:`num_taken` says how many 32-bit values the calls have used), so
    nothing else may draw from it meanwhile. ``tests/simulator/test_beam_ancestry.py``
    checks the values against numpy for ranges that reject and ones that never do, and
    sizes odd and even."""

    def __init__(self, rng: np.random.Generator, chunk: int = CHUNK) -> None:
        self._rng = rng
        self._chunk = chunk
        #: the chunk of 32-bit values, and the next one to use
        self._raw = np.zeros(0, dtype=np.int64)
        self._next = 0
        #: the chunk as a list, each value shifted right by ``_shift`` (a power-of-two
        #: range takes the top bits: small ints, which Python does not allocate)
        self._values: list[int] = []
        self._shift = 0
        #: 32-bit values the calls have used so far
        self.num_taken = 0

    def _take_values(self, shift: int) -> list[int]:
        """The chunk's values shifted right by ``shift``: a new chunk once this one is
        used up (its first value next), the list again if ``shift`` changed."""
        if self._next == len(self._raw):
            self._raw = self._rng.integers(0, TWO_32, size=self._chunk)
            self._next = 0
        elif shift == self._shift:
            return self._values
        self._values = (self._raw >> shift).tolist()
        self._shift = shift
        return self._values

    def integers(self, n: int, size: int) -> list[int]:
        """What ``rng.integers(0, n, size=size).tolist()`` would give."""
        if not 1 <= n < TWO_32:
            raise ValueError(f"UniformDraws draws from ranges of 1 to 2**32 - 1 values, got {n}")
        if n == 1:
            return [0] * size
        out: list[int] = []
        # a power of two takes the top bits of u (and never rejects one)
        shift = 33 - n.bit_length() if n & (n - 1) == 0 else 0
        values = self._take_values(shift)
        i = self._next
        if shift:  # the values themselves: a slice of the chunk, the rest from the next
            end = min(i + size, len(values))
            self._next = end
            self.num_taken += end - i
            out = values[i:end]
            return out if end - i == size else out + self.integers(n, size - (end - i))
        threshold = (TWO_32 - n) % n
        taken = 0
        while len(out) < size:
            if i == len(values):
                self._next = i
                values = self._take_values(shift)
                i = 0
            m = values[i] * n
            i += 1
            taken += 1
            if m % TWO_32 >= threshold:
                out.append(m >> 32)
        self._next = i
        self.num_taken += taken
        return out


def beam_parents(
    rng: np.random.Generator, num_beams: int, beam_width: int, keep_prob: float
) -> np.ndarray:
    """The parent (an index into the current beams) of each of ``beam_width`` slots.

    ``keep_prob`` = 0 draws exactly ``rng.integers(0, num_beams, size=beam_width)``;
    otherwise that draw is followed by ``rng.random(beam_width)``, and slot i takes beam
    i where that number is below ``keep_prob`` (for i < ``num_beams``).
    """
    parents = rng.integers(0, num_beams, size=beam_width)
    if keep_prob == 0.0:
        return parents
    keeps = rng.random(beam_width) < keep_prob
    num_own = min(num_beams, beam_width)
    own = np.flatnonzero(keeps[:num_own])
    parents[own] = own
    return parents


def keep_line_prob(keep_prob: float, num_beams: int) -> float:
    """The probability that a given beam of ``num_beams`` (= the beam width) continues
    its own line in a step: it is the parent of at least one slot."""
    k = num_beams
    other = (1.0 - keep_prob) / k
    return 1.0 - (1.0 - keep_prob - other) * (1.0 - other) ** (k - 1)


def beam_plan(num_beams: int, parents: Sequence[int]) -> BeamPlan:
    """The prototype's rule applied to the parents of a step's slots: the positions of
    the beams no slot chose (freed), and for each beam chosen, in order, its position
    and how many children it forks (chosen c times: c - 1)."""
    counts = [0] * num_beams
    for parent in parents:
        counts[parent] += 1
    freed = tuple(i for i, count in enumerate(counts) if not count)
    kept = tuple((i, count - 1) for i, count in enumerate(counts) if count)
    return freed, kept
