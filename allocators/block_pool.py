"""BlockPool: fixed-size KV blocks with reference counts, a LIFO free list and a prefix cache.

Modelling rules (vLLM v0 ``BlockAllocator`` / ``CachedBlockAllocator``):

- ``num_blocks`` blocks, ids ``0..num_blocks-1``. Free blocks with no content key
  sit on a LIFO stack (the block freed last is reused first; initially block 0 is
  on top, then 1, 2, ...).
- Every held block has a reference count = the number of block tables holding it.
  A block returns to the pool when its count drops to zero.
- With caching on, a block may carry a content key (see ``prefix_cache``). A keyed
  block whose count drops to zero goes to the :class:`LRUEvictor` instead of the
  stack: it still counts as free, and a later request with the same key revives it.
  A fresh block comes from the stack first; only when the stack is empty is the
  least recently released keyed block evicted (its key forgotten) and reused.

Every operation is O(1) per block. The pool never decides *whether* to allocate:
callers check ``num_free_blocks`` first, and ``take`` on an empty pool is an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from pagesim.allocators.prefix_cache import LRUEvictor
from pagesim.errors import AllocatorError, InvariantError


class BlockPool:
    """Blocks with reference counts, a LIFO free stack, and (optionally) a prefix cache."""

    def __init__(self, num_blocks: int, *, is_caching: bool = False, name: str = "gpu") -> None:
        self.name = name
        self.is_caching = is_caching
        #: blocks in the pool (fixed)
        self.num_blocks = num_blocks
        #: blocks nobody holds: never-keyed free blocks plus evictable cached ones (kept
        #: as a count, read on every step; do not assign)
        self.num_free_blocks = num_blocks
        self._ref_counts = [0] * num_blocks
        self._free_ids = list(range(num_blocks - 1, -1, -1))
        self._key_by_block: list[int | None] = [None] * num_blocks
        self._depth_by_block = [0] * num_blocks
        self._key_to_block: dict[int, int] = {}
        self._evictor = LRUEvictor()

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictor)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def key_of(self, block_id: int) -> tuple[int | None, int]:
        """A block's content key (None if it has none) and its depth in hashed tokens."""
        return self._key_by_block[block_id], self._depth_by_block[block_id]

    def free_ids(self) -> list[int]:
        """The LIFO stack of never-keyed free blocks, next to be taken first."""
        return self._free_ids[::-1]

    def evictable_ids(self) -> list[int]:
        """Evictable cached blocks, next to be evicted first."""
        return self._evictor.block_ids()

    def take(self) -> int:
        """A fresh block with reference count 1 (from the stack, else by eviction)."""
        if self._free_ids:
            block_id = self._free_ids.pop()
        elif len(self._evictor):
            block_id = self._evictor.evict()
            del self._key_to_block[cast(int, self._key_by_block[block_id])]  # evictable: keyed
            self._key_by_block[block_id] = None
            self._depth_by_block[block_id] = 0
        else:
            raise AllocatorError(
                f"{self.name} block pool is out of blocks ({self.num_blocks} total)"
            )
        self._ref_counts[block_id] = 1
        self.num_free_blocks -= 1
        return block_id

    def take_many(self, n: int) -> list[int]:
        """``[take() for _ in range(n)]``, in that order, with the stack's part in one slice."""
        stack = self._free_ids
        k = len(stack)
        if n < k:
            k = n
        if k:
            ids = stack[-k:]
            del stack[-k:]
            ids.reverse()
            ref_counts = self._ref_counts
            for block_id in ids:
                ref_counts[block_id] = 1
            self.num_free_blocks -= k
        else:
            ids = []
        for _ in range(n - k):
            ids.append(self.take())
        return ids

    def take_onto(self, tables: list[list[int]], n: int) -> None:
        """``table.append(take())`` for each of the ``n`` lists ``tables``, in order (a
        bulk decode step opens a block for each of its openers)."""
        stack = self._free_ids
        if len(stack) < n:  # some come from the evictor, or the pool runs out
            for table in tables:
                table.append(self.take())
            return
        ref_counts = self._ref_counts
        for table in tables:
            block_id = stack.pop()
            ref_counts[block_id] = 1
            table.append(block_id)
        self.num_free_blocks -= n

    def lookup(self, key: int) -> int | None:
        """The block holding content ``key`` (held or evictable), if any."""
        return self._key_to_block.get(key)

    def take_keyed(self, key: int, depth: int) -> tuple[int, bool]:
        """A block for content ``key``: the cached one if any (a hit), else a fresh keyed block."""
        block_id = self._key_to_block.get(key)
        if block_id is not None:
            self.incref(block_id)
            return block_id, True
        block_id = self.take()
        if self.is_caching:
            self._key_by_block[block_id] = key
            self._depth_by_block[block_id] = depth
            self._key_to_block[key] = block_id
        return block_id, False

    def incref(self, block_id: int) -> None:
        if self._ref_counts[block_id] == 0:
            if block_id not in self._evictor:
                raise InvariantError(f"{self.name} block {block_id} is free and not cached")
            self._evictor.remove(block_id)
            self.num_free_blocks -= 1
        self._ref_counts[block_id] += 1

    def incref_all(self, block_ids: Iterable[int]) -> None:
        """``incref`` each listed block, in order (a fork shares a whole table)."""
        ref_counts = self._ref_counts
        for block_id in block_ids:
            count = ref_counts[block_id]
            if count:
                ref_counts[block_id] = count + 1
            else:
                self.incref(block_id)

    def rebase(self, tables: list[list[int]], sources: list[list[int]]) -> None:
        """Each table gives up its blocks and takes those of its source (same length):
        ``decref_all(reversed(table))`` for every table, in order, then ``incref_all``
        of every source, and each table's blocks become its source's. A leading run of
        blocks the two share is skipped: its counts would drop and rise by one, and the
        source's holder keeps them held, so the same blocks are released in the same
        order (a beam step's frees and forks, where beams share long prefixes). The tables
        and their sources must share blocks only as a leading run (as forks do)."""
        if self._key_to_block:  # keyed releases go to the evictor: the general order
            for table in tables:
                self.decref_all(reversed(table))
            for table, source in zip(tables, sources, strict=True):
                self.incref_all(source)
                table[:] = source
            return
        ref_counts = self._ref_counts
        stack = self._free_ids
        num_free = len(stack)
        starts: list[int] = []
        for i in range(len(tables)):
            table = tables[i]
            source = sources[i]
            n = len(table)
            if len(source) != n:
                raise InvariantError(f"{self.name}: rebase of a table onto one of another length")
            # tables share a prefix (a fork shares them whole; appends change only the
            # tail): the shared run ends where, from the tail, they first agree
            start = n
            while start and table[start - 1] != source[start - 1]:
                start -= 1
            starts.append(start)
            for j in range(n - 1, start - 1, -1):
                block_id = table[j]
                count = ref_counts[block_id]
                if count == 1:
                    ref_counts[block_id] = 0
                    stack.append(block_id)
                elif count > 1:
                    ref_counts[block_id] = count - 1
                else:
                    self.num_free_blocks += len(stack) - num_free
                    raise InvariantError(f"{self.name} block {block_id} freed twice")
        self.num_free_blocks += len(stack) - num_free
        for i in range(len(tables)):
            table = tables[i]
            source = sources[i]
            for j in range(starts[i], len(source)):
                block_id = source[j]
                if ref_counts[block_id]:
                    ref_counts[block_id] += 1
                else:
                    self.incref(block_id)
                table[j] = block_id

    def copy_if_shared(self, block_id: int) -> int | None:
        """Copy-on-write for one holder of ``block_id``: None when it is the only holder
        (it writes in place); else a fresh block (``take``), and ``block_id`` drops that
        holder's reference (it stays held by the others)."""
        ref_counts = self._ref_counts
        if ref_counts[block_id] < 2:
            return None
        copy_id = self.take()
        ref_counts[block_id] -= 1
        return copy_id

    def decref_all(self, block_ids: Iterable[int]) -> None:
        """Drop one reference per listed block (in order); release those that reach zero.

        Released blocks without a key go on the stack in the listed order; keyed ones
        enter the evictor deepest first (vLLM's tie rule for one release).
        """
        ref_counts = self._ref_counts
        stack = self._free_ids
        num_free = len(stack)
        try:
            if not self._key_to_block:  # no keyed block anywhere: releases go on the stack
                for block_id in block_ids:
                    count = ref_counts[block_id]
                    if count == 1:  # the common case first: held once
                        ref_counts[block_id] = 0
                        stack.append(block_id)
                    elif count > 1:
                        ref_counts[block_id] = count - 1
                    else:
                        raise InvariantError(f"{self.name} block {block_id} freed twice")
                return
            keyed: list[int] = []
            key_by_block = self._key_by_block
            for block_id in block_ids:
                count = ref_counts[block_id] - 1
                if count < 0:
                    raise InvariantError(f"{self.name} block {block_id} freed twice")
                ref_counts[block_id] = count
                if count == 0:
                    if key_by_block[block_id] is None:
                        stack.append(block_id)
                    else:
                        keyed.append(block_id)
        finally:
            self.num_free_blocks += len(stack) - num_free
        if keyed:
            keyed.sort(key=self._depth_by_block.__getitem__, reverse=True)
            for block_id in keyed:
                self._evictor.add(block_id)
            self.num_free_blocks += len(keyed)

    def release_held_once(self, block_ids: list[int]) -> None:
        """``decref_all(reversed(block_ids))`` for blocks the caller knows are each held
        once (by the one table that lists them) and carry no key, so that every one is
        released: onto the stack tail first, without reading the counts. A pool that
        caches prefixes takes ``decref_all``'s way (its blocks may carry keys)."""
        if self.is_caching:
            self.decref_all(reversed(block_ids))
            return
        ref_counts = self._ref_counts
        for block_id in block_ids:
            ref_counts[block_id] = 0
        self._free_ids += block_ids[::-1]
        self.num_free_blocks += len(block_ids)

    def check_invariants(self, expected_ref_counts: list[int]) -> None:
        """Reference counts equal the tables' holdings; free, evictable and held partition the pool."""
        if expected_ref_counts != self._ref_counts:
            bad = next(
                b
                for b, (x, y) in enumerate(zip(expected_ref_counts, self._ref_counts, strict=True))
                if x != y
            )
            raise InvariantError(
                f"{self.name} block {bad}: ref count {self._ref_counts[bad]} but held by "
                f"{expected_ref_counts[bad]} tables"
            )
        free = self._free_ids
        evictable = self._evictor.block_ids()
        free_set = set(free)
        if len(free_set) != len(free) or not free_set.isdisjoint(evictable):
            raise InvariantError(f"{self.name} pool: a block is free twice")
        if self.num_free_blocks != len(free) + len(evictable):
            raise InvariantError(
                f"{self.name} pool: {self.num_free_blocks} free blocks counted, "
                f"{len(free) + len(evictable)} free or evictable"
            )
        refs = self._ref_counts
        # free + evictable blocks are distinct, all have count zero, and are all such blocks
        if any(map(refs.__getitem__, free)) or any(map(refs.__getitem__, evictable)):
            raise InvariantError(f"{self.name} pool: a free block is still referenced")
        if refs.count(0) != len(free) + len(evictable):
            raise InvariantError(
                f"{self.name} pool: free blocks and zero reference counts disagree"
            )
        if list(map(self._key_by_block.__getitem__, free)).count(None) != len(free):
            bad = next(b for b in free if self._key_by_block[b] is not None)
            raise InvariantError(f"{self.name} block {bad} is on the free stack with a key")
        for key, b in self._key_to_block.items():
            if self._key_by_block[b] != key:
                raise InvariantError(f"{self.name} block {b}: key index out of date")
        if len(self._key_by_block) - self._key_by_block.count(None) != len(self._key_to_block):
            raise InvariantError(f"{self.name} pool: keyed blocks missing from the key index")
        if not self.is_caching and self._key_to_block:
            raise InvariantError(f"{self.name} pool: keys present with caching off")
