"""PagedAllocator: vLLM v0's BlockSpaceManager (v0.2-v0.4) — block tables, copy-on-write, swap.

Modelling rules (vLLM v0 ``block_manager_v1.py``; PagedAttention paper §4):

- The GPU pool is ``num_blocks`` blocks of ``block_size`` slots (:class:`BlockPool`);
  each sequence has a block table; a block's reference count is the number of
  tables holding it.
- Admission (``can_allocate``) needs ``ceil(num_tokens / B)`` blocks, whatever the
  prefix cache holds (vLLM v0 does not subtract hits): NEVER if
  ``num_blocks - required < watermark_blocks``, OK if
  ``free - required >= watermark_blocks``, else LATER. ``watermark_blocks =
  int(watermark * num_blocks)``. ``allocate`` returns None unless the answer is OK.
- Appends ignore the watermark. A sequence opens a new block only when its last
  block is full. Appending into a shared last block copies it first (copy-on-write):
  of N siblings sharing it the first N-1 to append copy, and the last one, now the
  only holder, writes in place::

      fork:     A:[0 1 2*]  B:[0 1 2*]      (* 2 holds 5 of 16 slots, ref 2)
      B append: A:[0 1 2 ]  B:[0 1 7 ]      (7 = copy of 2, one copied block)
      A append: A:[0 1 2 ]                  (ref 1: in place, no copy)

- ``can_append_slots(group)``: free blocks >= running sequences of the group
  (vLLM v0's conservative check: each may open or copy one block).
- ``fork`` shares every block of the parent (reference counts + 1); beam search
  forks kept beams and frees dropped ones, each O(table length) (``free_and_fork``:
  one group's frees, then its forks, in one call).
- ``free`` releases a table from its tail, so a released prefix is evicted from the
  tail and the next allocation reuses the same ids (the stack is LIFO).
- Prefix caching: see ``prefix_cache``. Full prompt blocks are taken by content key
  (a hit shares the block). ``Allocation.num_cached_tokens`` counts the leading
  consecutive hits, never the table's last block (vLLM v0 computes at least the last
  block so that a prompt is never taken whole from the cache). A block is counted as
  cached as soon as it is in the pool, even if the request that filled it is still in
  its prefill step (vLLM v0 waits for the step to mark blocks computed; the
  simulator's scheduler admits a prompt and computes it in the same step, so the
  difference only shows for identical prompts admitted in one step).
- Swap: a group moves whole. ``can_swap_out``: the CPU pool has a free block per
  distinct block of the group. ``can_swap_in`` (vLLM v0.4): required = distinct CPU
  blocks + one per sequence (each may open a block right after); NEVER if the GPU
  pool is smaller, OK if ``free - required >= watermark_blocks``, else LATER. A block
  shared inside the group moves once and stays shared; a block also held by another
  group (a prefix-cache hit) keeps its GPU copy for that group. Swapped-in blocks
  that carry a content key revive a cached copy when one exists (vLLM v0 transfers
  them anyway, and so does the tally here).
- Recompute is the scheduler's choice: free every sequence and allocate again.
- Pinned prefix (``prefix_caching: pinned``; the paper's prototype, §4.4 "Shared
  prefix", as its artifact implements it: ``prefix_astra/cacheflow/master/``): the
  full blocks of one shared prefix, a content segment ``(segment_id, length)``, are
  taken at construction and held by a pin of their own, so they are never freed or
  evicted and count as used memory (token states) for the whole run. The artifact
  computes the prefix once before its clock starts (``register_prefix`` and one step,
  then warm-up, then the benchmark), so the run starts with it present. Its partial
  last block is not pinned: the artifact cuts the prefix to a multiple of the block
  size and each request computes the cut tokens as its own (the paper's text says
  copy-on-write of the last block instead). A request whose prompt starts with the
  segment maps its first ``min(pinned, covered, (num_tokens - 1) // B)`` blocks to the
  pinned ones (``num_pinned_tokens``; reference counts + 1, the sharing of a fork)
  and takes fresh blocks for the rest; ``Allocation.num_cached_tokens`` says how many
  tokens it did not compute. Admission asks only for the fresh blocks (the artifact's
  ``allocate_with_prefix``: the request's own logical blocks), and NEVER means more
  than the unpinned pool. A swapped-out group takes CPU copies of the pinned blocks
  and comes back with private GPU copies (the artifact's ``swap_out`` / ``swap_in``).
  Pinning and automatic prefix caching are exclusive (the prototype had no cache).

Accounting: pinned blocks are full, so they are token states; for
``shared_saved_slots`` the pin counts as one more table holding them (each request
that maps the prefix saves its own copy). Only a sequence's last block can be partly
filled, and a partly filled block is shared only by forks that all hold the same
tokens in it. Slots past ``num_blocks * B`` (a pool that is not a multiple of the
block size) count as external fragmentation (rounding to blocks). Each sequence
carries its final length (its *target*, ``AllocRequest.target_len``, inherited by
forks) for the hindsight split of its last block into reservation and internal
fragmentation; no allocation decision reads it.

Speed lives in the base class, ``LockstepTables`` (``lockstep.py``): the block tables
and groups these rules act on, and the running totals over the sequences that append
in lockstep, which make ``usage``, ``can_append_all``, ``decode_totals`` and a bulk
append O(1) per step (and a beam step's ``free_and_fork`` O(beams)) without changing
which blocks any sequence holds.
"""

