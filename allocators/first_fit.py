"""FirstFitHeap: first-fit placement of contiguous regions, for comparison with the buddy heap.

Modelling rule: a request for ``k`` granules takes exactly ``k`` granules (no rounding)
at the lowest address where ``k`` consecutive granules are free; freed regions
coalesce with free neighbours. This is the textbook first-fit heap; it wastes less
to rounding than a buddy heap but fragments the free space into odd-sized holes.

Holes are kept sorted by offset; allocation scans them (O(number of holes)), free
finds its neighbours by bisection (O(log holes) plus the list insertion).
"""

from __future__ import annotations

import bisect

from pagesim.errors import AllocatorError, ConfigError, InvariantError


class FirstFitHeap:
    """First-fit allocator over ``num_granules`` granules; offsets and sizes are in granules."""

    def __init__(self, num_granules: int) -> None:
        if num_granules < 1:
            raise ConfigError(
                f"first-fit heap needs at least one granule, got num_granules={num_granules}"
            )
        self._num_granules = num_granules
        self._hole_starts: list[int] = [0]
        self._hole_size_by_start: dict[int, int] = {0: num_granules}
        self._size_by_offset: dict[int, int] = {}
        self._num_free_granules = num_granules

    @property
    def num_granules(self) -> int:
        return self._num_granules

    @property
    def num_free_granules(self) -> int:
        return self._num_free_granules

    def allocated_size(self, num_granules: int) -> int:
        """Granules actually taken for a request of ``num_granules`` (exactly that many)."""
        return num_granules

    def num_fit_now(self, num_granules: int) -> int:
        """How many requests of ``num_granules`` could be allocated one after another now."""
        return sum(size // num_granules for size in self._hole_size_by_start.values())

    def num_fit_when_empty(self, num_granules: int) -> int:
        """How many requests of ``num_granules`` an empty heap of this size holds."""
        return self._num_granules // num_granules

    def alloc(self, num_granules: int) -> int | None:
        """Offset of a new region of ``num_granules`` granules at the first hole that fits, or None."""
        if num_granules < 1:
            raise AllocatorError(
                f"first-fit heap: cannot allocate {num_granules} granules (need >= 1)"
            )
        for i, start in enumerate(self._hole_starts):
            size = self._hole_size_by_start[start]
            if size >= num_granules:
                del self._hole_size_by_start[start]
                if size == num_granules:
                    del self._hole_starts[i]
                else:
                    self._hole_starts[i] = start + num_granules
                    self._hole_size_by_start[start + num_granules] = size - num_granules
                self._size_by_offset[start] = num_granules
                self._num_free_granules -= num_granules
                return start
        return None

    def free(self, offset: int) -> None:
        """Release the region at ``offset``, merging it with free neighbours."""
        size = self._size_by_offset.pop(offset, None)
        if size is None:
            raise AllocatorError(
                f"first-fit heap: no allocated region at offset {offset} (never allocated or already freed)"
            )
        self._num_free_granules += size
        i = bisect.bisect_left(self._hole_starts, offset)
        start, end = offset, offset + size
        if i < len(self._hole_starts) and self._hole_starts[i] == end:
            end += self._hole_size_by_start.pop(end)
            del self._hole_starts[i]
        if i > 0:
            prev = self._hole_starts[i - 1]
            if prev + self._hole_size_by_start[prev] == start:
                self._hole_size_by_start[prev] = end - prev
                return
        self._hole_starts.insert(i, start)
        self._hole_size_by_start[start] = end - start

    def allocated_blocks(self) -> dict[int, int]:
        """Allocated regions as ``offset -> size in granules`` (a copy)."""
        return dict(self._size_by_offset)

    def free_blocks(self) -> list[tuple[int, int]]:
        """Holes as sorted ``(offset, size in granules)`` pairs."""
        return [(s, self._hole_size_by_start[s]) for s in self._hole_starts]

    def check_invariants(self) -> None:
        """Holes and regions tile the pool; holes are sorted and never adjacent."""
        if self._hole_starts != sorted(self._hole_size_by_start):
            raise InvariantError("first-fit heap: hole index out of order")
        spans = sorted(list(self._size_by_offset.items()) + self.free_blocks())
        pos = 0
        for off, size in spans:
            if off != pos or size < 1:
                raise InvariantError(f"first-fit heap: region ({off}, {size}) misplaced at {pos}")
            pos += size
        if pos != self._num_granules:
            raise InvariantError(f"first-fit heap: regions cover {pos} of {self._num_granules}")
        holes = self.free_blocks()
        for (a, sa), (b, _) in zip(holes, holes[1:], strict=False):
            if a + sa == b:
                raise InvariantError(f"first-fit heap: adjacent holes at {a} and {b} not merged")
        if sum(s for _, s in holes) != self._num_free_granules:
            raise InvariantError("first-fit heap: free granule counter out of date")
