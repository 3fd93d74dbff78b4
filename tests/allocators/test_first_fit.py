"""FirstFitHeap: exact placements and a bitmap reference (lowest run of k free granules)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.allocators.first_fit import FirstFitHeap
from pagesim.errors import AllocatorError


def test_first_hole_that_fits_and_coalescing():
    heap = FirstFitHeap(10)
    assert [heap.alloc(3), heap.alloc(3), heap.alloc(3)] == [0, 3, 6]
    heap.free(3)
    assert heap.alloc(4) is None  # 1 + 3 free, not contiguous
    assert heap.alloc(2) == 3
    heap.free(0)
    heap.free(6)
    assert heap.free_blocks() == [(0, 3), (5, 5)]
    heap.free(3)
    assert heap.free_blocks() == [(0, 10)]
    heap.check_invariants()
    with pytest.raises(AllocatorError, match="offset 3"):
        heap.free(3)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 80),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 30), st.integers(0, 10**6)), max_size=60),
)
def test_first_fit_matches_bitmap_reference(n, ops):
    heap = FirstFitHeap(n)
    used = [False] * n
    size_by_offset: dict[int, int] = {}
    for is_alloc, k, pick in ops:
        if is_alloc or not size_by_offset:
            want = next((o for o in range(n - k + 1) if not any(used[o : o + k])), None)
            assert heap.alloc(k) == want
            if want is not None:
                used[want : want + k] = [True] * k
                size_by_offset[want] = k
        else:
            off = sorted(size_by_offset)[pick % len(size_by_offset)]
            heap.free(off)
            size = size_by_offset.pop(off)
            used[off : off + size] = [False] * size
        heap.check_invariants()
        assert heap.num_free_granules == used.count(False)
