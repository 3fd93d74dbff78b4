"""Prefix caching: content hashes of full prompt blocks, and the LRU evictor of cached free blocks.

Modelling rules (vLLM v0.4 ``BlockSpaceManagerV1`` with ``enable_prefix_caching``,
and the vLLM V1 ``BlockPool``):

- Only FULL blocks of the prompt are cached. Block ``i`` covers prompt tokens
  ``[i*B, (i+1)*B)``; its key chains the previous block's key with the content
  pieces covering the block::

      segments  (7, 20) (9, 30)          B = 16
      tokens    |7:0..16|7:16..20 9:0..12|9:12..28|9:28..30  <- partial: not cached
      key_0 = hash((ROOT, ((7, 0, 16),)))
      key_1 = hash((key_0, ((7, 16, 20), (9, 0, 12))))
      key_2 = hash((key_1, ((9, 12, 28),)))

  so two prompts share block ``i`` exactly when their content agrees on tokens
  ``[0, (i+1)*B)``. Keys are Python hashes of tuples of ints, which are the same in
  every process (only str/bytes hashing is salted), so runs are reproducible.
  A 64-bit collision would share a wrong block; with a million distinct blocks
  in a run the chance is about 3e-8.
- A cached block whose reference count drops to zero stays in the pool, evictable
  (it counts as free), until a fresh block is needed and no never-hashed free block
  is left. Eviction is least-recently-used; among blocks released at the same
  time, the block deepest in its prefix (most hashed tokens) goes first (vLLM's
  evictor), so a prefix is evicted from its tail.
- Time is logical: the allocator releases the blocks of one call together, and
  the :class:`LRUEvictor` keeps insertion order, so "least recently used" is
  "released earliest". Within one release the caller inserts deepest-first.
"""

from __future__ import annotations

from collections import OrderedDict

from pagesim.errors import AllocatorError

#: key of the (empty) prefix before block 0
ROOT_KEY = 0x9E3779B9


def prompt_block_keys(
    segments: tuple[tuple[int, int], ...], prompt_len: int, block_size: int
) -> list[int]:
    """Chained content keys of the full blocks of a prompt (empty when it has no content ids)."""
    if not segments:
        return []
    total = sum(length for _, length in segments)
    if total != prompt_len:
        raise AllocatorError(
            f"prompt segments cover {total} tokens but prompt_len is {prompt_len}: "
            "segments must describe the whole prompt"
        )
    keys: list[int] = []
    key = ROOT_KEY
    pieces: list[tuple[int, int, int]] = []
    room = block_size
    for seg_id, length in segments:
        start = 0
        while start < length:
            take = min(room, length - start)
            pieces.append((seg_id, start, start + take))
            start += take
            room -= take
            if room == 0:
                key = hash((key, tuple(pieces)))
                keys.append(key)
                pieces.clear()
                room = block_size
    return keys


class LRUEvictor:
    """Free cached blocks in eviction order (oldest release first); O(1) add, remove, evict.

    An ordered dict of block ids inside (so ``len`` and ``in`` cost what a dict's do:
    the pool counts free blocks on every step; and ``popitem(last=False)`` takes the
    oldest in O(1)). It holds the dict rather than being one (docs/compiled_modules.md)."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._blocks

    def add(self, block_id: int) -> None:
        """Make a block evictable; it is evicted after every block already here."""
        self._blocks[block_id] = None

    def remove(self, block_id: int) -> None:
        """Take a block back out (a cache hit revived it)."""
        del self._blocks[block_id]

    def evict(self) -> int:
        """The least recently released block, removed from the evictor."""
        block_id, _ = self._blocks.popitem(last=False)
        return block_id

    def block_ids(self) -> list[int]:
        """Evictable blocks in eviction order."""
        return list(self._blocks)
