"""V1Tables: the V1 KV cache manager's block tables, kept so that a decode step is O(1).

``PagedV1Allocator`` (``paged_v1.py``) holds vLLM V1's rules; this base class holds the
block tables they act on and the running totals that answer ``usage_slots``,
``can_append_all``, ``decode_totals`` and a bulk append (``append_slot_all``) without
visiting every request. What is here decides nothing: it keeps the same blocks and the
same counts faster.

A V1 request is one sequence, and its table always holds exactly the blocks its slots
need (``ceil(slots / B)``: vLLM V1 allocates as tokens are scheduled, no more). Every
sequence is kept as counts::

    held slots = off + clock            clock: bulk appends so far

with running totals over all of them: the sum of ``off``, the blocks their tables hold,
their internal fragmentation, and the sequences by ``off mod B`` (those whose held
slots are a multiple of B open a block at the next append: ``off = -clock (mod B)``);
per clock value, the internal fragmentation of the sequences that open their final
block when the clock reaches it. A sequence that grows by a chunk (``_regrow``) leaves
and joins again, O(1). A bulk append gives its openers their blocks from the head of
the free queue in sequence-id order, which is admission order: the order in which
vLLM V1's scheduler visits its running requests and allocates (``sched/scheduler.py``).

Accounting (the paper's categories; ``usage_slots``): blocks shared between requests
are prefix-cache hits, which are full, so a block held by ``k`` tables counts its
slots once as token states and saves ``(k - 1) x B`` (``shared_saved_slots``); a
request's last block is its own, its empty slots are reservation, or internal
fragmentation past the request's final length (hindsight). Free blocks, those that
keep a key (cached, evictable: a hit until evicted) included, count as free (unused,
or external fragmentation while a request waits for memory), as vLLM V1 counts them
(``get_num_free_blocks``, ``get_usage``). The null block, and the slots past the last
whole block, are the allocator's own: external fragmentation.
"""

from __future__ import annotations

from pagesim._native import BoxedId
from pagesim.allocators.base import NO_TRANSFERS, DecodeTotals, KVAllocator, Transfers
from pagesim.allocators.v1_pool import V1BlockPool
from pagesim.allocators.validation import FreedIds
from pagesim.errors import AllocatorError


def _is_ascending(seq_ids: dict[int, None]) -> bool:
    """Whether the ids are in ascending order already (they nearly always are: sequences
    join their residue's dict in admission order, and move to the end of one only when
    they grow one by one, by a chunk or by a token outside a bulk append)."""
    last = -1
    for seq_id in seq_ids:
        if seq_id < last:
            return False
        last = seq_id
    return True