from __future__ import annotations

from typing import cast

from pagesim._native import BoxedId
from pagesim.allocators.base import (
    NOTHING_CACHED,
    Allocation,
    AllocRequest,
    PrefixCacheCounters,
)
from pagesim.allocators.block_pool import BlockPool
from pagesim.allocators.lockstep import LockstepTables
from pagesim.allocators.paged_checks import check_paged_invariants
from pagesim.allocators.prefix_cache import prompt_block_keys
from pagesim.allocators.status import AllocStatus
from pagesim.allocators.validation import check_request
from pagesim.errors import AllocatorError, ConfigError


class PagedAllocator(LockstepTables):
    """vLLM v0 block manager (see the module docstring for every rule and its source)."""

    kind = "paged"
    is_paged = True

    def __init__(
        self,
        *,
        capacity_slots: int,
        block_size: int = 16,
        watermark: float = 0.01,
        is_prefix_caching: bool = False,
        cpu_capacity_slots: int = 0,
        pinned_prefix: tuple[int, int] | None = None,
    ) -> None:
        if block_size <= 0:
            raise ConfigError(f"allocator.block_size must be >= 1, got {block_size}")
        if not 0 <= watermark < 1:
            raise ConfigError(f"allocator.watermark must be in [0, 1), got {watermark}")
        num_blocks = capacity_slots // block_size
        if num_blocks < 1:
            raise ConfigError(
                f"KV pool of {capacity_slots} slots is smaller than one block "
                f"(allocator.block_size={block_size})"
            )
        if cpu_capacity_slots < 0:
            raise ConfigError(f"CPU swap pool must be >= 0 slots, got {cpu_capacity_slots}")
        super().__init__(
            capacity_slots=capacity_slots,
            block_size=block_size,
            is_prefix_caching=is_prefix_caching,
        )
        self._watermark_blocks = int(watermark * num_blocks)
        self.cpu = BlockPool(cpu_capacity_slots // block_size, name="cpu")
        self._cpu_table_by_seq: dict[int, list[int]] = {}
        self._key_by_cpu_block: dict[int, tuple[int, int]] = {}
        self._counters = PrefixCacheCounters()
        #: the pinned prefix (module docstring): its segment id and its pinned blocks
        self._pinned_segment_id, self._pinned_ids = self._pin(pinned_prefix, is_prefix_caching)
        self._is_shared_in_group_only = not (is_prefix_caching or self._pinned_ids)

    def _pin(
        self, pinned_prefix: tuple[int, int] | None, is_prefix_caching: bool
    ) -> tuple[int | None, list[int]]:
        """Take and hold the full blocks of ``pinned_prefix`` = (segment id, tokens)."""
        if pinned_prefix is None:
            return None, []
        if is_prefix_caching:
            raise ConfigError(
                "allocator.prefix_caching: pinned and automatic prefix caching are exclusive; "
                "allowed: false, true, pinned"
            )
        segment_id, num_tokens = pinned_prefix
        num_pinned = num_tokens // self._block_size
        if num_pinned >= self.gpu.num_blocks:
            raise ConfigError(
                f"workload.shared_prefix_len: a pinned prefix of {num_tokens} tokens holds "
                f"{num_pinned} blocks, and the KV pool has only {self.gpu.num_blocks}"
            )
        return segment_id, self.gpu.take_many(num_pinned)

    @classmethod
    def from_spec(
        cls,
        spec,
        *,
        capacity_slots: int,
        cpu_capacity_slots: int,
        max_model_len: int,
        shared_prefix: tuple[int, int] | None = None,
    ) -> PagedAllocator:
        """From an ``AllocatorSpec``: block_size, watermark, prefix_caching (the CPU pool's
        size comes from ``swap_space_gib`` through ``cpu_capacity_slots``). With
        ``prefix_caching: pinned`` it pins ``shared_prefix`` = (segment id, tokens), the
        workload's shared prefix (nothing when it is None or shorter than a block)."""
        is_pinned = spec.prefix_caching == "pinned"
        return cls(
            capacity_slots=capacity_slots,
            block_size=spec.block_size,
            watermark=spec.watermark,
            is_prefix_caching=spec.prefix_caching is True,
            cpu_capacity_slots=cpu_capacity_slots,
            pinned_prefix=shared_prefix if is_pinned and shared_prefix else None,
        )

    # -- read-only views ----------------------------------------------------------------
    @property
    def capacity_slots(self) -> int:
        return self._capacity_slots

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def is_prefix_caching(self) -> bool:
        return self.gpu.is_caching

    @property
    def num_total_blocks(self) -> int:
        return self.gpu.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """GPU blocks nobody holds (evictable cached blocks included)."""
        return self.gpu.num_free_blocks

    @property
    def num_cpu_total_blocks(self) -> int:
        return self.cpu.num_blocks

    @property
    def num_cpu_free_blocks(self) -> int:
        return self.cpu.num_free_blocks

    @property
    def watermark_blocks(self) -> int:
        return self._watermark_blocks

    @property
    def prefix_cache(self) -> PrefixCacheCounters:
        return self._counters

    @property
    def pinned_block_ids(self) -> tuple[int, ...]:
        """The pinned prefix's blocks, in prefix order (empty when nothing is pinned)."""
        return tuple(self._pinned_ids)

    def num_pinned_tokens(self, req: AllocRequest) -> int:
        """Leading prompt tokens ``req`` maps to the pinned prefix's blocks (module
        docstring): whole pinned blocks its first segment covers, short of its last token."""
        pinned = self._pinned_ids
        if not pinned or not req.segments:
            return 0
        segment_id, length = req.segments[0]
        if segment_id != self._pinned_segment_id:
            return 0
        bs = self._block_size
        return min(len(pinned), length // bs, (req.num_tokens - 1) // bs) * bs

    def cached_prefix_tokens(self, req: AllocRequest) -> int:
        """Leading prompt blocks of ``req`` found by content key in the pool (held or
        evictable), short of its last token, or its pinned tokens (``KVAllocator``)."""
        if self._pinned_ids:
            return self.num_pinned_tokens(req)
        if not self.gpu.is_caching:
            return 0
        bs = self._block_size
        keys = prompt_block_keys(req.segments, req.prompt_len, bs)
        lookup = self.gpu.lookup
        num_hits = 0
        for key in keys[: (req.num_tokens - 1) // bs]:
            if lookup(key) is None:
                break
            num_hits += 1
        return num_hits * bs

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        """The GPU (or, while swapped, CPU) block ids of a sequence, in order."""
        self._known(seq_id, "block_table")
        table = self._table_by_seq.get(seq_id)
        return tuple(table if table is not None else self._cpu_table_by_seq[seq_id])

    def is_swapped(self, group_id: int) -> bool:
        return group_id in self._swapped_group_ids

    def num_slots(self, seq_id: int) -> int:
        self._known(seq_id, "num_slots")
        off = self._off_by_seq.get(seq_id)
        return self._num_tokens_by_seq[seq_id] if off is None else off + self._clock

    def _known(self, seq_id: BoxedId, verb: str) -> BoxedId:
        """The group of a live sequence (boxed ids: docs/compiled_modules.md)."""
        group_id = self._group_by_seq.get(seq_id)
        if group_id is None:
            state = "already freed" if seq_id in self._freed_seq_ids else "never allocated"
            raise AllocatorError(f"{verb}: unknown sequence {seq_id} ({state})")
        return group_id

    def _on_gpu(self, seq_id: int, verb: str) -> list[int]:
        group_id = self._known(seq_id, verb)
        if group_id in self._swapped_group_ids:
            raise AllocatorError(f"{verb}: sequence {seq_id} of group {group_id} is swapped out")
        return self._table_by_seq[seq_id]

    # -- admission ----------------------------------------------------------------------
    def _num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self._block_size)

    def _watermark_status(self, required: int) -> AllocStatus:
        if self.gpu.num_blocks - len(self._pinned_ids) - required < self._watermark_blocks:
            return AllocStatus.NEVER
        if self.gpu.num_free_blocks - required >= self._watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def _required_blocks(self, req: AllocRequest) -> int:
        """The fresh blocks an admission of ``req`` asks for (the pinned prefix's are held)."""
        check_request(req)
        required = -(-req.num_tokens // self._block_size)
        if self._pinned_ids:
            required -= self.num_pinned_tokens(req) // self._block_size
        return required

    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        return self._watermark_status(self._required_blocks(req))

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        """Blocks for the prompt (or the recomputed context); full prompt blocks by content key."""
        if self._watermark_status(self._required_blocks(req)) is not AllocStatus.OK:
            return None
        seq_id: BoxedId = req.seq_id
        group_id: BoxedId = req.group_id
        if seq_id in self._group_by_seq:
            raise AllocatorError(f"allocate: sequence {seq_id} is already allocated")
        if group_id in self._seq_ids_by_group:
            raise AllocatorError(f"allocate: group {group_id} is already admitted")
        num_blocks = self._num_blocks_for(req.num_tokens)
        keys = (
            prompt_block_keys(req.segments, req.prompt_len, self._block_size)
            if self.gpu.is_caching
            else []
        )
        table: list[int] = []
        num_leading_hits = 0
        for i, key in enumerate(keys[:num_blocks]):
            block_id, is_hit = self.gpu.take_keyed(key, (i + 1) * self._block_size)
            if is_hit and num_leading_hits == i:
                num_leading_hits += 1
            table.append(block_id)
        if self._pinned_ids:
            num_leading_hits = self.num_pinned_tokens(req) // self._block_size
            table = self._pinned_ids[:num_leading_hits]
            for block_id in table:
                self.gpu.incref(block_id)
        if len(table) < num_blocks:
            table += self.gpu.take_many(num_blocks - len(table))
        num_cached_blocks = min(num_leading_hits, num_blocks - 1)
        num_cached_tokens = num_cached_blocks * self._block_size
        if self.gpu.is_caching or self._pinned_ids:
            c = self._counters
            self._counters = PrefixCacheCounters(
                hit_blocks=c.hit_blocks + num_cached_blocks,
                queried_blocks=c.queried_blocks
                + (len(keys) if self.gpu.is_caching else req.prompt_len // self._block_size),
                hit_tokens=c.hit_tokens + num_cached_tokens,
                queried_tokens=c.queried_tokens + req.prompt_len,
            )
        self._seq_ids_by_group[group_id] = {}
        self._target_by_seq[seq_id] = max(req.target_len, req.num_tokens)
        self._attach(group_id, seq_id, table)
        self._join(seq_id, req.num_tokens)
        return Allocation(num_cached_tokens) if num_cached_tokens else NOTHING_CACHED

    # -- growth, forks, frees -----------------------------------------------------------
    def can_append_slots(self, group_id: int) -> bool:
        """vLLM v0: a free block for every running sequence of the group (swapped: False)."""
        if group_id in self._swapped_group_ids:
            return False
        return self.gpu.num_free_blocks >= len(self._seq_ids_by_group.get(group_id, ()))

    def append_slot(self, seq_id: int) -> None:
        """One more slot: a new block when the last is full; copy-on-write if it is shared."""
        if self._pending_copy and seq_id in self._group_by_seq:
            self._settle(self._group_by_seq[seq_id])
        table = self._on_gpu(seq_id, "append_slot")
        if seq_id in self._off_by_seq:
            num_tokens = self._leave(seq_id)
        else:
            num_tokens = self._num_tokens_by_seq.pop(seq_id)
            del self._exact_seq_ids[seq_id]
        if num_tokens % self._block_size == 0:
            if self.gpu.num_free_blocks == 0:
                raise AllocatorError(f"append_slot: no free block for sequence {seq_id}")
            table.append(self.gpu.take())
            self._num_table_blocks += 1
        else:
            last = table[-1]
            if self.gpu.ref_count(last) > 1:
                if self.gpu.num_free_blocks == 0:
                    raise AllocatorError(
                        f"append_slot: no free block to copy shared block {last} for sequence {seq_id}"
                    )
                table[-1] = cast(int, self.gpu.copy_if_shared(last))  # shared: a copy
                self._num_copied += 1
        self._join(seq_id, num_tokens + 1)

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child shares every block of the parent (reference counts + 1)."""
        if self._pending_copy and parent_seq_id in self._group_by_seq:
            self._settle(self._group_by_seq[parent_seq_id])
        table = self._on_gpu(parent_seq_id, "fork")
        if child_seq_id in self._group_by_seq:
            raise AllocatorError(f"fork: child sequence {child_seq_id} already exists")
        self.gpu.incref_all(table)
        group_id = self._group_by_seq[parent_seq_id]
        num_tokens = self._num_tokens(parent_seq_id)
        self._target_by_seq[child_seq_id] = self._target_by_seq[parent_seq_id]
        self._attach(group_id, child_seq_id, list(table))
        if num_tokens % self._block_size:  # the partly filled last block is now shared
            self._make_exact(parent_seq_id)
            self._num_tokens_by_seq[child_seq_id] = num_tokens
            self._exact_seq_ids[child_seq_id] = None
        else:
            self._join(child_seq_id, num_tokens)

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks, tail first (GPU, or CPU while swapped)."""
        self._free(seq_id)

    def _free(self, seq_id: BoxedId) -> None:
        """:meth:`free`, the id boxed once (docs/compiled_modules.md)."""
        group_id = self._known(seq_id, "free")
        if self._pending_copy:
            self._settle(group_id)
        members = self._seq_ids_by_group[group_id]
        if group_id in self._swapped_group_ids:
            cpu_table = self._cpu_table_by_seq.pop(seq_id)
            self._release_cpu(cpu_table)
            del self._num_tokens_by_seq[seq_id]
        else:
            self._release_gpu_table(seq_id, len(members) == 1)
            self._count_group(len(members), -1)
            if len(members) > 1:
                self._count_group(len(members) - 1, +1)
        del self._target_by_seq[seq_id]
        del self._group_by_seq[seq_id]
        self._freed_seq_ids.add(seq_id)
        del members[seq_id]
        if not members:
            del self._seq_ids_by_group[group_id]
            self._swapped_group_ids.discard(group_id)

    def _release_cpu(self, cpu_table: list[int]) -> None:
        released = [b for b in cpu_table if self.cpu.ref_count(b) == 1]
        self.cpu.decref_all(reversed(cpu_table))
        for b in released:
            self._key_by_cpu_block.pop(b, None)

    # -- swap ---------------------------------------------------------------------------
    def _distinct_blocks(self, group_id: int, table_by_seq: dict[int, list[int]]) -> int:
        return len({b for s in self._seq_ids_by_group[group_id] for b in table_by_seq[s]})

    def _group(self, group_id: int, verb: str) -> dict[int, None]:
        members = self._seq_ids_by_group.get(group_id)
        if not members:
            raise AllocatorError(f"{verb}: unknown group {group_id} (no live sequences)")
        return members

    def can_swap_out(self, group_id: int) -> bool:
        """The CPU pool has a free block for every distinct block of the group."""
        self._group(group_id, "can_swap_out")
        if group_id in self._swapped_group_ids:
            return False
        return self._distinct_blocks(group_id, self._table_by_seq) <= self.cpu.num_free_blocks

    def swap_out(self, group_id: int) -> None:
        """Move every sequence of the group to CPU blocks; shared blocks move once."""
        if not self.can_swap_out(group_id):
            raise AllocatorError(
                f"swap_out: group {group_id} cannot be swapped out "
                f"(already swapped, or {self.cpu.num_free_blocks} free CPU blocks are too few)"
            )
        if self._pending_copy:
            self._settle(group_id)
        members = self._seq_ids_by_group[group_id]
        self._count_group(len(members), -1)
        gpu_to_cpu: dict[int, int] = {}
        for seq_id in members:
            if seq_id in self._off_by_seq:
                self._num_tokens_by_seq[seq_id] = self._leave(seq_id)
            else:
                del self._exact_seq_ids[seq_id]
            table = self._table_by_seq.pop(seq_id)
            self._num_table_blocks -= len(table)
            cpu_table = []
            for block_id in table:
                cpu_id = gpu_to_cpu.get(block_id)
                if cpu_id is None:
                    cpu_id = gpu_to_cpu[block_id] = self.cpu.take()
                    key, depth = self.gpu.key_of(block_id)
                    if key is not None:
                        self._key_by_cpu_block[cpu_id] = (key, depth)
                else:
                    self.cpu.incref(cpu_id)
                cpu_table.append(cpu_id)
            self._cpu_table_by_seq[seq_id] = cpu_table
            self.gpu.decref_all(reversed(table))
        self._swapped_group_ids.add(group_id)
        self._num_swapped_out += len(gpu_to_cpu)

    def can_swap_in(self, group_id: int) -> AllocStatus:
        """vLLM v0.4: distinct CPU blocks + one per sequence, against the watermark."""
        members = self._group(group_id, "can_swap_in")
        if group_id not in self._swapped_group_ids:
            raise AllocatorError(f"can_swap_in: group {group_id} is not swapped out")
        required = self._distinct_blocks(group_id, self._cpu_table_by_seq) + len(members)
        return self._watermark_status(required)

    def swap_in(self, group_id: int) -> None:
        """Move the group back to GPU blocks, keeping its sharing; keyed blocks may hit the cache.
        Its sequences come back exact (a partly filled block may be shared inside the group)."""
        if self.can_swap_in(group_id) is not AllocStatus.OK:
            raise AllocatorError(
                f"swap_in: group {group_id} does not fit now ({self.gpu.num_free_blocks} free "
                f"GPU blocks, watermark {self._watermark_blocks}); ask can_swap_in first"
            )
        members = self._seq_ids_by_group[group_id]
        cpu_to_gpu: dict[int, int] = {}
        for seq_id in members:
            cpu_table = self._cpu_table_by_seq.pop(seq_id)
            table = []
            for cpu_id in cpu_table:
                block_id = cpu_to_gpu.get(cpu_id)
                if block_id is None:
                    keyed = self._key_by_cpu_block.get(cpu_id)
                    if keyed is None:
                        block_id = self.gpu.take()
                    else:
                        block_id, _ = self.gpu.take_keyed(*keyed)
                    cpu_to_gpu[cpu_id] = block_id
                else:
                    self.gpu.incref(block_id)
                table.append(block_id)
            self._table_by_seq[seq_id] = table
            self._num_table_blocks += len(table)
            self._exact_seq_ids[seq_id] = None
            self._release_cpu(cpu_table)
        self._count_group(len(members), +1)
        self._swapped_group_ids.discard(group_id)
        self._num_swapped_in += len(cpu_to_gpu)

    # -- invariants ---------------------------------------------------------------------
    def check_invariants(self) -> None:
        check_paged_invariants(self)
