"""Invariants of a PagedAllocator, checked from scratch (O(pool + tables)); tests call it after every op.

- each GPU (CPU) block's reference count = the number of GPU (CPU) tables holding it;
  free, evictable and held blocks partition each pool; nothing is free twice;
- a table holds ``ceil(num_tokens / block_size)`` distinct blocks;
- a group is wholly on the GPU or wholly swapped out; group membership matches; a
  group's sequences share one target (each fork inherits its parent's);
- a partly filled block is held only by sequences that hold the same tokens in it
  (what makes ``usage`` exact without scanning blocks);
- content keys carried by CPU blocks belong to held CPU blocks;
- the pinned prefix's blocks are distinct and each holds one reference of its own (the
  pin) beside the tables' (so they are never free), and carry no content key;
- the lockstep set (see ``lockstep``): its sequences are on the GPU and own their partly
  filled last block, except a beam step's pending copies (a child shares its parent's,
  held by the parent and its pending children only); every running total (sum of offsets, blocks, internal
  fragmentation, residues, table blocks, groups by size, the internal fragmentation
  due at each future clock value) equals its recomputation;
  no sequence holds more than its target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagesim.errors import InvariantError

if TYPE_CHECKING:
    from pagesim.allocators.paged import PagedAllocator


def check_paged_invariants(alloc: PagedAllocator) -> None:
    bs = alloc.block_size
    gpu_refs = [0] * alloc.gpu.num_blocks
    cpu_refs = [0] * alloc.cpu.num_blocks
    fill_by_partial: dict[int, int] = {}
    num_members = 0
    for group_id, members in alloc._seq_ids_by_group.items():
        if not members:
            raise InvariantError(f"paged: group {group_id} is empty but still listed")
        is_swapped = group_id in alloc._swapped_group_ids
        for seq_id in members:
            num_members += 1
            if alloc._group_by_seq.get(seq_id) != group_id:
                raise InvariantError(f"paged: seq {seq_id} is listed in group {group_id} wrongly")
            on_gpu = seq_id in alloc._table_by_seq
            on_cpu = seq_id in alloc._cpu_table_by_seq
            if on_gpu == on_cpu or on_cpu != is_swapped:
                raise InvariantError(
                    f"paged: seq {seq_id} of group {group_id} is on the wrong device"
                )
            table = alloc._cpu_table_by_seq[seq_id] if on_cpu else alloc._table_by_seq[seq_id]
            is_lockstep = seq_id in alloc._off_by_seq
            if is_lockstep == (seq_id in alloc._num_tokens_by_seq) or (
                on_gpu and is_lockstep == (seq_id in alloc._exact_seq_ids)
            ):
                raise InvariantError(f"paged: seq {seq_id} is in the wrong bookkeeping set")
            n = alloc.num_slots(seq_id)
            if not 0 < n <= alloc._target_by_seq[seq_id]:
                raise InvariantError(
                    f"paged: seq {seq_id} holds {n} slots, target {alloc._target_by_seq[seq_id]}"
                )
            if len(table) != -(-n // bs) or len(set(table)) != len(table):
                raise InvariantError(f"paged: seq {seq_id} has table {table} for {n} tokens")
            refs = cpu_refs if on_cpu else gpu_refs
            for b in table:
                refs[b] += 1
            fill = n - (len(table) - 1) * bs
            if on_gpu and fill < bs and fill_by_partial.setdefault(table[-1], fill) != fill:
                raise InvariantError(f"paged: partly filled block {table[-1]} shared unevenly")
        if len({alloc._target_by_seq[seq_id] for seq_id in members}) != 1:
            raise InvariantError(f"paged: the sequences of group {group_id} differ in target")
    if num_members != len(alloc._group_by_seq) or num_members != len(alloc._target_by_seq):
        raise InvariantError("paged: sequence bookkeeping out of date")
    if len(alloc._table_by_seq) + len(alloc._cpu_table_by_seq) != num_members:
        raise InvariantError("paged: a freed sequence still holds a table")
    for b in fill_by_partial:
        if alloc.gpu.key_of(b)[0] is not None:
            raise InvariantError(f"paged: partly filled block {b} carries a content key")
    pinned = alloc._pinned_ids
    if len(set(pinned)) != len(pinned):
        raise InvariantError(f"paged: pinned blocks {pinned} are not distinct")
    for b in pinned:
        gpu_refs[b] += 1
        if alloc.gpu.key_of(b)[0] is not None:
            raise InvariantError(f"paged: pinned block {b} carries a content key")
    alloc.gpu.check_invariants(gpu_refs)
    alloc.cpu.check_invariants(cpu_refs)
    for cpu_id in alloc._key_by_cpu_block:
        if cpu_refs[cpu_id] == 0:
            raise InvariantError(f"paged: free CPU block {cpu_id} still carries a content key")
    if not alloc._swapped_group_ids <= set(alloc._seq_ids_by_group):
        raise InvariantError("paged: a swapped group has no sequences")
    _check_lockstep(alloc, gpu_refs)


def _check_lockstep(alloc: PagedAllocator, gpu_refs: list[int]) -> None:
    """The lockstep set's running totals against their recomputation."""
    bs = alloc.block_size
    sum_off = blocks = internal = 0
    final_internal_by_clock: dict[int, int] = {}
    residues: list[set[int]] = [set() for _ in range(bs)]
    holders_by_parent, parent_by_child = _check_pending_copies(alloc)
    for seq_id, off in alloc._off_by_seq.items():
        table = alloc._table_by_seq.get(seq_id)
        if table is None:
            raise InvariantError(f"paged: lockstep seq {seq_id} is not on the GPU")
        held = off + alloc._clock
        parent = parent_by_child.get(seq_id, seq_id)
        if held % bs and gpu_refs[table[-1]] != holders_by_parent.get(parent, 1):
            raise InvariantError(f"paged: lockstep seq {seq_id} shares its partly filled block")
        sum_off += off
        blocks += len(table)
        residues[off % bs].add(seq_id)
        target = alloc._target_by_seq[seq_id]
        rest = target % bs
        if rest and held > target - rest:
            internal += bs - rest
        elif rest:
            at = target - rest + 1 - off
            final_internal_by_clock[at] = final_internal_by_clock.get(at, 0) + bs - rest
    got = (alloc._sum_off, alloc._lockstep_blocks, alloc._lockstep_internal)
    if got != (sum_off, blocks, internal):
        raise InvariantError(
            f"paged: lockstep totals (sum of offsets, blocks, internal) {got} "
            f"!= {(sum_off, blocks, internal)}"
        )
    pending = {at: n for at, n in alloc._final_internal_by_clock.items() if n}
    if pending != final_internal_by_clock or min(pending, default=alloc._clock + 1) <= alloc._clock:
        raise InvariantError(
            f"paged: final-block internal fragmentation by clock {pending} != "
            f"{final_internal_by_clock} (clock {alloc._clock})"
        )
    if [set(r) for r in alloc._seq_ids_by_residue] != residues:
        raise InvariantError("paged: lockstep residue classes out of date")
    if alloc._num_table_blocks != sum(map(len, alloc._table_by_seq.values())):
        raise InvariantError("paged: table block total out of date")
    sizes: dict[int, int] = {}
    for group_id, members in alloc._seq_ids_by_group.items():
        if group_id not in alloc._swapped_group_ids:
            sizes[len(members)] = sizes.get(len(members), 0) + 1
    if sizes != alloc._num_groups_by_size or alloc._max_group_size != max(sizes, default=0):
        raise InvariantError(
            f"paged: groups by size {alloc._num_groups_by_size} (largest "
            f"{alloc._max_group_size}) != {sizes}"
        )


