"""PagedV1Allocator: vLLM V1's KV cache manager (``paged-v1``), for the ``vllm-v1`` scheduler.

Modelling rules, each with its file in ``vllm/v1/core/`` (v0.19.0; v0.15.1 the same
unless said):

- The pool (``block_pool.py``; :mod:`pagesim.allocators.v1_pool`): ``num_gpu_blocks =
  capacity_slots // B`` blocks, the first the null block, so ``N - 1`` usable; a free
  queue in LRU order (taken from the head, freed to the tail), in which a freed block
  keeps its content key and stays a hit until it is taken (evicted); reference counts
  shared by the requests that hit a block. No watermark: an allocation fails only
  when it needs more blocks than the queue holds (``kv_cache_manager.py``,
  ``allocate_slots``: ``num_blocks_to_allocate > get_num_free_blocks()``).
- Hits at admission (``kv_cache_manager.py``, ``get_computed_blocks``;
  ``single_type_kv_cache_manager.py``, ``find_longest_cache_hit``): the leading full
  blocks of the request's tokens whose keys are cached, at most ``num_tokens - 1``
  tokens' worth (the last token is always computed, for its logits), so whole blocks
  only: a fully cached prompt of ``k x B`` tokens recomputes its last block.
  :meth:`find_cached` returns the hit tokens.
- Blocks an admission needs (``get_num_blocks_to_allocate``): ``ceil(tokens / B)`` less
  the hits, plus the hits that sit in the free queue (touching one takes it out).
  :meth:`can_fit` asks it for the request's whole length (v0.19's
  ``can_fit_full_sequence``, the scheduler's ``scheduler_reserve_full_isl`` gate; not
  in v0.15.1); :meth:`admit` for the hits plus the first chunk (``allocate_slots`` of
  a new request): it touches the hits and takes the rest from the head of the queue.
- Growth (``allocate_slots`` of a running request): ``ceil((computed + new) / B)`` blocks
  in all, so blocks are taken as tokens are scheduled, chunk by chunk or token by
  token (:meth:`allocate_slots`; the bulk form, every request one token, is
  :meth:`V1Tables.append_slot_all`).
- Caching (``cache_blocks``, ``block_pool.py`` ``cache_full_blocks``): when an
  allocation makes blocks full, they get their content keys (chained from the
  parent's; ``v1_pool.ContentKeys``) and become hits for later requests (and for
  requests admitted later in the same step). A block that a decode fills holds a
  generated token, so only its own request could hit it, and only once it is freed
  and back after a preemption: such blocks are keyed at the request's next
  allocation or when it is preempted (``free``), which hands out the same hits, and
  never when it finishes (``free_finished``).
- Free (``single_type_kv_cache_manager.py``, ``free``): a request's blocks go back in
  reverse order, so its tail is evicted first; a block another request still holds
  stays held.
- One sequence per request: vLLM V1 has no forks and no swap (parallel samples are
  separate requests), so ``fork`` and the swap verbs are errors here.

The allocator interface's verbs map onto these: ``can_allocate`` is NEVER when the
request's tokens need more blocks than the pool can use (vLLM refuses to start when
``max_model_len`` does not fit its KV cache: ``kv_cache_utils.py``,
``check_enough_kv_cache_memory``), else OK when its whole length fits
(:meth:`can_fit`), else LATER; ``allocate`` admits the whole length; ``append_slot``
is a one-token ``allocate_slots``.

Prefix-cache counters count each admission's look-up once (vLLM counts every look-up,
those of a request that then waits included): tokens queried = the request's tokens,
hit = the hit tokens.

Accounting: see ``v1_tables.py`` (cached free blocks count as free, as vLLM V1 counts
them; the null block is the allocator's own, external fragmentation).
"""

from __future__ import annotations

from pagesim._native import BoxedId
from pagesim.allocators.base import (
    NOTHING_CACHED,
    Allocation,
    AllocRequest,
    PrefixCacheCounters,
)
from pagesim.allocators.status import AllocStatus
from pagesim.allocators.v1_pool import NULL_BLOCK, ContentKeys, own_segment_id
from pagesim.allocators.v1_tables import V1Tables
from pagesim.allocators.validation import check_request
from pagesim.errors import AllocatorError, ConfigError, InvariantError


class _SeqContent:
    """What the rules keep of a sequence: its content keys, how many leading blocks of its
    table have their keys, and its prompt's length."""

    __slots__ = ("keys", "num_keyed", "prompt_len")

    def __init__(self, keys: ContentKeys, num_keyed: int, prompt_len: int) -> None:
        self.keys = keys
        self.num_keyed = num_keyed
        self.prompt_len = prompt_len


