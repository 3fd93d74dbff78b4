"""BuddyHeap: the pool decomposition, exact placements, and a brute-force reference model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.allocators.buddy import BuddyHeap
from pagesim.errors import AllocatorError, ConfigError


def test_non_power_of_two_pool_is_covered_by_maximal_aligned_blocks():
    heap = BuddyHeap(983)  # the paper's OPT-13B pool: 15,728 slots / 16
    assert heap.free_blocks() == [
        (0, 512),
        (512, 256),
        (768, 128),
        (896, 64),
        (960, 16),
        (976, 4),
        (980, 2),
        (982, 1),
    ]
    assert heap.num_free_granules == 983


def test_split_takes_lowest_address_and_free_coalesces():
    heap = BuddyHeap(16)
    assert heap.alloc(3) == 0  # rounded to 4
    assert heap.free_blocks() == [(4, 4), (8, 8)]
    assert heap.alloc(1) == 4
    assert heap.alloc(8) == 8
    assert heap.free_blocks() == [(5, 1), (6, 2)]
    heap.free(0)
    heap.free(4)
    assert heap.free_blocks() == [(0, 8)]
    heap.free(8)
    assert heap.free_blocks() == [(0, 16)]
    heap.check_invariants()


def test_seven_max_length_reservations_fit_the_paper_pool():
    heap = BuddyHeap(983)
    offsets = [heap.alloc(128) for _ in range(8)]  # 2048 slots / 16 = 128 granules
    # the smallest free block that holds 128 goes first: the exact 128, then the 256's halves
    assert offsets[:7] == [768, 512, 640, 0, 128, 256, 384]
    assert offsets[7] is None
    assert heap.num_fit_when_empty(128) == 7


def test_no_merge_past_the_pool_end():
    heap = BuddyHeap(12)  # 8 + 4
    a, b = heap.alloc(8), heap.alloc(4)
    heap.free(b)
    heap.free(a)
    assert heap.free_blocks() == [(0, 8), (8, 4)]
    assert heap.alloc(16) is None


def test_bad_input_names_the_problem():
    with pytest.raises(ConfigError, match="num_granules=0"):
        BuddyHeap(0)
    heap = BuddyHeap(8)
    with pytest.raises(AllocatorError, match="offset 3"):
        heap.free(3)
    off = heap.alloc(2)
    heap.free(off)
    with pytest.raises(AllocatorError, match="already freed"):
        heap.free(off)


class BitmapBuddy:
    """Reference: a bitmap of granules; the buddy choice derived from maximal free aligned blocks."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.used = [False] * n
        self.size_by_offset: dict[int, int] = {}

    def _is_free(self, off: int, size: int) -> bool:
        return off + size <= self.n and not any(self.used[off : off + size])

    def maximal_free_blocks(self) -> list[tuple[int, int]]:
        out = []
        size = 1
        while size <= self.n:
            for off in range(0, self.n, size):
                if not self._is_free(off, size):
                    continue
                parent = off - off % (2 * size)
                if 2 * size > self.n or not self._is_free(parent, 2 * size):
                    out.append((off, size))
            size *= 2
        return out

    def alloc(self, k: int) -> int | None:
        size = 1
        while size < k:
            size *= 2
        fits = [(s, off) for off, s in self.maximal_free_blocks() if s >= size]
        if not fits:
            return None
        _, off = min(fits)
        for g in range(off, off + size):
            self.used[g] = True
        self.size_by_offset[off] = size
        return off

    def free(self, off: int) -> None:
        size = self.size_by_offset.pop(off)
        for g in range(off, off + size):
            self.used[g] = False


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 100),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 10**6)), max_size=60),
)
def test_buddy_matches_bitmap_reference(n, ops):
    heap, ref = BuddyHeap(n), BitmapBuddy(n)
    live: list[int] = []
    for is_alloc, k, pick in ops:
        if is_alloc or not live:
            got, want = heap.alloc(k), ref.alloc(k)
            assert got == want
            if got is not None:
                live.append(got)
        else:
            off = live.pop(pick % len(live))
            heap.free(off)
            ref.free(off)
        heap.check_invariants()
        assert heap.free_blocks() == sorted(ref.maximal_free_blocks())
        assert heap.num_free_granules == ref.used.count(False)
        for k in (1, 3, 8):
            assert heap.num_fit_now(k) == _count_sequential(ref, k)


def _count_sequential(ref: BitmapBuddy, k: int) -> int:
    size = 1
    while size < k:
        size *= 2
    return sum(s // size for _, s in ref.maximal_free_blocks() if s >= size)
