"""BuddyHeap: a binary buddy allocator over a pool of granules.

Modelling rule (PagedAttention paper, §6.1): the authors' Orca baselines place each
request's contiguous KV reservation with a buddy allocator. A request for ``k``
granules is rounded up to the next power of two (the rounding is *allocator
padding*, counted as external fragmentation by the accounting), taken from the
smallest free block that holds it, splitting larger blocks in halves on the way
down, and freed blocks coalesce with their buddy whenever the buddy is free.

Pools that are not a power of two (15,728 slots / 16 = 983 granules for the paper's
OPT-13B pool) are covered by the maximal power-of-two blocks of the binary
decomposition, left to right::

    983 = 512 + 256 + 128 + 64 + 16 + 4 + 2 + 1
    |<----- 512 ----->|<- 256 ->|<128>|<64>|16|4|2|1|

Every such block is aligned to its own size, so the usual buddy arithmetic
(``buddy = offset XOR size``) holds; a buddy that lies outside the pool is never in
a free list, so nothing merges past the pool's end.

Placement is canonical: among free blocks of the chosen order the lowest address
is taken (a min-heap per order with lazy deletion). With eager coalescing, the set
of free blocks is then a function of the set of allocated blocks alone, which keeps
trial allocations (allocate then free) free of side effects. Allocation and free are
O(log capacity) (O(log^2) counting the heap operations).
"""

from __future__ import annotations

import heapq

from pagesim.errors import AllocatorError, ConfigError, InvariantError


def ceil_log2(n: int) -> int:
    """Smallest ``k`` with ``2**k >= n`` (n >= 1)."""
    return (n - 1).bit_length()


