"""LockstepTables: the paged allocator's block tables, kept so that a decode step is O(1).

``PagedAllocator`` (``paged.py``) holds the rules of vLLM v0's block manager; this base
class holds the bookkeeping they act on (block tables, group membership, the transfer
tallies) and the running totals that answer ``usage``, ``can_append_all`` and
``decode_totals`` without visiting every sequence. Each rule is written once, in
``paged.py``; what is here only keeps the same blocks and the same counts faster.

Lockstep sequences. A sequence whose last block nobody else holds partly filled
(every sequence, except forks between their fork and their next append, and groups
just swapped in) is kept as counts, not as a token counter of its own::

    held slots = off + clock            clock: bulk appends so far (append_slot_all)

and the allocator keeps running totals over these sequences: their number, the sum
of ``off``, the blocks their tables hold, their internal fragmentation, and the
sequences by ``off mod B`` (those whose held slots are a multiple of B open a block at
the next append: ``off = -clock (mod B)``); per clock value, the internal
fragmentation of the sequences that open their final block when the clock reaches it
(from then on it counts; a sequence that leaves first takes its share back). So
``usage``, ``can_append_all`` and ``decode_totals`` are O(1) plus O(exact sequences),
and ``append_slot_all`` is O(blocks opened). Block tables stay exact for every
sequence (ids are taken from the pool as blocks open), so prefix caching, forks and
swaps see the same blocks either way; the other sequences (the *exact* ones) are
appended and accounted one by one, and join the lockstep set at their next append.
Without a prefix cache or a pinned prefix, blocks are shared only inside a group, so a
group's only sequence holds each of its blocks alone: ``free`` releases them without
reading their counts (``BlockPool.release_held_once``), and a bulk step gives each
opener its block in one pass (``BlockPool.take_onto``).

Beam steps. A beam step (``free_and_fork``) frees the beams no candidate chose and
forks the chosen ones again; the schedulers give each child the id of a beam freed in
the same call. When every sequence involved is in the lockstep set and the pool
shares blocks only inside groups (no prefix cache, no pinned prefix), such a call
keeps the group in the lockstep set (``_refork``): a child holds as many slots, in as
many blocks, with the same target as the beam it replaces, so no running total moves;
its table gives up the freed beam's blocks and takes its parent's (a leading run the
two share is left alone, ``BlockPool.rebase``). If the fork falls inside a block, the
child and its parent now share a partly filled last block: the child's copy of it is
*pending* (by group, with what the totals count twice for it: its empty slots and
internal fragmentation, subtracted in ``usage``), ``can_append_all`` counts it, and
the next bulk append makes it (``_copy_pending``; the parent, its last holder, writes
in place, where a one-by-one ``fork`` would leave the copy to the parent: only which
block each holds differs). Anything else that touches the group first gives its
pending copies the general form (``_settle``: the sharers become exact).

The invariants these totals keep are checked from scratch by ``paged_checks``.
"""

from __future__ import annotations

from pagesim._native import BoxedId
from pagesim.allocators.base import NO_TRANSFERS, DecodeTotals, KVAllocator, Transfers
from pagesim.allocators.block_pool import BlockPool
from pagesim.allocators.validation import FreedIds
from pagesim.errors import AllocatorError, InvariantError