class V1Tables(KVAllocator):
    """Block tables and running totals of a V1 pool (module docstring);
    ``PagedV1Allocator`` adds the rules."""

    def __init__(self, *, capacity_slots: int, block_size: int, is_prefix_caching: bool) -> None:
        self._capacity_slots = capacity_slots
        self._block_size = block_size
        self.pool = V1BlockPool(capacity_slots // block_size, is_caching=is_prefix_caching)
        #: each sequence's blocks (ids kept boxed: ``v1_pool.V1BlockPool``)
        self._table_by_seq: dict[int, list[BoxedId]] = {}
        self._target_by_seq: dict[int, int] = {}
        self._group_by_seq: dict[int, int] = {}
        self._seq_by_group: dict[int, int] = {}
        self._freed_seq_ids = FreedIds()
        #: sum of the tables' lengths (a block shared by k tables counts k times)
        self._num_table_blocks = 0
        # the counts (module docstring)
        self._clock = 0
        self._off_by_seq: dict[int, int] = {}
        self._seq_ids_by_residue: list[dict[int, None]] = [{} for _ in range(block_size)]
        self._sum_off = 0
        self._internal = 0
        self._final_internal_by_clock: dict[int, int] = {}

    # -- the pool -----------------------------------------------------------------------
    @property
    def capacity_slots(self) -> int:
        return self._capacity_slots

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_total_blocks(self) -> int:
        """``num_gpu_blocks``, the null block included."""
        return self.pool.num_blocks

    @property
    def num_usable_blocks(self) -> int:
        """Blocks requests can hold: all but the null block."""
        return self.pool.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (cached ones, evictable, included)."""
        return self.pool.num_free_blocks

    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        seq_id = self._seq_by_group.get(group_id)
        return () if seq_id is None else (seq_id,)

    def num_slots(self, seq_id: int) -> int:
        self._known(seq_id, "num_slots")
        return self._off_by_seq[seq_id] + self._clock

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        self._known(seq_id, "block_table")
        return tuple(self._table_by_seq[seq_id])

    def _known(self, seq_id: BoxedId, verb: str) -> BoxedId:
        """The group of a live sequence (boxed ids: docs/compiled_modules.md)."""
        group_id = self._group_by_seq.get(seq_id)
        if group_id is None:
            state = "already freed" if seq_id in self._freed_seq_ids else "never allocated"
            raise AllocatorError(f"{verb}: unknown sequence {seq_id} ({state})")
        return group_id

    # -- the counts ---------------------------------------------------------------------
    def _join(self, seq_id: BoxedId, held: int) -> None:
        """A sequence holding ``held`` slots (its table ``ceil(held / B)`` blocks) is counted."""
        bs = self._block_size
        off = held - self._clock
        self._off_by_seq[seq_id] = off
        self._seq_ids_by_residue[off % bs][seq_id] = None
        self._sum_off += off
        target = self._target_by_seq[seq_id]
        rest = target % bs
        if rest:
            if held > target - rest:
                self._internal += bs - rest
            else:
                final = self._final_internal_by_clock
                at = target - rest + 1 - off
                final[at] = final.get(at, 0) + bs - rest

    def _leave(self, seq_id: BoxedId) -> int:
        """A sequence is no longer counted; returns the slots it holds."""
        bs = self._block_size
        off = self._off_by_seq.pop(seq_id)
        held = off + self._clock
        del self._seq_ids_by_residue[off % bs][seq_id]
        self._sum_off -= off
        target = self._target_by_seq[seq_id]
        rest = target % bs
        if rest:
            if held > target - rest:
                self._internal -= bs - rest
            else:
                self._final_internal_by_clock[target - rest + 1 - off] -= bs - rest
        return held

    def _regrow(self, seq_id: BoxedId, held: int) -> None:
        """A counted sequence now holds ``held`` slots (its table already grown)."""
        self._leave(seq_id)
        self._join(seq_id, held)

    # -- bulk appends -------------------------------------------------------------------
    def _num_openers(self) -> int:
        """Sequences whose next slot opens a block."""
        return len(self._seq_ids_by_residue[-self._clock % self._block_size])

    def can_append_all(self) -> bool:
        """Whether every sequence can take one more slot: a free block for each that opens
        one (then no allocation fails, in whatever order they are visited)."""
        return self.pool.num_free_blocks >= self._num_openers()

    def append_slot_all(self) -> None:
        """One more slot for every sequence; the openers take blocks from the head of the
        free queue in sequence-id (admission) order. Blocks filled here hold a generated
        token each, so only their own request could ever hit them: they get their
        content keys when the request next allocates, or is freed (``paged_v1.py``)."""
        bucket = self._seq_ids_by_residue[-self._clock % self._block_size]
        n = len(bucket)
        if n:
            if n > self.pool.num_free_blocks:
                raise AllocatorError(
                    f"append_slot_all: {n} blocks to open, {self.pool.num_free_blocks} free"
                )
            tables = self._table_by_seq
            pool = self.pool
            seq_id: BoxedId
            if n > 1 and not _is_ascending(bucket):
                for seq_id in sorted(bucket):
                    tables[seq_id].append(pool.take())
            else:
                for seq_id in bucket:
                    tables[seq_id].append(pool.take())
            self._num_table_blocks += n
        clock = self._clock + 1
        self._clock = clock
        final = self._final_internal_by_clock
        if clock in final:
            self._internal += final.pop(clock)

    def decode_totals(self) -> DecodeTotals:
        """Sequences held, their slots and their tables' blocks."""
        return DecodeTotals(*self.decode_sums())

    def decode_sums(self) -> tuple[int, int, int]:
        """:meth:`decode_totals` as a plain tuple (once per step: no named tuple)."""
        num_seqs = len(self._off_by_seq)
        return num_seqs, self._sum_off + self._clock * num_seqs, self._num_table_blocks

    def append_all_measured(
        self, is_blocked: bool
    ) -> tuple[int, int, int, tuple[int, int, int, int, int, int]] | None:
        """``KVAllocator.append_all_measured``: a bulk append, its totals and the memory."""
        if self.pool.num_free_blocks < self._num_openers():
            return None
        self.append_slot_all()
        num_seqs = len(self._off_by_seq)
        return (
            num_seqs,
            self._sum_off + self._clock * num_seqs,
            self._num_table_blocks,
            self.usage_slots(is_blocked),
        )

    def append_all_copying(
        self, is_blocked: bool
    ) -> tuple[int, int, int, tuple[int, int, int, int, int, int], int] | None:
        """Nothing is ever copied (no forks): None when the bulk append is not possible."""
        measured = self.append_all_measured(is_blocked)
        if measured is None:
            return None
        return (*measured, 0)

    def drain_transfers(self) -> Transfers:
        return NO_TRANSFERS

    def has_pending_transfers(self) -> bool:
        return False

    # -- accounting ---------------------------------------------------------------------
    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        """The breakdown from the totals (module docstring, "Accounting"), in O(1)."""
        bs = self._block_size
        pool = self.pool
        num_free = pool.num_free_blocks
        num_held = pool.num_blocks - 1 - num_free
        table_blocks = self._num_table_blocks
        num_tokens = self._sum_off + self._clock * len(self._off_by_seq)
        shared_saved = (table_blocks - num_held) * bs
        holes = table_blocks * bs - num_tokens
        internal = self._internal
        free = num_free * bs
        own = self._capacity_slots - (pool.num_blocks - 1) * bs  # null block + rounding
        return (
            num_tokens - shared_saved,
            holes - internal,
            internal,
            own + free if is_blocked else own,
            0 if is_blocked else free,
            shared_saved,
        )
