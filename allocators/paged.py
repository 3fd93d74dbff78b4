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
  forks kept beams and frees dropped ones, each O(table length).
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

Accounting: only a sequence's last block can be partly filled, and a partly filled
block is shared only by forks that all hold the same tokens in it, so ``usage`` is
O(sequences on the GPU). Slots past ``num_blocks * B`` (a pool that is not a multiple
of the block size) count as external fragmentation (rounding to blocks).
"""

from __future__ import annotations

from collections.abc import Mapping

from pagesim.allocators.base import (
    Allocation,
    AllocRequest,
    AllocStatus,
    KVAllocator,
    MemoryUsage,
    PrefixCacheCounters,
    Transfers,
)
from pagesim.allocators.block_pool import BlockPool
from pagesim.allocators.paged_checks import check_paged_invariants
from pagesim.allocators.prefix_cache import prompt_block_keys
from pagesim.allocators.validation import check_request, target_of
from pagesim.errors import AllocatorError, ConfigError


class PagedAllocator(KVAllocator):
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
        self._capacity_slots = capacity_slots
        self._block_size = block_size
        self._watermark_blocks = int(watermark * num_blocks)
        self.gpu = BlockPool(num_blocks, is_caching=is_prefix_caching, name="gpu")
        self.cpu = BlockPool(cpu_capacity_slots // block_size, name="cpu")
        self._table_by_seq: dict[int, list[int]] = {}
        self._cpu_table_by_seq: dict[int, list[int]] = {}
        self._key_by_cpu_block: dict[int, tuple[int, int]] = {}
        self._num_tokens_by_seq: dict[int, int] = {}
        self._group_by_seq: dict[int, int] = {}
        self._seq_ids_by_group: dict[int, dict[int, None]] = {}
        self._swapped_group_ids: set[int] = set()
        self._freed_seq_ids: set[int] = set()
        self._num_copied = self._num_swapped_in = self._num_swapped_out = 0
        self._counters = PrefixCacheCounters()

    # -- read-only views -----------------------------------------------------------------
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

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        """The GPU (or, while swapped, CPU) block ids of a sequence, in order."""
        self._known(seq_id, "block_table")
        table = self._table_by_seq.get(seq_id)
        return tuple(table if table is not None else self._cpu_table_by_seq[seq_id])

    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        """Live sequences of a group (empty if the group holds nothing)."""
        return tuple(self._seq_ids_by_group.get(group_id, ()))

    def is_swapped(self, group_id: int) -> bool:
        return group_id in self._swapped_group_ids

    def num_slots(self, seq_id: int) -> int:
        self._known(seq_id, "num_slots")
        return self._num_tokens_by_seq[seq_id]

    def _known(self, seq_id: int, verb: str) -> int:
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
        if self.gpu.num_blocks - required < self._watermark_blocks:
            return AllocStatus.NEVER
        if self.gpu.num_free_blocks - required >= self._watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        check_request(req)
        return self._watermark_status(self._num_blocks_for(req.num_tokens))

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        """Blocks for the prompt (or the recomputed context); full prompt blocks by content key."""
        if self.can_allocate(req) is not AllocStatus.OK:
            return None
        if req.seq_id in self._group_by_seq:
            raise AllocatorError(f"allocate: sequence {req.seq_id} is already allocated")
        if req.group_id in self._seq_ids_by_group:
            raise AllocatorError(f"allocate: group {req.group_id} is already admitted")
        num_blocks = self._num_blocks_for(req.num_tokens)
        keys = (
            prompt_block_keys(req.segments, req.prompt_len, self._block_size)
            if self.gpu.is_caching
            else []
        )
        table: list[int] = []
        num_leading_hits = 0
        for i in range(num_blocks):
            if i < len(keys):
                block_id, is_hit = self.gpu.take_keyed(keys[i], (i + 1) * self._block_size)
                if is_hit and num_leading_hits == i:
                    num_leading_hits += 1
            else:
                block_id = self.gpu.take()
            table.append(block_id)
        num_cached_blocks = min(num_leading_hits, num_blocks - 1)
        num_cached_tokens = num_cached_blocks * self._block_size
        if self.gpu.is_caching:
            c = self._counters
            self._counters = PrefixCacheCounters(
                hit_blocks=c.hit_blocks + num_cached_blocks,
                queried_blocks=c.queried_blocks + len(keys),
                hit_tokens=c.hit_tokens + num_cached_tokens,
                queried_tokens=c.queried_tokens + req.prompt_len,
            )
        self._seq_ids_by_group[req.group_id] = {}
        self._attach(req.group_id, req.seq_id, table, req.num_tokens)
        return Allocation(num_cached_tokens=num_cached_tokens)

    def _attach(self, group_id: int, seq_id: int, table: list[int], num_tokens: int) -> None:
        self._table_by_seq[seq_id] = table
        self._num_tokens_by_seq[seq_id] = num_tokens
        self._group_by_seq[seq_id] = group_id
        self._seq_ids_by_group[group_id][seq_id] = None
        self._freed_seq_ids.discard(seq_id)

    # -- growth, forks, frees ---------------------------------------------------------------
    def can_append_slots(self, group_id: int) -> bool:
        """vLLM v0: a free block for every running sequence of the group (swapped: False)."""
        if group_id in self._swapped_group_ids:
            return False
        return self.gpu.num_free_blocks >= len(self._seq_ids_by_group.get(group_id, ()))

    def append_slot(self, seq_id: int) -> None:
        """One more slot: a new block when the last is full; copy-on-write if it is shared."""
        table = self._on_gpu(seq_id, "append_slot")
        num_tokens = self._num_tokens_by_seq[seq_id]
        if num_tokens % self._block_size == 0:
            if self.gpu.num_free_blocks == 0:
                raise AllocatorError(f"append_slot: no free block for sequence {seq_id}")
            table.append(self.gpu.take())
        else:
            last = table[-1]
            if self.gpu.ref_count(last) > 1:
                if self.gpu.num_free_blocks == 0:
                    raise AllocatorError(
                        f"append_slot: no free block to copy shared block {last} for sequence {seq_id}"
                    )
                table[-1] = self.gpu.take()
                self.gpu.decref_all((last,))
                self._num_copied += 1
        self._num_tokens_by_seq[seq_id] = num_tokens + 1

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child shares every block of the parent (reference counts + 1)."""
        table = self._on_gpu(parent_seq_id, "fork")
        if child_seq_id in self._group_by_seq:
            raise AllocatorError(f"fork: child sequence {child_seq_id} already exists")
        for block_id in table:
            self.gpu.incref(block_id)
        group_id = self._group_by_seq[parent_seq_id]
        self._attach(group_id, child_seq_id, list(table), self._num_tokens_by_seq[parent_seq_id])

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks, tail first (GPU, or CPU while swapped)."""
        group_id = self._known(seq_id, "free")
        if group_id in self._swapped_group_ids:
            cpu_table = self._cpu_table_by_seq.pop(seq_id)
            self._release_cpu(cpu_table)
        else:
            self.gpu.decref_all(reversed(self._table_by_seq.pop(seq_id)))
        del self._num_tokens_by_seq[seq_id]
        del self._group_by_seq[seq_id]
        self._freed_seq_ids.add(seq_id)
        members = self._seq_ids_by_group[group_id]
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
        gpu_to_cpu: dict[int, int] = {}
        for seq_id in self._seq_ids_by_group[group_id]:
            table = self._table_by_seq.pop(seq_id)
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
        """Move the group back to GPU blocks, keeping its sharing; keyed blocks may hit the cache."""
        if self.can_swap_in(group_id) is not AllocStatus.OK:
            raise AllocatorError(
                f"swap_in: group {group_id} does not fit now ({self.gpu.num_free_blocks} free "
                f"GPU blocks, watermark {self._watermark_blocks}); ask can_swap_in first"
            )
        cpu_to_gpu: dict[int, int] = {}
        for seq_id in self._seq_ids_by_group[group_id]:
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
            self._release_cpu(cpu_table)
        self._swapped_group_ids.discard(group_id)
        self._num_swapped_in += len(cpu_to_gpu)

    # -- tallies and accounting ----------------------------------------------------------
    def drain_transfers(self) -> Transfers:
        out = Transfers(
            num_copied_blocks=self._num_copied,
            num_swapped_in_blocks=self._num_swapped_in,
            num_swapped_out_blocks=self._num_swapped_out,
        )
        self._num_copied = self._num_swapped_in = self._num_swapped_out = 0
        return out

    def usage(self, target_len_by_seq: Mapping[int, int], is_blocked: bool) -> MemoryUsage:
        """Exact breakdown of the GPU pool; O(sequences on the GPU)."""
        bs = self._block_size
        partial_fill: dict[int, int] = {}
        partial_will_fill: dict[int, int] = {}
        for seq_id, table in self._table_by_seq.items():
            n = self._num_tokens_by_seq[seq_id]
            target = target_of(target_len_by_seq, seq_id, n)
            fill = n - (len(table) - 1) * bs
            if fill == bs:
                continue
            last = table[-1]
            partial_fill[last] = fill
            will_fill = min(bs, target - (len(table) - 1) * bs)
            partial_will_fill[last] = max(partial_will_fill.get(last, 0), will_fill)
        num_used = self.gpu.num_blocks - self.gpu.num_free_blocks
        holes = sum(bs - f for f in partial_fill.values())
        reserved = sum(partial_will_fill[b] - f for b, f in partial_fill.items())
        free_slots = self.gpu.num_free_blocks * bs
        return MemoryUsage(
            capacity_slots=self._capacity_slots,
            token_slots=num_used * bs - holes,
            reserved_slots=reserved,
            internal_frag_slots=holes - reserved,
            external_frag_slots=self._capacity_slots
            - self.gpu.num_blocks * bs
            + (free_slots if is_blocked else 0),
            unused_slots=0 if is_blocked else free_slots,
            shared_saved_slots=(sum(map(len, self._table_by_seq.values())) - num_used) * bs,
        )

    def check_invariants(self) -> None:
        check_paged_invariants(self)