class LockstepTables(KVAllocator):
    """Block tables, groups and the lockstep running totals of a paged pool (module
    docstring); ``PagedAllocator`` adds the rules."""

    def __init__(self, *, capacity_slots: int, block_size: int, is_prefix_caching: bool) -> None:
        self._capacity_slots = capacity_slots
        self._block_size = block_size
        self.gpu = BlockPool(capacity_slots // block_size, is_caching=is_prefix_caching, name="gpu")
        self._table_by_seq: dict[int, list[int]] = {}
        self._target_by_seq: dict[int, int] = {}
        self._group_by_seq: dict[int, int] = {}
        self._seq_ids_by_group: dict[int, dict[int, None]] = {}
        self._swapped_group_ids: set[int] = set()
        self._freed_seq_ids = FreedIds()
        self._num_copied = self._num_swapped_in = self._num_swapped_out = 0
        #: the pinned prefix's blocks (``paged.py``), held for the whole run
        self._pinned_ids: list[int] = []
        #: blocks are shared only between sequences of one group (forks): no prefix
        #: cache hit or pinned prefix shares them across groups, so the blocks of a
        #: group's only sequence are each held once
        self._is_shared_in_group_only = not is_prefix_caching
        #: tokens held by the sequences outside the lockstep set (exact ones, swapped ones)
        self._num_tokens_by_seq: dict[int, int] = {}
        #: GPU sequences outside the lockstep set (module docstring)
        self._exact_seq_ids: dict[int, None] = {}
        #: GPU groups by number of sequences (vLLM's can_append_slots needs one block each)
        self._num_groups_by_size: dict[int, int] = {}
        self._max_group_size = 0
        #: sum of the GPU tables' lengths (a block shared by k tables counts k times)
        self._num_table_blocks = 0
        # the lockstep set (module docstring)
        self._clock = 0
        self._off_by_seq: dict[int, int] = {}
        self._seq_ids_by_residue: list[dict[int, None]] = [{} for _ in range(block_size)]
        self._sum_off = 0
        self._lockstep_blocks = 0
        self._lockstep_internal = 0
        #: internal fragmentation the lockstep set gains when the clock reaches a value
        #: (the sequences that open their final block at that clock)
        self._final_internal_by_clock: dict[int, int] = {}
        #: beam steps' shared last blocks (module docstring, "Beam steps"): by group, the
        #: lockstep sequences that continue another one's line, (parent, child), each
        #: child to copy the partly filled last block they share at its next append
        self._pending_copy: dict[int, list[tuple[int, int]]] = {}
        self._num_pending = 0
        #: what the lockstep totals count twice for those blocks: empty slots, and
        #: the internal fragmentation among them
        self._pending_holes = 0
        self._pending_internal = 0

    # -- the pool -----------------------------------------------------------------------
    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        """Live sequences of a group (empty if the group holds nothing)."""
        return tuple(self._seq_ids_by_group.get(group_id, ()))

    def is_lockstep(self, seq_id: int) -> bool:
        """Whether a sequence is kept as counts (module docstring)."""
        return seq_id in self._off_by_seq

    # -- the lockstep set ---------------------------------------------------------------
    def _join(self, seq_id: BoxedId, held: int) -> None:
        """A GPU sequence holding ``held`` slots, its last block its own, joins the lockstep
        set. (Here and in the other per-sequence helpers: boxed ids, docs/compiled_modules.md.)"""
        bs = self._block_size
        off = held - self._clock
        self._off_by_seq[seq_id] = off
        self._seq_ids_by_residue[off % bs][seq_id] = None
        self._sum_off += off
        self._lockstep_blocks += len(self._table_by_seq[seq_id])
        target = self._target_by_seq[seq_id]
        rest = target % bs
        if rest:
            if held > target - rest:
                self._lockstep_internal += bs - rest
            else:
                final = self._final_internal_by_clock
                at = target - rest + 1 - off
                final[at] = final.get(at, 0) + bs - rest

    def _leave(self, seq_id: BoxedId, table: list[int] | None = None) -> int:
        """A sequence leaves the lockstep set; returns the slots it holds. ``table``: its
        block table, if the caller has it at hand."""
        bs = self._block_size
        off = self._off_by_seq.pop(seq_id)
        held = off + self._clock
        del self._seq_ids_by_residue[off % bs][seq_id]
        self._sum_off -= off
        self._lockstep_blocks -= len(self._table_by_seq[seq_id] if table is None else table)
        target = self._target_by_seq[seq_id]
        rest = target % bs
        if rest:
            if held > target - rest:
                self._lockstep_internal -= bs - rest
            else:
                self._final_internal_by_clock[target - rest + 1 - off] -= bs - rest
        return held

    def _make_exact(self, seq_id: BoxedId) -> None:
        """A GPU sequence leaves the lockstep set (its last block is about to be shared)."""
        if seq_id in self._off_by_seq:
            self._num_tokens_by_seq[seq_id] = self._leave(seq_id)
            self._exact_seq_ids[seq_id] = None

    def _num_tokens(self, seq_id: int) -> int:
        off = self._off_by_seq.get(seq_id)
        return self._num_tokens_by_seq[seq_id] if off is None else off + self._clock

    def _attach(self, group_id: BoxedId, seq_id: BoxedId, table: list[int]) -> None:
        self._table_by_seq[seq_id] = table
        self._num_table_blocks += len(table)
        self._group_by_seq[seq_id] = group_id
        members = self._seq_ids_by_group[group_id]
        if members:
            self._count_group(len(members), -1)
        members[seq_id] = None
        self._count_group(len(members), +1)
        self._freed_seq_ids.discard(seq_id)

    def _count_group(self, size: int, delta: int) -> None:
        count = self._num_groups_by_size.get(size, 0) + delta
        if count:
            self._num_groups_by_size[size] = count
            if size > self._max_group_size:
                self._max_group_size = size
        else:
            del self._num_groups_by_size[size]
            if size == self._max_group_size:
                self._max_group_size = max(self._num_groups_by_size, default=0)

    # -- bulk appends -------------------------------------------------------------------
    def can_append_all(self) -> bool:
        """Whether ``can_append_slots`` holds for every GPU group, visited in any order,
        while each appends a slot to every sequence: the free blocks minus every block
        the appends open or copy cover the largest group. Sufficient, not necessary: when
        False the caller visits the groups one by one."""
        if not self._max_group_size:
            return True
        bs = self._block_size
        need = len(self._openers()) + self._num_pending
        if self._exact_seq_ids:
            shared: set[int] = set()
            for seq_id in self._exact_seq_ids:
                if self._num_tokens_by_seq[seq_id] % bs == 0:
                    need += 1
                else:
                    shared.add(self._table_by_seq[seq_id][-1])
            need += sum(self.gpu.ref_count(b) - 1 for b in shared)
        return self.gpu.num_free_blocks - need >= self._max_group_size

    def append_costs(self, group_ids: list[int]) -> list[tuple[int, int]] | None:
        """``KVAllocator.append_costs``: a group asks for a free block per sequence
        (``can_append_slots``) and takes one per sequence whose held slots fill its
        blocks (``off = -clock mod B``). None if a sequence is exact (its append may
        copy a shared block), a group is swapped out, or the pool caches prefixes (with
        appends deferred past a preemption, a block the victim frees would be taken
        instead of evicting a cached one, and the cache would differ)."""
        if self._exact_seq_ids or self._pending_copy or self.gpu.is_caching:
            return None
        opens = -self._clock % self._block_size
        bs = self._block_size
        off_by_seq = self._off_by_seq
        members_by_group = self._seq_ids_by_group
        swapped = self._swapped_group_ids
        costs = []
        ids: list[BoxedId] = group_ids
        for group_id in ids:
            members = members_by_group.get(group_id)
            if not members or (swapped and group_id in swapped):
                return None
            take = 0
            for seq_id in members:
                if off_by_seq[seq_id] % bs == opens:
                    take += 1
            costs.append((len(members), take))
        return costs

    def append_slot_all(self) -> None:
        """One more slot for every GPU sequence (``can_append_all`` said True):
        O(blocks opened and copied) for the lockstep set, then the exact sequences one
        by one."""
        self._append_lockstep(0)
        if self._pending_copy:
            self._copy_pending()
        if self._exact_seq_ids:
            self._append_exact()

    def _openers(self) -> dict[int, None]:
        """The lockstep sequences whose blocks are full, so that their next slot opens a
        block: those with ``off = -clock mod B``."""
        return self._seq_ids_by_residue[-self._clock % self._block_size]

    def _append_lockstep(self, min_free: int) -> bool:
        """One more slot for every lockstep sequence: a block for each opener
        (:meth:`_openers`), the clock, and the final blocks opened now. False, with
        nothing changed, if the blocks it would open leave fewer than ``min_free`` free."""
        openers = self._openers()
        num_opened = len(openers)
        if min_free and self.gpu.num_free_blocks - num_opened < min_free:
            return False
        if num_opened:
            tables = self._table_by_seq
            self.gpu.take_onto([tables[seq_id] for seq_id in openers], num_opened)
            self._lockstep_blocks += num_opened
            self._num_table_blocks += num_opened
        self._clock += 1
        self._lockstep_internal += self._final_internal_by_clock.pop(self._clock, 0)
        return True

    def _copy_pending(self) -> None:
        """The copies a beam step left due (:attr:`_pending_copy`): each child takes a
        fresh block for the last block it shares, whose holders drop by one; the parent,
        its last holder, writes in place. The lockstep totals already count each child's
        block as its own."""
        tables = self._table_by_seq
        gpu = self.gpu
        for forks in self._pending_copy.values():
            for _, child in forks:
                table = tables[child]
                copy_id = gpu.copy_if_shared(table[-1])
                if copy_id is None:
                    raise InvariantError(f"paged: seq {child}'s pending copy has no block to copy")
                table[-1] = copy_id
        self._num_copied += self._num_pending
        self._pending_copy = {}
        self._num_pending = self._pending_holes = self._pending_internal = 0

    def _settle(self, group_id: int) -> None:
        """A group's pending copies in the general form, before anything other than a
        bulk append touches its sequences: each child and its parent leave the lockstep
        set and become exact (``fork``'s form of a shared last block)."""
        forks = self._pending_copy.pop(group_id, None)
        if forks is None:
            return
        for parent, child in forks:
            holes, internal = self._shared_last_block(child)
            self._pending_holes -= holes
            self._pending_internal -= internal
            self._num_pending -= 1
            self._make_exact(parent)
            self._make_exact(child)

    def _shared_last_block(self, seq_id: int) -> tuple[int, int]:
        """What the lockstep totals count for a lockstep sequence's partly filled last
        block: its empty slots, and the internal fragmentation among them (counted twice
        while a pending copy shares the block)."""
        bs = self._block_size
        held = self._off_by_seq[seq_id] + self._clock
        will_fill = min(bs, self._target_by_seq[seq_id] - (held - 1) // bs * bs)
        return bs - held % bs, bs - will_fill

    def append_all_measured(
        self, is_blocked: bool
    ) -> tuple[int, int, int, tuple[int, int, int, int, int, int]] | None:
        """``KVAllocator.append_all_measured`` (a steady decode step in one call):
        ``can_append_all``, ``append_slot_all``, ``decode_totals`` and ``usage_slots``
        fused, the same arithmetic on the same running totals. None (nothing changed)
        also while a sequence is exact (its append may copy a shared block: the caller
        takes ``append_all_copying``) or a copy or swap waits to be drained (it belongs
        in a step's plan: the caller takes the per-step path)."""
        if (
            self._exact_seq_ids
            or self._pending_copy
            or self._num_copied
            or self._num_swapped_in
            or self._num_swapped_out
        ):
            return None
        # can_append_all with no exact sequence: the blocks the openers take must leave
        # the largest group one each
        if not self._append_lockstep(self._max_group_size):
            return None
        num_seqs = len(self._off_by_seq)
        held = self._sum_off + num_seqs * self._clock
        holes = self._lockstep_blocks * self._block_size - held
        internal = self._lockstep_internal
        return (
            num_seqs,
            held,
            self._num_table_blocks,
            self._pool_usage(holes, holes - internal, internal, is_blocked),
        )

    def _append_exact(self) -> None:
        """``append_slot`` for every exact sequence, in order: each opens a block when its
        last is full, else copies a shared last block (the last sharer writes in place),
        and joins the lockstep set (``_join``). If the pool runs out, the
        sequences not reached stay exact."""
        bs = self._block_size
        take = self.gpu.take
        copy_if_shared = self.gpu.copy_if_shared
        tables = self._table_by_seq
        tokens_by_seq = self._num_tokens_by_seq
        exact_seq_ids = self._exact_seq_ids
        self._exact_seq_ids = {}
        try:
            for seq_id in exact_seq_ids:
                table = tables[seq_id]
                num_tokens = tokens_by_seq[seq_id]
                if num_tokens % bs == 0:
                    try:
                        table.append(take())
                    except AllocatorError:
                        raise AllocatorError(
                            f"append_slot: no free block for sequence {seq_id}"
                        ) from None
                    self._num_table_blocks += 1
                else:
                    try:
                        copy_id = copy_if_shared(table[-1])
                    except AllocatorError:
                        raise AllocatorError(
                            f"append_slot: no free block to copy shared block {table[-1]} "
                            f"for sequence {seq_id}"
                        ) from None
                    if copy_id is not None:
                        table[-1] = copy_id
                        self._num_copied += 1
                del tokens_by_seq[seq_id]
                self._join(seq_id, num_tokens + 1)
        except AllocatorError:
            self._exact_seq_ids = {s: None for s in exact_seq_ids if s in tokens_by_seq}
            raise

    # -- frees and beam steps -----------------------------------------------------------
    def _release_gpu_table(self, seq_id: BoxedId, is_last_of_group: bool) -> None:
        """A GPU sequence leaves the lockstep (or exact) set and its table is released,
        tail first; a group's last sequence holds its blocks alone unless a prefix cache
        or pinned prefix shares them across groups (module docstring)."""
        table = self._table_by_seq.pop(seq_id)
        if seq_id in self._off_by_seq:
            self._leave(seq_id, table)
        else:
            del self._num_tokens_by_seq[seq_id]
            del self._exact_seq_ids[seq_id]
        self._num_table_blocks -= len(table)
        if is_last_of_group and self._is_shared_in_group_only:
            self.gpu.release_held_once(table)
        else:
            self.gpu.decref_all(reversed(table))

    def free_and_fork(self, seq_ids: list[int], forks: list[tuple[int, int]]) -> None:
        """``KVAllocator.free_and_fork`` in one pass over one GPU group's bookkeeping
        (leaving and joining the lockstep set as ``free`` and ``fork`` do): the same
        blocks released and shared in the same order, the group's size counted once (at
        the end, or when a call fails). A call that reaches past the group (a sequence of
        another group, a swapped-out group) or would fail (an unknown or freed sequence,
        a child id in use) is made as such, and raises what it raises."""
        group_by_seq = self._group_by_seq
        if seq_ids:
            group_id = group_by_seq.get(seq_ids[0])
        elif forks:
            group_id = group_by_seq.get(forks[0][0])
        else:
            return
        if group_id is None or group_id in self._swapped_group_ids:
            super().free_and_fork(seq_ids, forks)
            return
        if self._is_shared_in_group_only and self._refork(group_id, seq_ids, forks):
            return
        if self._pending_copy:
            self._settle(group_id)
        members = self._seq_ids_by_group[group_id]
        size_before = len(members)
        bs = self._block_size
        tables = self._table_by_seq
        tokens_by_seq = self._num_tokens_by_seq
        exact_seq_ids = self._exact_seq_ids
        target_by_seq = self._target_by_seq
        freed_seq_ids = self._freed_seq_ids
        gpu = self.gpu
        try:
            for seq_id in seq_ids:  # free(seq_id)
                if group_by_seq.get(seq_id) != group_id:
                    self.free(seq_id)
                    continue
                self._release_gpu_table(seq_id, len(members) == 1)
                del target_by_seq[seq_id]
                del group_by_seq[seq_id]
                freed_seq_ids.add(seq_id)
                del members[seq_id]
            for parent, child in forks:  # fork(parent, child)
                if group_by_seq.get(parent) != group_id or child in group_by_seq:
                    self.fork(parent, child)
                    continue
                table = tables[parent]
                gpu.incref_all(table)
                target_by_seq[child] = target_by_seq[parent]
                tables[child] = table.copy()
                self._num_table_blocks += len(table)
                group_by_seq[child] = group_id
                members[child] = None
                freed_seq_ids.discard(child)
                num_tokens = self._num_tokens(parent)
                if num_tokens % bs == 0:
                    self._join(child, num_tokens)
                    continue
                # the partly filled last block is now shared: parent and child are exact
                self._make_exact(parent)
                tokens_by_seq[child] = num_tokens
                exact_seq_ids[child] = None
        finally:
            size_after = len(members)
            if size_after != size_before:
                self._count_group(size_before, -1)
                if size_after:
                    self._count_group(size_after, +1)
                else:
                    del self._seq_ids_by_group[group_id]

    def _refork(self, group_id: int, seq_ids: list[int], forks: list[tuple[int, int]]) -> bool:
        """``free_and_fork`` of a beam step whose i-th fork gives the i-th freed sequence
        the parent's line (``forks[i] == (parent, seq_ids[i])``), every sequence it names
        of this group and in the lockstep set at one offset, no copy of the group pending
        and the pool sharing blocks only inside groups (module docstring, "Beam steps"). False, with nothing changed,
        when the call is not of that form. The same blocks are released and shared; the
        sequences keep their places in the lockstep totals (a child holds as many slots
        as its parent, in as many blocks, with the same target), and a partly filled
        last block now shared is one copy pending for each child."""
        num = len(seq_ids)
        if num != len(forks) or not num or group_id in self._pending_copy:
            return False
        tables = self._table_by_seq
        ids: list[BoxedId] = seq_ids
        pairs: list[tuple[BoxedId, BoxedId]] = forks
        parent: BoxedId
        child: BoxedId
        first = self._off_by_seq.get(ids[0])
        if first is None:
            return False
        off: int = first
        child_tables: list[list[int]] = []
        parent_tables: list[list[int]] = []
        for i in range(num):
            parent, child = pairs[i]
            if child != ids[i]:
                return False
            for j in range(num):  # distinct children, none of them a parent
                if ids[j] == parent or (j < i and ids[j] == child):
                    return False
            if not (
                self._is_lockstep_at(child, group_id, off)
                and self._is_lockstep_at(parent, group_id, off)
            ):
                return False
            child_tables.append(tables[child])
            parent_tables.append(tables[parent])
        self.gpu.rebase(child_tables, parent_tables)
        if (off + self._clock) % self._block_size:
            # the children share their parents' partly filled last blocks; a group's
            # sequences share their target (each fork inherits its parent's), so each
            # child's block counts the same
            self._pending_copy[group_id] = list(forks)
            self._num_pending += num
            holes, internal = self._shared_last_block(ids[0])
            self._pending_holes += num * holes
            self._pending_internal += num * internal
        return True

    def _is_lockstep_at(self, seq_id: BoxedId, group_id: int, off: int) -> bool:
        """Whether ``seq_id`` is of group ``group_id`` and in the lockstep set at ``off``."""
        found_group = self._group_by_seq.get(seq_id)
        if found_group is None or found_group != group_id:
            return False
        found_off = self._off_by_seq.get(seq_id)
        return found_off is not None and found_off == off

    # -- tallies and accounting ---------------------------------------------------------
    def has_pending_transfers(self) -> bool:
        return bool(self._num_copied or self._num_swapped_in or self._num_swapped_out)

    def drain_transfers(self) -> Transfers:
        if not (self._num_copied or self._num_swapped_in or self._num_swapped_out):
            return NO_TRANSFERS
        out = Transfers(
            num_copied_blocks=self._num_copied,
            num_swapped_in_blocks=self._num_swapped_in,
            num_swapped_out_blocks=self._num_swapped_out,
        )
        self._num_copied = self._num_swapped_in = self._num_swapped_out = 0
        return out

    def decode_totals(self) -> DecodeTotals:
        """The GPU sequences: how many, the slots they hold, the blocks their tables hold."""
        num_seqs = len(self._off_by_seq)
        held = self._sum_off + num_seqs * self._clock
        for seq_id in self._exact_seq_ids:
            held += self._num_tokens_by_seq[seq_id]
        return DecodeTotals(num_seqs + len(self._exact_seq_ids), held, self._num_table_blocks)

    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        """Exact breakdown of the GPU pool: O(1) plus O(exact sequences)."""
        bs = self._block_size
        held = self._sum_off + len(self._off_by_seq) * self._clock
        holes = self._lockstep_blocks * bs - held - self._pending_holes
        internal = self._lockstep_internal - self._pending_internal
        reserved = holes - internal
        if self._exact_seq_ids:
            fill_by_block: dict[int, int] = {}
            will_fill_by_block: dict[int, int] = {}
            for seq_id in self._exact_seq_ids:
                table = self._table_by_seq[seq_id]
                fill = self._num_tokens_by_seq[seq_id] - (len(table) - 1) * bs
                if fill == bs:
                    continue
                last = table[-1]
                fill_by_block[last] = fill
                will_fill = min(bs, self._target_by_seq[seq_id] - (len(table) - 1) * bs)
                will_fill_by_block[last] = max(will_fill_by_block.get(last, 0), will_fill)
            for block_id, fill in fill_by_block.items():
                will_fill = will_fill_by_block[block_id]
                holes += bs - fill
                reserved += will_fill - fill
                internal += bs - will_fill
        return self._pool_usage(holes, reserved, internal, is_blocked)

    def _pool_usage(
        self, holes: int, reserved: int, internal: int, is_blocked: bool
    ) -> tuple[int, int, int, int, int, int]:
        """``usage_slots`` from the empty slots of held blocks (``holes``) and their split
        into reservation and internal fragmentation: the rest is the pool's."""
        bs = self._block_size
        num_blocks = self.gpu.num_blocks
        num_free = self.gpu.num_free_blocks
        num_used = num_blocks - num_free
        free_slots = num_free * bs
        outside = self._capacity_slots - num_blocks * bs
        return (
            num_used * bs - holes,
            reserved,
            internal,
            outside + free_slots if is_blocked else outside,
            0 if is_blocked else free_slots,
            (self._num_table_blocks + len(self._pinned_ids) - num_used) * bs,
        )