def _check_pending_copies(alloc: PagedAllocator) -> tuple[dict[int, int], dict[int, int]]:
    """A beam step's pending copies: each child shares its parent's partly filled last
    block, and the totals kept for them are their recomputation. Returns the holders of
    each such block by parent, and each child's parent."""
    bs = alloc.block_size
    holders_by_parent: dict[int, int] = {}
    parent_by_child: dict[int, int] = {}
    pending_holes = pending_internal = 0
    for group_id, forks in alloc._pending_copy.items():
        for parent, child in forks:
            off = alloc._off_by_seq.get(child)
            if (
                off is None
                or alloc._off_by_seq.get(parent) != off
                or alloc._group_by_seq.get(child) != group_id
                or alloc._group_by_seq.get(parent) != group_id
            ):
                raise InvariantError(
                    f"paged: pending copy {child} <- {parent} outside the lockstep set "
                    f"or group {group_id}"
                )
            table, parent_table = alloc._table_by_seq[child], alloc._table_by_seq[parent]
            fill = (off + alloc._clock) % bs
            if not fill or table[-1] != parent_table[-1] or len(table) != len(parent_table):
                raise InvariantError(
                    f"paged: pending copy {child} <- {parent} shares no partly filled block"
                )
            holders_by_parent[parent] = holders_by_parent.get(parent, 1) + 1
            parent_by_child[child] = parent
            pending_holes += bs - fill
            pending_internal += bs - min(bs, alloc._target_by_seq[child] - (len(table) - 1) * bs)
    if set(parent_by_child) & set(holders_by_parent) or len(parent_by_child) != alloc._num_pending:
        raise InvariantError(f"paged: pending copies {alloc._pending_copy} out of date")
    if (alloc._pending_holes, alloc._pending_internal) != (pending_holes, pending_internal):
        raise InvariantError(
            f"paged: pending copies' holes and internal fragmentation "
            f"{(alloc._pending_holes, alloc._pending_internal)} != {(pending_holes, pending_internal)}"
        )
    return holders_by_parent, parent_by_child
