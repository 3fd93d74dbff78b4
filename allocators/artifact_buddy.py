"""ArtifactBuddyHeap: the buddy placement of the PagedAttention artifact's Orca.

Modelling rule (GitHub ``sosp-ae-39/sosp-ae-astra``, ``orca/cacheflow/master/
block_manager.py``, ``BuddyAllocator``): the authors' Orca places each contiguous
reservation with a buddy allocator that differs from :class:`~pagesim.allocators.
buddy.BuddyHeap` (pagesim's canonical one) in three ways:

- the pool is cut into *chunks* no larger than the longest sequence
  (``max_model_len // block_size`` blocks: 2048 / 16 = 128), greedily from the left,
  then the remainder in decreasing powers of two::

      998 blocks = 7 x 128 + 64 + 32 + 4 + 2
      |128|128|128|128|128|128|128|64|32|4|2|

- blocks never merge past a chunk (the largest order is the chunk's), so a request
  larger than a chunk can never be placed;
- each order's free list is a LIFO stack: allocation pops the block freed (or split
  off) most recently, splitting pushes the upper halves, and a freed block, merged
  with its free buddies, is pushed on top. Initially the lists hold each order's
  chunks by address, so the highest-addressed chunk is taken first.

Rounding is the same as pagesim's buddy: a request of ``k`` blocks takes
``2**ceil(log2 k)`` (the artifact's ``_resize``). Chunk starts are multiples of twice
their size, so every block is aligned and ``buddy = offset XOR size`` holds; a buddy
outside the pool or inside a smaller chunk is never free at the same order.

Placement is history-dependent (LIFO), unlike ``BuddyHeap``'s lowest-address rule,
so a trial allocation must not be made to test a fit: ``num_fit_now`` counts what
the free lists can hold (each free block of order ``o >= k`` holds ``2**(o-k)``
requests of order ``k``), which is what the artifact's ``can_allocate`` finds by
allocating on a copy of its lists.
"""

from __future__ import annotations

from pagesim.allocators.buddy import ceil_log2
from pagesim.errors import AllocatorError, ConfigError, InvariantError


class ArtifactBuddyHeap:
    """LIFO buddy heap over ``num_granules`` granules cut into chunks of at most
    ``max_block_granules`` (module docstring); offsets and sizes are in granules."""

    def __init__(self, num_granules: int, max_block_granules: int = 128) -> None:
        if num_granules < 1:
            raise ConfigError(
                f"buddy heap needs at least one granule, got num_granules={num_granules}"
            )
        if max_block_granules < 1:
            raise ConfigError(
                f"artifact-buddy: the largest block must be >= 1 granule, got {max_block_granules}"
            )
        self._num_granules = num_granules
        self._max_order = max_block_granules.bit_length() - 1  # a power of two, rounded down
        self._stack_by_order: list[list[int]] = [[] for _ in range(self._max_order + 1)]
        self._free_order_by_offset: dict[int, int] = {}
        self._order_by_offset: dict[int, int] = {}
        self._num_free_granules = 0
        self._chunk_orders: list[int] = []
        offset = 0
        for order in range(self._max_order, -1, -1):
            while offset + (1 << order) <= num_granules:
                self._push(offset, order)
                self._chunk_orders.append(order)
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
        return sum(
            len(self._stack_by_order[o]) << (o - order) for o in range(order, self._max_order + 1)
        )

    def num_fit_when_empty(self, num_granules: int) -> int:
        """How many requests of ``num_granules`` an empty heap of this size holds."""
        order = ceil_log2(num_granules)
        return sum(1 << (o - order) for o in self._chunk_orders if o >= order)

    def alloc(self, num_granules: int) -> int | None:
        """Offset of a new block of ``allocated_size(num_granules)`` granules, or None."""
        if num_granules < 1:
            raise AllocatorError(f"buddy heap: cannot allocate {num_granules} granules (need >= 1)")
        order = ceil_log2(num_granules)
        if order > self._max_order:
            return None
        found = next(
            (o for o in range(order, self._max_order + 1) if self._stack_by_order[o]), None
        )
        if found is None:
            return None
        offset = self._stack_by_order[found].pop()
        del self._free_order_by_offset[offset]
        self._num_free_granules -= 1 << found
        while found > order:
            found -= 1
            self._push(offset + (1 << found), found)
        self._order_by_offset[offset] = order
        return offset

    def free(self, offset: int) -> None:
        """Release the block at ``offset``, merging with free buddies up to a chunk."""
        order = self._order_by_offset.pop(offset, None)
        if order is None:
            raise AllocatorError(
                f"buddy heap: no allocated block at offset {offset} (never allocated or already freed)"
            )
        while order < self._max_order:
            buddy = offset ^ (1 << order)
            if self._free_order_by_offset.get(buddy) != order:
                break
            self._stack_by_order[order].remove(buddy)
            del self._free_order_by_offset[buddy]
            self._num_free_granules -= 1 << order
            offset = min(offset, buddy)
            order += 1
        self._push(offset, order)

    def allocated_blocks(self) -> dict[int, int]:
        """Allocated blocks as ``offset -> size in granules`` (a copy)."""
        return {off: 1 << order for off, order in self._order_by_offset.items()}

    def free_blocks(self) -> list[tuple[int, int]]:
        """Free blocks as sorted ``(offset, size in granules)`` pairs."""
        return sorted((off, 1 << order) for off, order in self._free_order_by_offset.items())

    def check_invariants(self) -> None:
        """Blocks tile the pool, each aligned and inside a chunk; stacks match the free map;
        no two free buddies coexist below a chunk."""
        spans = [(off, 1 << order) for off, order in self._order_by_offset.items()]
        spans += self.free_blocks()
        spans.sort()
        pos = 0
        for off, size in spans:
            if off != pos or off % size or size > self.max_block_granules:
                raise InvariantError(f"artifact-buddy: block ({off}, {size}) misplaced at {pos}")
            pos += size
        if pos != self._num_granules:
            raise InvariantError(f"artifact-buddy: blocks cover {pos} of {self._num_granules}")
        stacked = {(off, order) for order, s in enumerate(self._stack_by_order) for off in s}
        if stacked != set(self._free_order_by_offset.items()) or sum(
            len(s) for s in self._stack_by_order
        ) != len(self._free_order_by_offset):
            raise InvariantError("artifact-buddy: free stacks and free map disagree")
        if sum(1 << o for o in self._free_order_by_offset.values()) != self._num_free_granules:
            raise InvariantError("artifact-buddy: free granule counter out of date")
        for off, order in self._free_order_by_offset.items():
            if order < self._max_order and self._free_order_by_offset.get(off ^ (1 << order)) == (
                order
            ):
                raise InvariantError(
                    f"artifact-buddy: free buddies ({off}, order {order}) not merged"
                )

    def _push(self, offset: int, order: int) -> None:
        self._stack_by_order[order].append(offset)
        self._free_order_by_offset[offset] = order
        self._num_free_granules += 1 << order
