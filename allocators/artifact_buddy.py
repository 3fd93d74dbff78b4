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

from pagesim.allocators.buddy import BuddyHeap
from pagesim.errors import InvariantError


class ArtifactBuddyHeap(BuddyHeap):
    """LIFO buddy heap over ``num_granules`` granules cut into chunks of at most
    ``max_block_granules`` (module docstring); offsets and sizes are in granules. The
    layout, splitting and merging are :class:`BuddyHeap`'s with its block cap; only the
    free lists differ (a LIFO stack per order)."""

    def __init__(self, num_granules: int, max_block_granules: int = 128) -> None:
        super().__init__(num_granules, max_block_granules)

    def _init_free_lists(self) -> None:
        self._stack_by_order: list[list[int]] = [[] for _ in range(self._max_order + 1)]
        self._free_order_by_offset: dict[int, int] = {}

    def _num_free_at(self, order: int) -> int:
        return len(self._stack_by_order[order])

    def _is_free(self, offset: int, order: int) -> bool:
        return self._free_order_by_offset.get(offset) == order

    def _free_orders(self) -> list[tuple[int, int]]:
        return list(self._free_order_by_offset.items())

    def _check_free_lists(self) -> None:
        stacked = {(off, order) for order, s in enumerate(self._stack_by_order) for off in s}
        if stacked != set(self._free_order_by_offset.items()) or sum(
            len(s) for s in self._stack_by_order
        ) != len(self._free_order_by_offset):
            raise InvariantError("artifact-buddy: free stacks and free map disagree")

    def _add_free(self, offset: int, order: int) -> None:
        self._stack_by_order[order].append(offset)
        self._free_order_by_offset[offset] = order
        self._num_free_granules += 1 << order

    def _remove_free(self, offset: int, order: int) -> None:
        self._stack_by_order[order].remove(offset)
        del self._free_order_by_offset[offset]
        self._num_free_granules -= 1 << order

    def _take_free(self, order: int) -> int:
        """The block pushed last (LIFO)."""
        offset = self._stack_by_order[order].pop()
        del self._free_order_by_offset[offset]
        self._num_free_granules -= 1 << order
        return offset