class BuddyHeap:
    """Buddy allocator over ``num_granules`` granules; offsets and sizes are in granules.

    ``max_block_granules`` caps the block size (rounded down to a power of two; default:
    the pool): the pool is laid out left to right in blocks of the largest order that
    fits under the cap, and blocks never merge above it. Which free block of an order is
    taken is the free lists' policy (:meth:`_take_free` and its companions): here the
    lowest address; a subclass may keep other lists (``artifact_buddy``)."""

    def __init__(self, num_granules: int, max_block_granules: int | None = None) -> None:
        if num_granules < 1:
            raise ConfigError(
                f"buddy heap needs at least one granule, got num_granules={num_granules}"
            )
        if max_block_granules is not None and max_block_granules < 1:
            raise ConfigError(
                f"buddy heap: the largest block must be >= 1 granule, got {max_block_granules}"
            )
        self._num_granules = num_granules
        cap = num_granules if max_block_granules is None else min(max_block_granules, num_granules)
        self._max_order = cap.bit_length() - 1  # a power of two, rounded down
        self._init_free_lists()
        self._order_by_offset: dict[int, int] = {}
        self._num_free_granules = 0
        self._top_orders: list[int] = []
        offset = 0
        for order in range(self._max_order, -1, -1):
            while offset + (1 << order) <= num_granules:
                self._add_free(offset, order)
                self._top_orders.append(order)
                offset += 1 << order

    @property
    def num_granules(self) -> int:
        return self._num_granules

    @property
    def num_free_granules(self) -> int:
        return self._num_free_granules

    @property
    def max_block_granules(self) -> int:
        return 1 << self._max_order

    def allocated_size(self, num_granules: int) -> int:
        """Granules actually taken for a request of ``num_granules`` (next power of two)."""
        return 1 << ceil_log2(num_granules)

    def num_fit_now(self, num_granules: int) -> int:
        """How many requests of ``num_granules`` could be allocated one after another now."""
        order = ceil_log2(num_granules)
        return sum(self._num_free_at(o) << (o - order) for o in range(order, self._max_order + 1))

    def num_fit_when_empty(self, num_granules: int) -> int:
        """How many requests of ``num_granules`` an empty heap of this size holds."""
        order = ceil_log2(num_granules)
        return sum(1 << (o - order) for o in self._top_orders if o >= order)

    def alloc(self, num_granules: int) -> int | None:
        """Offset of a new block of ``allocated_size(num_granules)`` granules, or None."""
        if num_granules < 1:
            raise AllocatorError(f"buddy heap: cannot allocate {num_granules} granules (need >= 1)")
        order = ceil_log2(num_granules)
        found = next((o for o in range(order, self._max_order + 1) if self._num_free_at(o)), None)
        if found is None:
            return None
        offset = self._take_free(found)
        while found > order:
            found -= 1
            self._add_free(offset + (1 << found), found)
        self._order_by_offset[offset] = order
        return offset

    def free(self, offset: int) -> None:
        """Release the block at ``offset``, coalescing with free buddies (up to the cap)."""
        order = self._order_by_offset.pop(offset, None)
        if order is None:
            raise AllocatorError(
                f"buddy heap: no allocated block at offset {offset} (never allocated or already freed)"
            )
        while order < self._max_order:
            buddy = offset ^ (1 << order)
            if not self._is_free(buddy, order):
                break
            self._remove_free(buddy, order)
            offset = min(offset, buddy)
            order += 1
        self._add_free(offset, order)

    def allocated_blocks(self) -> dict[int, int]:
        """Allocated blocks as ``offset -> size in granules`` (a copy)."""
        return {off: 1 << order for off, order in self._order_by_offset.items()}

    def free_blocks(self) -> list[tuple[int, int]]:
        """Free blocks as sorted ``(offset, size in granules)`` pairs."""
        return sorted((off, 1 << order) for off, order in self._free_orders())

    def check_invariants(self) -> None:
        """Free and allocated blocks tile the pool exactly, each aligned and under the cap;
        the free lists agree with themselves; no two free buddies coexist below the cap."""
        spans = [(off, 1 << order) for off, order in self._order_by_offset.items()]
        spans += self.free_blocks()
        spans.sort()
        pos = 0
        for off, size in spans:
            if off != pos or off % size or size > self.max_block_granules:
                raise InvariantError(f"buddy heap: block ({off}, {size}) misplaced at {pos}")
            pos += size
        if pos != self._num_granules:
            raise InvariantError(f"buddy heap: blocks cover {pos} of {self._num_granules}")
        free_total = sum(size for _, size in self.free_blocks())
        if free_total != self._num_free_granules:
            raise InvariantError("buddy heap: free granule counter out of date")
        self._check_free_lists()
        for off, order in self._free_orders():
            if order < self._max_order and self._is_free(off ^ (1 << order), order):
                raise InvariantError(f"buddy heap: free buddies ({off}, order {order}) not merged")

    # -- the free lists: lowest address first (a min-heap per order, lazy deletion) --------
    def _init_free_lists(self) -> None:
        self._free_by_order: list[set[int]] = [set() for _ in range(self._max_order + 1)]
        self._heap_by_order: list[list[int]] = [[] for _ in range(self._max_order + 1)]

    def _num_free_at(self, order: int) -> int:
        return len(self._free_by_order[order])

    def _is_free(self, offset: int, order: int) -> bool:
        return offset in self._free_by_order[order]

    def _free_orders(self) -> list[tuple[int, int]]:
        return [(off, order) for order, offs in enumerate(self._free_by_order) for off in offs]

    def _check_free_lists(self) -> None:
        for order, offs in enumerate(self._free_by_order):
            if not offs <= set(self._heap_by_order[order]):
                raise InvariantError(
                    f"buddy heap: a free block of order {order} is not in its heap"
                )

    def _add_free(self, offset: int, order: int) -> None:
        self._free_by_order[order].add(offset)
        heap = self._heap_by_order[order]
        heapq.heappush(heap, offset)
        if len(heap) > 2 * len(self._free_by_order[order]) + 16:
            heap[:] = sorted(self._free_by_order[order])
        self._num_free_granules += 1 << order

    def _remove_free(self, offset: int, order: int) -> None:
        self._free_by_order[order].remove(offset)
        self._num_free_granules -= 1 << order

    def _take_free(self, order: int) -> int:
        """Remove and return the free block of ``order`` the policy picks (one exists)."""
        heap, live = self._heap_by_order[order], self._free_by_order[order]
        while True:
            offset = heapq.heappop(heap)
            if offset in live:
                self._remove_free(offset, order)
                return offset
