"""vLLM V1's block pool: a free queue in LRU order, blocks found by content key, a null block.

Modelling rules (vLLM V1, ``vllm/v1/core/``; the same in v0.15.1 and v0.19.0):

- ``block_pool.py``, ``BlockPool.__init__``: ``num_gpu_blocks`` blocks, ids
  ``0..N-1``, all in the free queue in id order; the first, block 0, is taken out at
  once as the *null block* (a placeholder for sliding-window and Mamba layers: never
  given to a request, never freed), so requests can use ``N - 1`` blocks
  (``get_usage`` divides by ``num_gpu_blocks - 1`` too).
- ``kv_cache_utils.py``, ``FreeKVCacheBlockQueue``: the free blocks in eviction order,
  least recently used at the head. New blocks come from the head (``get_new_blocks``:
  ``popleft_n``); freed blocks go to the tail, in the order the caller gives
  (``free_blocks``: ``append_n``). The manager gives a request's blocks in reverse
  (``single_type_kv_cache_manager.py``, ``free``), so its tail is evicted first. A free
  block keeps its key: it is a prefix-cache hit until it is taken from the head,
  when its key is dropped (``_maybe_evict_cached_block``). A hit on a free block takes
  it out of the middle of the queue (``touch``); vLLM keeps a hand-made doubly linked
  list for that O(1) removal, and so does this pool (:class:`V1BlockPool`).
- ``BlockHashToBlockMap``: a key may map to several blocks (two requests that computed
  the same block before either was cached: vLLM never merges them, so that block
  tables stay append-only); a look-up returns the first cached one that is left, and
  evicting a block drops that block only.
- Reference counts: a block is held by each request whose table lists it (a hit adds
  a reference: ``touch``); it goes back to the queue when its count reaches zero.

Content keys (:class:`ContentKeys`): a request's tokens are its prompt's content
segments, then its generated tokens, which are its own content (a segment of its own,
:func:`own_segment_id`; so is a prompt given without segments). Block ``i``'s key
chains block ``i - 1``'s key with the content pieces covering it, as
``prefix_cache.prompt_block_keys`` does for a prompt (a prompt's full blocks get the
same keys), so two requests share block ``i`` exactly when their tokens agree on
``[0, (i + 1) * B)``. vLLM V1 hashes the request's generated tokens too
(``kv_cache_utils.py``, ``get_request_block_hasher``, over ``request.all_token_ids``):
such a block is a hit only for the request that generated it, when it comes back
after a preemption.
"""

from __future__ import annotations

from pagesim._native import BoxedId
from pagesim.allocators.prefix_cache import ROOT_KEY
from pagesim.errors import AllocatorError, InvariantError

#: the null block's id (block 0, taken out of the free queue when the pool is made)
NULL_BLOCK = 0

#: the length of a request's own segment (its generated tokens): longer than any request
_ENDLESS = 1 << 62


def own_segment_id(group_id: int) -> int:
    """The segment id of a request's own tokens: negative (a trace's segment ids are
    not), and never -1, which Python hashes as -2."""
    return -2 - group_id


class ContentKeys:
    """The chained content keys of one request's full blocks, made as far as asked
    (module docstring). ``keys[i]`` is block ``i``'s key."""

    __slots__ = ("keys", "_stream", "_index", "_start", "_key", "_block_size")

    def __init__(
        self,
        segments: tuple[tuple[int, int], ...],
        prompt_len: int,
        own_segment_id: int,
        block_size: int,
    ) -> None:
        stream: list[tuple[int, int]] = []
        if segments:
            total = 0
            for segment in segments:
                total += segment[1]
                stream.append(segment)
            if total != prompt_len:
                raise AllocatorError(
                    f"prompt segments cover {total} tokens but prompt_len is {prompt_len}: "
                    "segments must describe the whole prompt"
                )
        stream.append((own_segment_id, _ENDLESS))
        self.keys: list[int] = []
        self._stream = stream
        self._index = 0
        self._start = 0
        self._key = ROOT_KEY
        self._block_size = block_size

    def upto(self, num_blocks: int) -> list[int]:
        """``keys``, made at least ``num_blocks`` long."""
        keys = self.keys
        if len(keys) >= num_blocks:
            return keys
        stream = self._stream
        bs = self._block_size
        index, start, key = self._index, self._start, self._key
        while len(keys) < num_blocks:
            segment_id, length = stream[index]
            if length - start >= bs:  # the block lies in one segment (the same pieces)
                key = hash((key, ((segment_id, start, start + bs),)))
                keys.append(key)
                start += bs
                continue
            pieces: list[tuple[int, int, int]] = []
            room = bs
            while room:
                segment_id, length = stream[index]
                if start >= length:
                    index += 1
                    start = 0
                    continue
                take = length - start
                if take > room:
                    take = room
                pieces.append((segment_id, start, start + take))
                start += take
                room -= take
            key = hash((key, tuple(pieces)))
            keys.append(key)
        self._index, self._start, self._key = index, start, key
        return keys


