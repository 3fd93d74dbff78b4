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
  list for that O(1) removal, and so does this pool in the form of an ordered dict
  (removal anywhere, append at the tail, pop at the head, each O(1)).
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

from collections import OrderedDict

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
        index, start, key = self._index, self._start, self._key
        while len(keys) < num_blocks:
            pieces: list[tuple[int, int, int]] = []
            room = self._block_size
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
    """Blocks with reference counts, the free queue and the key index (module docstring)."""

    def __init__(self, num_blocks: int, *, is_caching: bool) -> None:
        if num_blocks < 2:
            raise AllocatorError(
                f"a V1 block pool needs 2 blocks or more (null block), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.is_caching = is_caching
        self._ref_counts = [0] * num_blocks
        #: free blocks, head (next taken) first; block 0 is the null block, never free
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self._key_by_block: list[int | None] = [None] * num_blocks
        self._block_ids_by_key: dict[int, list[int]] = {}

    # -- read-only views ----------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (those that keep a key included): what vLLM V1
        checks allocations against (``get_num_free_blocks``)."""
        return len(self._free)

    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks that still hold a key (a prefix-cache hit until evicted)."""
        key_by_block = self._key_by_block
        return sum(1 for block_id in self._free if key_by_block[block_id] is not None)

    def free_ids(self) -> list[int]:
        """The free queue, next to be taken first."""
        return list(self._free)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def key_of(self, block_id: int) -> int | None:
        return self._key_by_block[block_id]

    def lookup(self, key: int) -> int | None:
        """The first cached block left with content ``key`` (held or free), if any."""
        ids = self._block_ids_by_key.get(key)
        return ids[0] if ids else None

    def is_free(self, block_id: int) -> bool:
        """Whether ``block_id`` is in the free queue (a hit on it uses a free block)."""
        return self._ref_counts[block_id] == 0 and block_id != NULL_BLOCK

    # -- the verbs ----------------------------------------------------------------------
    def take(self) -> int:
        """A block from the head of the free queue, its key dropped, held once."""
        if not self._free:
            raise AllocatorError(f"V1 block pool is out of blocks ({self.num_blocks - 1} usable)")
        block_id, _ = self._free.popitem(last=False)
        if self._key_by_block[block_id] is not None:
            self._evict(block_id)
        self._ref_counts[block_id] = 1
        return block_id

    def take_into(self, table: list[int], n: int) -> None:
        """``table.append(take())`` ``n`` times (``get_new_blocks``)."""
        if n > len(self._free):
            raise AllocatorError(f"cannot get {n} free blocks from {len(self._free)}")
        for _ in range(n):
            table.append(self.take())

    def touch(self, block_ids: list[int]) -> None:
        """One more reference to each block; a free one leaves the queue (a hit)."""
        ref_counts = self._ref_counts
        for block_id in block_ids:
            if ref_counts[block_id] == 0:
                del self._free[block_id]
            ref_counts[block_id] += 1

    def free_blocks(self, ordered_block_ids: list[int]) -> None:
        """One reference less to each block, in order; those no longer held go to the tail
        of the queue in that order (the first listed is evicted first)."""
        ref_counts = self._ref_counts
        free = self._free
        for block_id in ordered_block_ids:
            count = ref_counts[block_id] - 1
            if count < 0:
                raise InvariantError(f"V1 block {block_id} freed twice")
            ref_counts[block_id] = count
            if count == 0:
                free[block_id] = None

    def cache(self, block_id: int, key: int) -> None:
        """``block_id`` (held, full) gets content ``key`` (``cache_full_blocks``)."""
        self._key_by_block[block_id] = key
        ids = self._block_ids_by_key.get(key)
        if ids is None:
            self._block_ids_by_key[key] = [block_id]
        else:
            ids.append(block_id)

    def _evict(self, block_id: int) -> None:
        key = self._key_by_block[block_id]
        assert key is not None
        ids = self._block_ids_by_key[key]
        ids.remove(block_id)
        if not ids:
            del self._block_ids_by_key[key]
        self._key_by_block[block_id] = None

    def check_invariants(self, expected_ref_counts: list[int]) -> None:
        """Counts equal the tables' holdings; the queue holds exactly the blocks nobody
        holds (the null block never); the key index and the blocks' keys agree."""
        if expected_ref_counts != self._ref_counts:
            bad = next(
                b
                for b, (x, y) in enumerate(zip(expected_ref_counts, self._ref_counts, strict=True))
                if x != y
            )
            raise InvariantError(
                f"V1 block {bad}: ref count {self._ref_counts[bad]} but held by "
                f"{expected_ref_counts[bad]} tables"
            )
        if self._ref_counts[NULL_BLOCK] or NULL_BLOCK in self._free:
            raise InvariantError("V1 pool: the null block is held or free")
        unheld = {b for b in range(1, self.num_blocks) if self._ref_counts[b] == 0}
        if set(self._free) != unheld:
            raise InvariantError(f"V1 pool: free queue {list(self._free)} != unheld blocks")
        num_keyed = 0
        for key, ids in self._block_ids_by_key.items():
            if not ids or len(set(ids)) != len(ids):
                raise InvariantError(f"V1 pool: key index entry {key} is {ids}")
            for block_id in ids:
                num_keyed += 1
                if self._key_by_block[block_id] != key:
                    raise InvariantError(f"V1 block {block_id}: key index out of date")
        if len(self._key_by_block) - self._key_by_block.count(None) != num_keyed:
            raise InvariantError("V1 pool: keyed blocks missing from the key index")
        if not self.is_caching and num_keyed:
            raise InvariantError("V1 pool: keys present with caching off")