class PagedV1Allocator(V1Tables):
    """vLLM V1's KV cache manager (see the module docstring for every rule and its source)."""

    kind = "paged-v1"
    is_paged = True
    kv_interface = "kv-cache-manager"

    def __init__(
        self, *, capacity_slots: int, block_size: int = 16, is_prefix_caching: bool = True
    ) -> None:
        if block_size <= 0:
            raise ConfigError(f"allocator.block_size must be >= 1, got {block_size}")
        if capacity_slots // block_size < 2:
            raise ConfigError(
                f"KV pool of {capacity_slots} slots is smaller than two blocks (vLLM V1 "
                f"keeps one as its null block; allocator.block_size={block_size})"
            )
        super().__init__(
            capacity_slots=capacity_slots,
            block_size=block_size,
            is_prefix_caching=is_prefix_caching,
        )
        self._content_by_seq: dict[int, _SeqContent] = {}
        #: the prefix cache's counters (``prefix_cache``)
        self._hit_blocks = self._queried_blocks = self._hit_tokens = self._queried_tokens = 0
        #: the last look-up (:meth:`find_cached`): group id, tokens, the pool's
        #: ``key_version`` then, keys, hits
        self._probe: tuple[int, int, int, ContentKeys, list[BoxedId]] | None = None

    @classmethod
    def from_spec(
        cls,
        spec,
        *,
        capacity_slots: int,
        cpu_capacity_slots: int,
        max_model_len: int,
        shared_prefix: tuple[int, int] | None = None,
    ) -> PagedV1Allocator:
        """From an ``AllocatorSpec``: block_size and prefix_caching (True or False; on
        unless set, as in vLLM V1). There is no CPU pool and nothing is pinned."""
        if spec.prefix_caching == "pinned":
            raise ConfigError(
                "allocator.prefix_caching: pinned is the paper prototype's rule (allocator "
                "'paged'); paged-v1 allows: false, true"
            )
        return cls(
            capacity_slots=capacity_slots,
            block_size=spec.block_size,
            is_prefix_caching=spec.prefix_caching is True,
        )

    # -- read-only views ----------------------------------------------------------------
    @property
    def is_prefix_caching(self) -> bool:
        return self.pool.is_caching

    @property
    def prefix_cache(self) -> PrefixCacheCounters:
        return PrefixCacheCounters(
            self._hit_blocks, self._queried_blocks, self._hit_tokens, self._queried_tokens
        )

    def free_queue(self) -> list[int]:
        """The free queue, next to be taken (evicted) first."""
        return self.pool.free_ids()

    # -- admission ----------------------------------------------------------------------
    def find_cached(self, req: AllocRequest) -> int:
        """Tokens of ``req`` the prefix cache holds (``get_computed_blocks``): whole
        leading blocks, at most ``num_tokens - 1`` tokens. :meth:`can_fit` and
        :meth:`admit` reuse the look-up while no block has gained or lost a key."""
        return len(self._look_up(req)[4]) * self._block_size

    def cached_prefix_tokens(self, req: AllocRequest) -> int:
        """:meth:`find_cached` without keeping the look-up (``KVAllocator``: a router asks
        for requests this allocator has not seen)."""
        pool = self.pool
        if not pool.is_caching:
            return 0
        check_request(req)
        bs = self._block_size
        keys = ContentKeys(req.segments, req.prompt_len, own_segment_id(req.group_id), bs)
        num_hits = 0
        for i in range((req.num_tokens - 1) // bs):
            if pool.lookup(keys.upto(i + 1)[i]) is None:
                break
            num_hits += 1
        return num_hits * bs

    def _look_up(self, req: AllocRequest) -> tuple[int, int, int, ContentKeys, list[BoxedId]]:
        probe = self._probe
        group_id = req.group_id
        if probe is not None and probe[0] == group_id:
            if probe[1] == req.num_tokens and probe[2] == self.pool.key_version:
                return probe
            keys = probe[3]
        else:
            check_request(req)
            keys = ContentKeys(
                req.segments, req.prompt_len, own_segment_id(group_id), self._block_size
            )
        hits: list[BoxedId] = []
        pool = self.pool
        if pool.is_caching:
            for i in range((req.num_tokens - 1) // self._block_size):
                block_id: BoxedId = pool.lookup(keys.upto(i + 1)[i])
                if block_id is None:
                    break
                hits.append(block_id)
        probe = (group_id, req.num_tokens, self.pool.key_version, keys, hits)
        self._probe = probe
        return probe

    def _blocks_to_allocate(self, num_tokens: int, hits: list[BoxedId]) -> int:
        """``get_num_blocks_to_allocate`` for a new request: the blocks for ``num_tokens``
        past its hits, plus the hits that are free (touching them uses a free block)."""
        pool = self.pool
        need = -(-num_tokens // self._block_size) - len(hits)
        for block_id in hits:
            if pool.is_free(block_id):
                need += 1
        return need

    def can_fit(self, req: AllocRequest, num_tokens: int) -> bool:
        """Whether ``num_tokens`` of waiting ``req`` (its hits counted) fit the free blocks
        now (v0.19 ``can_fit_full_sequence``)."""
        hits = self._look_up(req)[4]
        return self._blocks_to_allocate(num_tokens, hits) <= self.pool.num_free_blocks

    def admit(self, req: AllocRequest, num_new_tokens: int) -> Allocation | None:
        """``allocate_slots`` of a new request: its hits (:meth:`find_cached`) plus
        ``num_new_tokens`` to compute now; None (nothing changed) when the free blocks
        are too few. ``req.seq_id`` holds them."""
        seq_id: BoxedId = req.seq_id
        group_id: BoxedId = req.group_id
        if seq_id in self._group_by_seq:
            raise AllocatorError(f"admit: sequence {seq_id} is already allocated")
        if group_id in self._seq_by_group:
            raise AllocatorError(f"admit: group {group_id} is already admitted")
        probe = self._look_up(req)
        keys, hits = probe[3], probe[4]
        bs = self._block_size
        num_hit_tokens = len(hits) * bs
        held = num_hit_tokens + num_new_tokens
        if num_new_tokens < 1 or held > req.num_tokens:
            raise AllocatorError(
                f"admit: {num_new_tokens} new tokens after {num_hit_tokens} cached, for a "
                f"request of {req.num_tokens}"
            )
        pool = self.pool
        if self._blocks_to_allocate(held, hits) > pool.num_free_blocks:
            return None
        pool.touch(hits)
        table = list(hits)
        pool.take_into(table, -(-held // bs) - len(hits))
        self._table_by_seq[seq_id] = table
        self._num_table_blocks += len(table)
        self._target_by_seq[seq_id] = max(req.target_len, req.num_tokens)
        self._group_by_seq[seq_id] = group_id
        self._seq_by_group[group_id] = seq_id
        self._freed_seq_ids.discard(seq_id)
        self._content_by_seq[seq_id] = _SeqContent(keys, len(hits), req.prompt_len)
        self._join(seq_id, held)
        self._key_full_blocks(seq_id, held)
        self._probe = None
        self._hit_blocks += len(hits)
        self._queried_blocks += req.num_tokens // bs
        self._hit_tokens += num_hit_tokens
        self._queried_tokens += req.num_tokens
        return Allocation(num_hit_tokens) if num_hit_tokens else NOTHING_CACHED

    # -- growth and free ----------------------------------------------------------------
    def allocate_slots(self, seq_id: int, num_new_tokens: int) -> bool:
        """``allocate_slots`` of a running request: slots for ``num_new_tokens`` more; False
        (nothing changed) when the free blocks are too few."""
        return self._allocate_slots(seq_id, num_new_tokens)

    def _allocate_slots(self, seq_id: BoxedId, num_new_tokens: int) -> bool:
        self._known(seq_id, "allocate_slots")
        table = self._table_by_seq[seq_id]
        held = self._off_by_seq[seq_id] + self._clock + num_new_tokens
        need = -(-held // self._block_size) - len(table)
        if need > 0:
            if need > self.pool.num_free_blocks:
                return False
            self.pool.take_into(table, need)
            self._num_table_blocks += need
        self._regrow(seq_id, held)
        self._key_full_blocks(seq_id, held)
        return True

    def _key_full_blocks(self, seq_id: BoxedId, held: int) -> None:
        """Content keys for the blocks of ``seq_id`` that ``held`` slots fill
        (``cache_blocks``)."""
        if not self.pool.is_caching:
            return
        num_full = held // self._block_size
        content = self._content_by_seq[seq_id]
        num_keyed = content.num_keyed
        if num_keyed >= num_full:
            return
        keys = content.keys.upto(num_full)
        table = self._table_by_seq[seq_id]
        pool = self.pool
        for i in range(num_keyed, num_full):
            pool.cache(table[i], keys[i])
        content.num_keyed = num_full

    def free(self, seq_id: int) -> None:
        """Release a request's blocks, its tail first (module docstring); blocks that
        decodes filled get their keys now (the request may come back: a preemption)."""
        self._free(seq_id, True)

    def free_finished(self, seq_id: int) -> None:
        """:meth:`free` for a request that ended: the blocks that decodes filled get no
        key, since they hold its generated tokens and no request could ever hit them
        (only the count of cached free blocks would differ)."""
        self._free(seq_id, False)

    def _free(self, seq_id: BoxedId, is_keyed: bool) -> None:
        group_id = self._known(seq_id, "free")
        held = self._leave(seq_id)
        if is_keyed:
            self._key_full_blocks(seq_id, held)
        table = self._table_by_seq.pop(seq_id)
        self.pool.free_table(table)
        self._num_table_blocks -= len(table)
        del self._target_by_seq[seq_id]
        del self._group_by_seq[seq_id]
        del self._seq_by_group[group_id]
        del self._content_by_seq[seq_id]
        self._freed_seq_ids.add(seq_id)

    # -- the allocator interface --------------------------------------------------------
    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        check_request(req)
        if -(-req.num_tokens // self._block_size) > self.num_usable_blocks:
            return AllocStatus.NEVER
        return AllocStatus.OK if self.can_fit(req, req.num_tokens) else AllocStatus.LATER

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        """Admit ``req`` with all its tokens (its hits, and the rest computed now)."""
        return self.admit(req, req.num_tokens - self.find_cached(req))

    def can_append_slots(self, group_id: int) -> bool:
        seq_id = self._seq_by_group.get(group_id)
        if seq_id is None:
            return True
        held = self._off_by_seq[seq_id] + self._clock
        return held % self._block_size != 0 or self.pool.num_free_blocks > 0

    def append_slot(self, seq_id: int) -> None:
        if not self._allocate_slots(seq_id, 1):
            raise AllocatorError(f"append_slot: no free block for sequence {seq_id}")

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        raise AllocatorError(
            "paged-v1: vLLM V1 runs one sequence per request (parallel samples are separate "
            "requests); it has no forks"
        )

    # -- invariants ---------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Counts from the tables, from scratch: reference counts and the free queue, each
        table's length, keys on exactly the leading blocks said keyed (each the chain of
        its request's content; an unkeyed full block holds a generated token), and the
        running totals."""
        bs = self._block_size
        pool = self.pool
        counts = [0] * pool.num_blocks
        num_tokens = num_blocks = internal = 0
        for seq_id, table in self._table_by_seq.items():
            held = self.num_slots(seq_id)
            if len(table) != -(-held // bs):
                raise InvariantError(f"paged-v1: seq {seq_id} holds {held} slots in {table}")
            for block_id in table:
                if block_id == NULL_BLOCK:
                    raise InvariantError(f"paged-v1: seq {seq_id} holds the null block")
                counts[block_id] += 1
            content = self._content_by_seq[seq_id]
            num_keyed = content.num_keyed
            if pool.is_caching:
                keys = content.keys.upto(num_keyed)
                for i in range(num_keyed):
                    if pool.key_of(table[i]) != keys[i]:
                        raise InvariantError(f"paged-v1: seq {seq_id} block {i}: wrong key")
                if num_keyed < held // bs and num_keyed * bs + bs <= content.prompt_len:
                    raise InvariantError(
                        f"paged-v1: seq {seq_id}: full prompt block {num_keyed} has no key"
                    )
            elif num_keyed:
                raise InvariantError("paged-v1: blocks keyed with caching off")
            num_tokens += held
            num_blocks += len(table)
            internal += max(0, len(table) * bs - self._target_by_seq[seq_id])
        pool.check_invariants(counts)
        if num_blocks != self._num_table_blocks or internal != self._internal:
            raise InvariantError(
                f"paged-v1: totals (blocks {self._num_table_blocks}, internal "
                f"{self._internal}) != tables ({num_blocks}, {internal})"
            )
        if num_tokens != self._sum_off + self._clock * len(self._off_by_seq):
            raise InvariantError("paged-v1: slot total out of date")
        by_residue = sorted(s for bucket in self._seq_ids_by_residue for s in bucket)
        if by_residue != sorted(self._off_by_seq):
            raise InvariantError("paged-v1: sequences by residue out of date")
        if set(self._seq_by_group.values()) != set(self._table_by_seq):
            raise InvariantError("paged-v1: groups and tables disagree")