class V1BlockPool:
    """Blocks with reference counts, the free queue and the key index (module docstring).

    The free queue is a doubly linked list over block ids, in two arrays (the next and
    the previous block of each, and two sentinels past the last id), as vLLM V1's
    ``FreeKVCacheBlockQueue`` links its blocks: a hit on a free block removes it from
    the middle in O(1). A block is in the queue exactly when nobody holds it. Block ids
    are kept boxed, in the arrays and in the tables (docs/compiled_modules.md: boxed
    ids): a request's free links its blocks without making an object per block."""

    def __init__(self, num_blocks: int, *, is_caching: bool) -> None:
        if num_blocks < 2:
            raise AllocatorError(
                f"a V1 block pool needs 2 blocks or more (null block), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.is_caching = is_caching
        self._ref_counts = [0] * num_blocks
        self._ref_counts[NULL_BLOCK] = 1  # held by the pool itself, never freed
        # the queue: head and tail sentinels past the last id; blocks 1..N-1 in id order
        # (block 0, the null block, is taken out at once)
        ids: list[BoxedId] = list(range(num_blocks + 2))
        self._head = num_blocks
        self._tail = num_blocks + 1
        #: the sentinels' ids as objects (what the arrays hold)
        self._head_id: BoxedId = ids[num_blocks]
        self._tail_id: BoxedId = ids[num_blocks + 1]
        self._next: list[BoxedId] = list(ids)
        self._prev: list[BoxedId] = list(ids)
        order = [ids[num_blocks], *ids[1:num_blocks], ids[num_blocks + 1]]
        for i in range(len(order) - 1):
            self._next[order[i]] = order[i + 1]
            self._prev[order[i + 1]] = order[i]
        self.num_free_blocks = num_blocks - 1
        self._key_by_block: list[int | None] = [None] * num_blocks
        #: the first cached block left with each key, and the later ones in order
        self._block_by_key: dict[int, BoxedId] = {}
        self._more_blocks_by_key: dict[int, list[BoxedId]] = {}
        #: keys given or dropped so far (a look-up's hits hold while it is unchanged)
        self.key_version = 0

    # -- read-only views ----------------------------------------------------------------
    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks that still hold a key (a prefix-cache hit until evicted)."""
        key_by_block = self._key_by_block
        return sum(1 for block_id in self.free_ids() if key_by_block[block_id] is not None)

    def free_ids(self) -> list[int]:
        """The free queue, next to be taken first."""
        ids: list[int] = []
        block_id: int = self._next[self._head]
        while block_id != self._tail:
            ids.append(block_id)
            block_id = self._next[block_id]
        return ids

    def ref_count(self, block_id: int) -> int:
        """How many tables hold ``block_id`` (0: it is free; the null block: 1, its own)."""
        return self._ref_counts[block_id]

    def key_of(self, block_id: int) -> int | None:
        return self._key_by_block[block_id]

    def lookup(self, key: int) -> BoxedId | None:
        """The first cached block left with content ``key`` (held or free), if any."""
        return self._block_by_key.get(key)

    def is_free(self, block_id: int) -> bool:
        """Whether ``block_id`` is in the free queue (a hit on it uses a free block)."""
        return self._ref_counts[block_id] == 0

    # -- the verbs ----------------------------------------------------------------------
    def take(self) -> BoxedId:
        """The block at the head of the free queue, its key dropped, held once."""
        nxt = self._next
        head = self._head
        block_id: BoxedId = nxt[head]
        b: int = block_id
        if b == self._tail:
            raise AllocatorError(f"V1 block pool is out of blocks ({self.num_blocks - 1} usable)")
        after: BoxedId = nxt[b]
        a: int = after
        nxt[head] = after
        self._prev[a] = self._head_id
        self.num_free_blocks -= 1
        if self._key_by_block[b] is not None:
            self._evict(block_id)
        self._ref_counts[b] = 1
        return block_id

    def take_into(self, table: list[BoxedId], n: int) -> None:
        """``table.append(take())`` ``n`` times (``get_new_blocks``)."""
        if n > self.num_free_blocks:
            raise AllocatorError(f"cannot get {n} free blocks from {self.num_free_blocks}")
        for _ in range(n):
            table.append(self.take())

    def touch(self, block_ids: list[BoxedId]) -> None:
        """One more reference to each block; a free one leaves the queue (a hit)."""
        ref_counts = self._ref_counts
        nxt, prev = self._next, self._prev
        for i in range(len(block_ids)):
            b: int = block_ids[i]
            count = ref_counts[b]
            if count == 0:
                before: BoxedId = prev[b]
                after: BoxedId = nxt[b]
                bi: int = before
                ai: int = after
                nxt[bi] = after
                prev[ai] = before
                self.num_free_blocks -= 1
            ref_counts[b] = count + 1

    def free_table(self, table: list[BoxedId]) -> None:
        """A table's blocks, its last first: one reference less to each; those no longer
        held go to the tail of the queue in that order (its tail is evicted first)."""
        ref_counts = self._ref_counts
        nxt, prev = self._next, self._prev
        tail = self._tail
        last_id: BoxedId = prev[tail]
        last: int = last_id
        num_freed = 0
        for i in range(len(table) - 1, -1, -1):
            block_id: BoxedId = table[i]
            b: int = block_id
            count = ref_counts[b] - 1
            if count <= 0:
                if count < 0 or b == NULL_BLOCK:
                    raise InvariantError(f"V1 block {b} freed twice")
                nxt[last] = block_id
                prev[b] = last_id
                last_id = block_id
                last = b
                num_freed += 1
            ref_counts[b] = count
        nxt[last] = self._tail_id
        prev[tail] = last_id
        self.num_free_blocks += num_freed

    def cache(self, block_id: BoxedId, key: int) -> None:
        """``block_id`` (held, full) gets content ``key`` (``cache_full_blocks``)."""
        self.key_version += 1
        self._key_by_block[block_id] = key
        if key not in self._block_by_key:
            self._block_by_key[key] = block_id
        else:
            more = self._more_blocks_by_key.get(key)
            if more is None:
                self._more_blocks_by_key[key] = [block_id]
            else:
                more.append(block_id)

    def _evict(self, block_id: BoxedId) -> None:
        key = self._key_by_block[block_id]
        assert key is not None
        self.key_version += 1
        self._key_by_block[block_id] = None
        more = self._more_blocks_by_key.get(key)
        if self._block_by_key[key] == block_id:
            if more is None:
                del self._block_by_key[key]
                return
            self._block_by_key[key] = more.pop(0)
        elif more is not None:
            more.remove(block_id)
        if more is not None and not more:
            del self._more_blocks_by_key[key]

    def check_invariants(self, expected_ref_counts: list[int]) -> None:
        """Counts equal the tables' holdings (the null block: its own); the queue holds
        exactly the blocks nobody holds, linked both ways; the key index and the blocks'
        keys agree."""
        expected = list(expected_ref_counts)
        expected[NULL_BLOCK] += 1
        if expected != self._ref_counts:
            bad = next(
                b for b, (x, y) in enumerate(zip(expected, self._ref_counts, strict=True)) if x != y
            )
            raise InvariantError(
                f"V1 block {bad}: ref count {self._ref_counts[bad]} but held by "
                f"{expected[bad]} tables"
            )
        free = self.free_ids()
        back: list[int] = []
        block_id: int = self._prev[self._tail]
        while block_id != self._head:
            back.append(block_id)
            block_id = self._prev[block_id]
        unheld = {b for b in range(self.num_blocks) if self._ref_counts[b] == 0}
        if set(free) != unheld or len(free) != len(unheld) or back[::-1] != free:
            raise InvariantError(f"V1 pool: free queue {free} != unheld blocks {sorted(unheld)}")
        if self.num_free_blocks != len(free):
            raise InvariantError(f"V1 pool: {self.num_free_blocks} free counted, {len(free)} free")
        num_keyed = 0
        for key, first in self._block_by_key.items():
            ids = [first, *self._more_blocks_by_key.get(key, [])]
            if len(set(ids)) != len(ids):
                raise InvariantError(f"V1 pool: key index entry {key} is {ids}")
            for block_id in ids:
                num_keyed += 1
                if self._key_by_block[block_id] != key:
                    raise InvariantError(f"V1 block {block_id}: key index out of date")
        if not set(self._more_blocks_by_key) <= set(self._block_by_key) or not all(
            self._more_blocks_by_key.values()
        ):
            raise InvariantError("V1 pool: duplicate keys without a first block")
        if len(self._key_by_block) - self._key_by_block.count(None) != num_keyed:
            raise InvariantError("V1 pool: keyed blocks missing from the key index")
        if not self.is_caching and num_keyed:
            raise InvariantError("V1 pool: keys present with caching off")
