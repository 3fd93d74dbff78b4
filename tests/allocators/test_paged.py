"""PagedAllocator stories on tiny pools: exact block ids, copy-on-write, watermark answers."""

from __future__ import annotations

from functools import partial

import pytest

from pagesim.allocators import AllocStatus, MemoryUsage, PagedAllocator, Transfers
from pagesim.errors import AllocatorError, ConfigError, InvariantError


def paged(num_blocks, *, block_size=4, watermark=0.0, **kw):
    return PagedAllocator(
        capacity_slots=num_blocks * block_size, block_size=block_size, watermark=watermark, **kw
    )


def test_prompt_blocks_come_off_a_lifo_free_list(req):
    alloc = paged(8)
    alloc.allocate(req(0, 9))  # ceil(9 / 4) = 3 blocks
    alloc.allocate(req(1, 4))
    assert alloc.block_table(0) == (0, 1, 2)
    assert alloc.block_table(1) == (3,)
    alloc.free(0)  # tail first: 2, 1, 0 pushed -> 0 on top
    assert alloc.gpu.free_ids()[:3] == [0, 1, 2]
    alloc.allocate(req(2, 5))
    assert alloc.block_table(2) == (0, 1)
    assert alloc.num_free_blocks == 8 - 3
    alloc.check_invariants()


def test_new_block_only_when_the_last_is_full(req):
    alloc = paged(8)
    alloc.allocate(req(0, 3))
    alloc.append_slot(0)
    assert alloc.block_table(0) == (0,)
    alloc.append_slot(0)
    assert alloc.block_table(0) == (0, 1)
    assert alloc.num_slots(0) == 5


def test_copy_on_write_first_siblings_copy_last_writes_in_place(req):
    alloc = paged(8)
    alloc.allocate(req(0, 6, seq_id=10))  # [0, 1*], block 1 holds 2 of 4
    alloc.fork(10, 11)
    alloc.fork(10, 12)
    assert alloc.gpu.ref_count(1) == 3
    alloc.append_slot(11)  # copies 1 -> 2
    alloc.append_slot(10)  # copies 1 -> 3
    alloc.append_slot(12)  # last holder: in place
    assert [alloc.block_table(s) for s in (10, 11, 12)] == [(0, 3), (0, 2), (0, 1)]
    assert alloc.gpu.ref_count(0) == 3 and alloc.gpu.ref_count(1) == 1
    assert alloc.drain_transfers() == Transfers(num_copied_blocks=2)
    assert alloc.drain_transfers() == Transfers()
    alloc.check_invariants()


def test_fork_on_a_full_last_block_opens_new_blocks_without_copies(req):
    alloc = paged(8)
    alloc.allocate(req(0, 4, seq_id=10))
    alloc.fork(10, 11)
    alloc.append_slot(10)
    alloc.append_slot(11)
    assert alloc.block_table(10) == (0, 1) and alloc.block_table(11) == (0, 2)
    assert alloc.drain_transfers().num_copied_blocks == 0


def test_watermark_answers_follow_vllm_v0(req):
    alloc = paged(100, watermark=0.05)  # watermark_blocks = 5
    assert alloc.watermark_blocks == 5
    assert alloc.can_allocate(req(0, 4 * 96)) is AllocStatus.NEVER  # 100 - 96 < 5
    assert alloc.can_allocate(req(0, 4 * 95)) is AllocStatus.OK  # 100 - 95 >= 5
    alloc.allocate(req(0, 4 * 90))
    assert alloc.can_allocate(req(1, 4 * 5)) is AllocStatus.OK  # 10 - 5 >= 5
    assert alloc.can_allocate(req(1, 4 * 6)) is AllocStatus.LATER
    assert alloc.allocate(req(1, 4 * 6)) is None
    # appends ignore the watermark: the group can grow into the last free blocks
    alloc.allocate(req(2, 4 * 5))
    for _ in range(4 * 5):
        alloc.append_slot(2)
    assert alloc.num_free_blocks == 0
    assert not alloc.can_append_slots(2)
    with pytest.raises(AllocatorError, match="no free block for sequence 2"):
        alloc.append_slot(2)


def test_can_append_slots_needs_a_block_per_running_sequence(req):
    alloc = paged(4)
    alloc.allocate(req(0, 9, seq_id=10))  # 3 blocks, 1 free
    assert alloc.can_append_slots(0)
    alloc.fork(10, 11)
    assert not alloc.can_append_slots(0)  # 2 sequences, 1 free block


def test_usage_counts_shared_blocks_once_and_splits_the_last_block(req):
    alloc = paged(8)
    alloc.allocate(req(0, 6, seq_id=10, target_len=20))  # blocks 0 (full), 1 (2 of 4)
    alloc.fork(10, 11)
    alloc.allocate(req(1, 3, target_len=3))  # block 2 (3 of 4)
    u = alloc.usage(is_blocked=False)
    assert u == MemoryUsage(
        capacity_slots=32,
        token_slots=4 + 2 + 3,
        reserved_slots=2,  # block 1: the forks fill it to 4
        internal_frag_slots=1,  # block 2: seq 1 stops at 3
        external_frag_slots=0,
        unused_slots=5 * 4,
        shared_saved_slots=2 * 4,  # seqs 10 and 11 share blocks 0 and 1
    )
    blocked = alloc.usage(is_blocked=True)
    assert (blocked.external_frag_slots, blocked.unused_slots) == (20, 0)


def test_pool_not_a_multiple_of_the_block_size_counts_the_rest_as_external():
    alloc = PagedAllocator(capacity_slots=30, block_size=8)
    assert alloc.num_total_blocks == 3
    assert alloc.usage(is_blocked=False).external_frag_slots == 6


def test_bad_input_names_the_problem(req):
    with pytest.raises(ConfigError, match="block_size must be >= 1, got 0"):
        PagedAllocator(capacity_slots=64, block_size=0)
    with pytest.raises(ConfigError, match="smaller than one block"):
        PagedAllocator(capacity_slots=15, block_size=16)
    alloc = paged(4)
    with pytest.raises(AllocatorError, match="unknown sequence 3 \\(never allocated\\)"):
        alloc.free(3)
    alloc.allocate(req(3, 2))
    alloc.free(3)
    with pytest.raises(AllocatorError, match="unknown sequence 3 \\(already freed\\)"):
        alloc.free(3)
    with pytest.raises(AllocatorError, match="num_tokens"):
        alloc.can_allocate(req(4, 0))
    alloc.allocate(req(5, 2))
    with pytest.raises(AllocatorError, match="sequence 5 is already allocated"):
        alloc.allocate(req(6, 2, seq_id=5))
    with pytest.raises(AllocatorError, match="child sequence 5 already exists"):
        alloc.fork(5, 5)
    with pytest.raises(AllocatorError, match="target_len >= 0"):
        alloc.allocate(req(7, 2, target_len=-1))


def test_usage_reports_what_sharing_saves(req):
    """Fork a 9-token prompt (3 blocks of 4) twice: 3 sequences hold 9 blocks logically,
    3 physically, so sharing saves 6 blocks = 24 slots. A copy-on-write append turns one
    shared block into a private one and the saving drops by one block."""
    alloc = paged(16, block_size=4)
    alloc.allocate(req(0, 9, max_num_seqs=3, target_len=12))
    assert alloc.usage(False).shared_saved_slots == 0
    alloc.fork(0, 1)
    alloc.fork(0, 2)
    usage = alloc.usage(False)
    assert usage.shared_saved_slots == 6 * 4
    assert usage.held_slots == 3 * 4
    alloc.append_slot(1)  # the shared last block is copied for sequence 1
    assert alloc.usage(False).shared_saved_slots == 5 * 4
    alloc.free(2)
    alloc.free(1)
    assert alloc.usage(False).shared_saved_slots == 0


def test_bulk_append_is_per_sequence_append_for_every_sequence(req):
    """append_slot_all has the effect of append_slot on every sequence: the same slots,
    block counts, copies and usage, with forks (exact sequences) among lockstep ones."""

    def build():
        alloc = paged(32, block_size=4)
        alloc.allocate(req(0, 5, target_len=13))
        alloc.allocate(req(1, 8, seq_id=10, max_num_seqs=2, target_len=20))
        alloc.allocate(req(2, 3, target_len=6))
        alloc.fork(10, 11)  # block 1 of seq 10 is full: both stay in lockstep
        alloc.append_slot(10)
        alloc.append_slot(11)
        alloc.fork(11, 12)  # a partly filled shared block: 11 and 12 become exact
        return alloc

    bulk, each = build(), build()
    assert not bulk.is_lockstep(11) and not bulk.is_lockstep(12) and bulk.is_lockstep(0)
    seqs = (0, 10, 11, 12, 2)
    for _ in range(3):
        assert bulk.can_append_all()
        bulk.append_slot_all()
        for s in seqs:
            each.append_slot(s)
        for alloc in (bulk, each):
            alloc.check_invariants()
        assert [bulk.num_slots(s) for s in seqs] == [each.num_slots(s) for s in seqs]
        assert [len(bulk.block_table(s)) for s in seqs] == [len(each.block_table(s)) for s in seqs]
        assert bulk.usage(False) == each.usage(False)
        assert bulk.decode_totals() == each.decode_totals()
        assert bulk.drain_transfers() == each.drain_transfers()
    assert all(bulk.is_lockstep(s) for s in seqs)
    # only seq 2 (6 of 6 tokens) holds its final block: 2 of its 4 slots are never filled
    assert bulk.usage(False).internal_frag_slots == 2


def test_measured_bulk_append_is_the_four_calls_it_fuses(req):
    """append_all_measured equals can_append_all + append_slot_all + decode_totals +
    usage_slots, step by step through block openings, final blocks and a full pool."""

    def build():
        alloc = paged(12, block_size=4)
        alloc.allocate(req(0, 5, target_len=14))
        alloc.allocate(req(1, 8, target_len=60))
        alloc.allocate(req(2, 3, target_len=11))  # final blocks open at ticks 6 and 8
        return alloc

    fused, plain = build(), build()
    internal = []
    for _ in range(40):
        is_blocked = fused.num_free_blocks % 2 == 0
        measured = fused.append_all_measured(is_blocked)
        if not plain.can_append_all():
            assert measured is None
            break
        plain.append_slot_all()
        assert measured == (*plain.decode_totals(), plain.usage_slots(is_blocked))
        assert [fused.block_table(s) for s in (0, 1, 2)] == [
            plain.block_table(s) for s in (0, 1, 2)
        ]
        fused.check_invariants()
        internal.append(measured[3][2])
    else:
        raise AssertionError("the pool never filled up")
    assert internal == [0, 0, 0, 0, 0, 1, 1, 3]  # the final blocks' never-filled slots


def test_measured_bulk_append_leaves_copies_and_forks_to_the_step_path(req):
    """With a fork whose last block is shared (an exact sequence, whose append copies),
    the fused call changes nothing and says None: the copy belongs in a step's plan."""
    alloc = paged(16, block_size=4)
    alloc.allocate(req(0, 5, seq_id=0, max_num_seqs=2, target_len=9))
    alloc.fork(0, 1)
    before = (alloc.usage_slots(False), alloc.decode_totals(), alloc.block_table(1))
    assert alloc.can_append_all()
    assert alloc.append_all_measured(False) is None
    assert (alloc.usage_slots(False), alloc.decode_totals(), alloc.block_table(1)) == before
    alloc.append_slot_all()  # the per-step path: one copy, then every sequence is lockstep
    assert alloc.has_pending_transfers()
    assert alloc.append_all_measured(False) is None  # the copy is not drained yet
    assert alloc.drain_transfers().num_copied_blocks == 1
    assert not alloc.has_pending_transfers()
    assert alloc.append_all_measured(False) is not None


def test_copying_bulk_append_is_the_five_calls_it_fuses(req):
    """append_all_copying (the step append_all_measured leaves: forks appending into a
    shared last block) equals can_append_all + append_slot_all + decode_totals +
    usage_slots + the copies drain_transfers gives; with a copy already waiting to be
    drained, or a pool too small for the appends, it says None and changes nothing."""

    def build(num_blocks: int = 16):
        alloc = paged(num_blocks, block_size=4)
        alloc.allocate(req(0, 5, seq_id=0, max_num_seqs=3, target_len=12))
        alloc.allocate(req(1, 7, seq_id=5, target_len=9))
        alloc.free_and_fork([], [(0, 1), (0, 2)])  # three sequences share block 1 (1 of 4)
        return alloc

    fused, plain = build(), build()
    measured = fused.append_all_copying(True)
    assert plain.can_append_all()
    plain.append_slot_all()
    copies = plain.drain_transfers().num_copied_blocks
    assert copies == 2  # two of the three sharers copy, the last writes in place
    assert measured == (*plain.decode_totals(), plain.usage_slots(True), copies)
    assert [fused.block_table(s) for s in (0, 1, 2, 5)] == [
        plain.block_table(s) for s in (0, 1, 2, 5)
    ]
    assert not fused.has_pending_transfers()
    fused.check_invariants()

    waiting = build()
    waiting.append_slot(1)  # a copy not drained yet
    before = ([waiting.block_table(s) for s in (0, 1, 2, 5)], waiting.usage_slots(False))
    assert waiting.append_all_copying(False) is None
    assert ([waiting.block_table(s) for s in (0, 1, 2, 5)], waiting.usage_slots(False)) == before
    tight = build(num_blocks=6)  # 2 free: the 2 copies would leave none for the group of 3
    assert not tight.can_append_all()
    before = ([tight.block_table(s) for s in (0, 1, 2, 5)], tight.usage_slots(False))
    assert tight.append_all_copying(False) is None
    assert ([tight.block_table(s) for s in (0, 1, 2, 5)], tight.usage_slots(False)) == before


def test_take_many_is_repeated_take():
    from pagesim.allocators.block_pool import BlockPool

    one, many = BlockPool(10), BlockPool(10)
    for pool in (one, many):
        pool.decref_all([pool.take() for _ in range(6)][::2])  # holes in the stack
    assert [one.take() for _ in range(7)] == many.take_many(7)
    assert [one.ref_count(b) for b in range(10)] == [many.ref_count(b) for b in range(10)]
    assert one.free_ids() == many.free_ids()
    with pytest.raises(AllocatorError, match="out of blocks"):
        many.take_many(1)


@pytest.mark.parametrize("is_caching", [False, True])
def test_take_onto_is_repeated_take(is_caching):
    """take_onto appends to each list what take() would give it, in order, also when
    the stack runs short and cached blocks are evicted; an empty pool raises."""
    from pagesim.allocators.block_pool import BlockPool

    def build() -> BlockPool:
        pool = BlockPool(10, is_caching=is_caching)
        held = [pool.take_keyed(100 + i, 16)[0] if is_caching else pool.take() for i in range(6)]
        pool.decref_all(held[::2])  # holes in the stack (cached blocks: evictable)
        return pool

    one, onto = build(), build()
    for n in (1, 3, 3):  # the last call reaches past the stack when caching
        expected = [[i] for i in range(n)]
        for table in expected:
            table.append(one.take())
        tables = [[i] for i in range(n)]
        onto.take_onto(tables, n)
        assert tables == expected
        assert [one.ref_count(b) for b in range(10)] == [onto.ref_count(b) for b in range(10)]
        assert (one.free_ids(), one.evictable_ids()) == (onto.free_ids(), onto.evictable_ids())
        assert one.num_free_blocks == onto.num_free_blocks
        onto.check_invariants([onto.ref_count(b) for b in range(10)])
    with pytest.raises(AllocatorError, match="out of blocks"):
        onto.take_onto([[], []], 2)


@pytest.mark.parametrize("is_caching", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_release_held_once_is_decref_all_from_the_tail(is_caching, seed):
    """release_held_once(table), for blocks each held once, leaves the pool as
    decref_all(reversed(table)) does: counts, stack order, evictor, free count."""
    import random

    from pagesim.allocators.block_pool import BlockPool

    rng = random.Random(seed)
    pools = [BlockPool(48, is_caching=is_caching) for _ in range(2)]
    tables: list[list[int]] = [[] for _ in range(6)]
    for depth in range(40):  # tables grow in turns, so their ids interleave
        table = rng.choice(tables)
        key = 1000 + depth if is_caching and rng.random() < 0.3 else None
        ids = {p.take_keyed(key, 16 * len(table) + 16)[0] if key else p.take() for p in pools}
        assert len(ids) == 1
        table.append(ids.pop())
    rng.shuffle(tables)
    once, each = pools
    for table in tables:
        once.release_held_once(table)
        each.decref_all(reversed(table))
        assert [once.ref_count(b) for b in range(48)] == [each.ref_count(b) for b in range(48)]
        assert (once.free_ids(), once.evictable_ids()) == (each.free_ids(), each.evictable_ids())
        assert once.num_free_blocks == each.num_free_blocks
    once.check_invariants([0] * 48)


def test_append_costs_are_what_group_by_group_appends_ask_and_take(req):
    """Per group: the free blocks can_append_slots asks for (one per sequence) and the
    blocks its appends open; None where an append could copy or a pool caches."""
    alloc = paged(32, block_size=4)
    alloc.allocate(req(0, 4, seq_id=0, max_num_seqs=2, target_len=40))  # full last block
    alloc.fork(0, 1)  # shares only full blocks: both stay lockstep
    alloc.allocate(req(1, 6, seq_id=2, target_len=40))
    alloc.allocate(req(2, 8, seq_id=3, target_len=40))
    costs = alloc.append_costs([0, 1, 2])
    free = alloc.num_free_blocks
    for group_id, seqs in ((0, (0, 1)), (1, (2,)), (2, (3,))):
        assert alloc.can_append_slots(group_id)
        before = alloc.num_free_blocks
        for seq_id in seqs:
            alloc.append_slot(seq_id)
        assert costs[group_id] == (len(seqs), before - alloc.num_free_blocks)
    assert costs == [(2, 2), (1, 0), (1, 1)] and alloc.num_free_blocks == free - 3
    alloc.fork(2, 4)  # 7 of 8 slots: a shared partly filled block, an exact sequence
    assert alloc.append_costs([0, 1, 2]) is None
    cached = paged(32, block_size=4, is_prefix_caching=True)
    cached.allocate(req(0, 4, target_len=40))
    assert cached.append_costs([0]) is None


def _state(alloc, seq_ids):
    """Everything a caller can see of a paged allocator, and its running totals."""
    return (
        [(alloc.block_table(s), alloc.num_slots(s), alloc.is_lockstep(s)) for s in seq_ids],
        alloc.gpu.free_ids(),
        alloc.gpu.evictable_ids(),
        [alloc.gpu.ref_count(b) for b in range(alloc.num_total_blocks)],
        alloc.usage(False),
        alloc.decode_totals(),
        alloc.can_append_all(),
        alloc._num_groups_by_size,
        alloc._max_group_size,
    )


@pytest.mark.parametrize("seed", range(12))
def test_free_and_fork_is_the_frees_then_the_forks(req, seed):
    """Random beam steps on three groups (a pool with and without a prefix cache): one
    free_and_fork call per step leaves the same tables, free list, lockstep and exact
    sets, usage and totals as free() and fork() one by one, through bulk and single
    appends (copies, final blocks) or none in between."""
    import random

    rnd = random.Random(seed)
    caching = seed % 2 == 1
    fused = paged(96, block_size=4, is_prefix_caching=caching)
    plain = paged(96, block_size=4, is_prefix_caching=caching)
    beams: dict[int, list[int]] = {}
    next_id = 0
    for group_id in range(3):
        prompt = rnd.randint(1, 9)
        for alloc in (fused, plain):
            alloc.allocate(
                req(group_id, prompt, seq_id=next_id, max_num_seqs=4, target_len=prompt + 23)
            )
        beams[group_id] = [next_id]
        next_id += 1
    for step in range(28):
        for group_id, seqs in beams.items():
            width = rnd.choice((2, 4)) if len(seqs) == 1 else len(seqs)
            parents = [rnd.randrange(len(seqs)) for _ in range(width)]
            counts = [parents.count(i) for i in range(len(seqs))]
            freed = [s for s, c in zip(seqs, counts, strict=True) if not c]
            forks, kept = [], []
            for s, c in zip(seqs, counts, strict=True):
                if c:
                    kept.append(s)
                for _ in range(c - 1):
                    forks.append((s, next_id))
                    kept.append(next_id)
                    next_id += 1
            fused.free_and_fork(freed, forks)
            for s in freed:
                plain.free(s)
            for parent, child in forks:
                plain.fork(parent, child)
            beams[group_id] = kept
        live = [s for seqs in beams.values() for s in seqs]
        for alloc in (fused, plain):
            if step % 5 == 4:  # no append (a prefill step): the next step frees exact ones
                pass
            elif step % 3 == 2 or not alloc.can_append_all():
                for s in live:
                    alloc.append_slot(s)
            else:
                alloc.append_slot_all()
            alloc.check_invariants()
        assert _state(fused, live) == _state(plain, live)
        assert fused.drain_transfers() == plain.drain_transfers()


def _shape(alloc, seq_ids):
    """What ``_state`` holds, up to which free block each sequence was given: the block
    tables with blocks renamed in order of first appearance, how many tables hold each
    block, and no free list or lockstep membership."""
    names: dict[int, int] = {}
    tables = []
    for s in seq_ids:
        tables.append(tuple(names.setdefault(b, len(names)) for b in alloc.block_table(s)))
    refs = sorted(alloc.gpu.ref_count(b) for b in range(alloc.num_total_blocks))
    return (
        tables,
        [alloc.num_slots(s) for s in seq_ids],
        refs,
        alloc.num_free_blocks,
        alloc.usage(False),
        alloc.usage(True),
        alloc.decode_totals(),
        alloc.can_append_all(),
        alloc._num_groups_by_size,
    )


@pytest.mark.parametrize("seed", range(16))
def test_beam_steps_reusing_freed_ids_are_the_frees_then_the_forks(req, seed):
    """Beam steps in which each child takes a freed beam's id (what the schedulers do):
    the allocator keeps the group in the lockstep set with the shared last blocks'
    copies pending (``PagedAllocator._refork``); free() and fork() one by one make the
    sharers exact. Through bulk appends, single appends, a second beam step before an
    append, swaps and frees of whole groups, both give the same usage, totals and
    sharing, and the same copies; the fast path is taken."""
    import random

    rnd = random.Random(seed)
    caching = seed % 4 == 3  # a prefix cache takes the general path
    kw = {"is_prefix_caching": caching, "cpu_capacity_slots": 4 * 64}
    fused = paged(64, block_size=4, **kw)
    plain = paged(64, block_size=4, **kw)
    beams: dict[int, list[int]] = {}
    swapped: set[int] = set()
    next_id = 0
    next_group = 0
    took_fast_path = 0

    def admit():
        nonlocal next_id, next_group
        prompt = rnd.randint(1, 9)
        width = rnd.choice((2, 3, 4))
        for alloc in (fused, plain):
            alloc.allocate(
                req(next_group, prompt, seq_id=next_id, max_num_seqs=width, target_len=prompt + 60)
            )
        forks = [(next_id, next_id + 1 + i) for i in range(width - 1)]
        for alloc in (fused, plain):
            alloc.free_and_fork([], forks)
        beams[next_group] = [next_id] + [c for _, c in forks]
        next_id += width
        next_group += 1

    for _ in range(3):
        admit()
    for _step in range(40):
        for group_id, seqs in list(beams.items()):
            if group_id in swapped:
                continue
            parents = [rnd.randrange(len(seqs)) for _ in seqs]
            counts = [parents.count(i) for i in range(len(seqs))]
            freed = [s for s, c in zip(seqs, counts, strict=True) if not c]
            reuse = iter(freed)
            forks, kept = [], []
            for s, c in zip(seqs, counts, strict=True):
                if c:
                    kept.append(s)
                for _ in range(c - 1):
                    child = next(reuse)
                    forks.append((s, child))
                    kept.append(child)
            was_lockstep = all(fused.is_lockstep(s) for s in seqs)
            fused.free_and_fork(freed, forks)
            for s in freed:
                plain.free(s)
            for parent, child in forks:
                plain.fork(parent, child)
            if forks and was_lockstep and not caching:
                took_fast_path += all(fused.is_lockstep(s) for s in kept)
            beams[group_id] = kept
        live = [s for g, seqs in beams.items() if g not in swapped for s in seqs]
        assert _shape(fused, live) == _shape(plain, live)
        fused.check_invariants()
        move = rnd.random()
        for alloc in (fused, plain):
            if move < 0.1:  # a second beam step before any append: nothing to do here
                pass
            elif move < 0.2 and beams:
                group_id = min(beams)
                if group_id in swapped:
                    if alloc.can_swap_in(group_id) is AllocStatus.OK:
                        alloc.swap_in(group_id)
                elif alloc.can_swap_out(group_id):
                    alloc.swap_out(group_id)
            elif move < 0.3 and beams:
                group_id = max(beams)
                for s in beams[group_id][::-1]:
                    alloc.free(s)
            elif move < 0.45:
                for s in live:
                    if alloc.can_append_slots(alloc._group_by_seq[s]):
                        alloc.append_slot(s)
            elif alloc.can_append_all():
                alloc.append_slot_all()
            alloc.check_invariants()
        if 0.1 <= move < 0.2 and beams:
            group_id = min(beams)
            if plain.is_swapped(group_id):
                swapped.add(group_id)
            else:
                swapped.discard(group_id)
        elif 0.2 <= move < 0.3 and beams:
            del beams[max(beams)]
            admit()
        live = [s for g, seqs in beams.items() if g not in swapped for s in seqs]
        assert _shape(fused, live) == _shape(plain, live)
        assert fused.drain_transfers() == plain.drain_transfers()
    assert took_fast_path > 5 or caching


def test_free_and_fork_outside_one_group_or_failing_is_the_calls_one_by_one(req):
    """Sequences of two groups, a child forked from a child, a swapped-out group,
    repeated, unknown or freed ids: the same outcome, or the same error after the same
    calls took effect, as the single calls."""

    def build():
        alloc = paged(32, cpu_capacity_slots=64)
        alloc.allocate(req(0, 6, seq_id=0, max_num_seqs=4))
        alloc.allocate(req(1, 5, seq_id=1, max_num_seqs=4))
        alloc.allocate(req(2, 7, seq_id=9, max_num_seqs=4))
        alloc.fork(0, 2)
        alloc.fork(9, 10)
        alloc.swap_out(2)
        return alloc

    def one_by_one(alloc, seq_ids, forks):
        for seq_id in seq_ids:
            alloc.free(seq_id)
        for parent, child in forks:
            alloc.fork(parent, child)

    fused, plain = build(), build()
    steps = [
        ([2, 1], [(0, 3), (3, 4)]),  # two groups; a child's child
        ([2], []),  # already freed
        ([], [(0, 4)]),  # the child exists
        ([3, 3], []),  # freed twice: the first free stands
        ([0], [(0, 5)]),  # the parent was just freed
        ([], [(4, 6), (4, 6)]),  # the same child twice
        ([10], [(9, 11)]),  # a swapped-out group
        ([], [(77, 12)]),  # never allocated
        ([], []),
        ([4, 6], []),  # every sequence: the group goes
    ]
    for seq_ids, forks in steps:
        outcomes = []
        for alloc, call in ((fused, fused.free_and_fork), (plain, partial(one_by_one, plain))):
            try:
                call(seq_ids, forks)
                outcomes.append(None)
            except AllocatorError as exc:
                outcomes.append(str(exc))
            alloc.check_invariants()
        assert outcomes[0] == outcomes[1]
        live = sorted(s for g in range(3) for s in plain.seq_ids(g))
        assert [fused.seq_ids(g) for g in range(3)] == [plain.seq_ids(g) for g in range(3)]
        gpu_live = [s for s in live if not plain.is_swapped(plain._group_by_seq[s])]
        assert _state(fused, gpu_live) == _state(plain, gpu_live)
    assert fused.seq_ids(0) == () and fused.num_free_blocks == plain.num_free_blocks


def test_free_and_fork_of_every_sequence_drops_the_group(req):
    alloc = paged(16)
    alloc.allocate(req(0, 6, seq_id=0, max_num_seqs=2))
    alloc.fork(0, 1)
    alloc.free_and_fork([0, 1], [])
    assert alloc.seq_ids(0) == () and alloc.num_free_blocks == 16
    assert alloc.usage(False) == paged(16).usage(False)
    alloc.check_invariants()


def test_incref_all_is_repeated_incref():
    from pagesim.allocators.block_pool import BlockPool

    one, many = BlockPool(8, is_caching=True), BlockPool(8, is_caching=True)
    for pool in (one, many):
        pool.take_keyed(11, 4)
        block_id, _ = pool.take_keyed(12, 8)
        pool.decref_all([block_id])  # cached, evictable
        pool.take()
    for block_id in (0, 1, 2, 0):
        one.incref(block_id)
    many.incref_all([0, 1, 2, 0])
    assert [one.ref_count(b) for b in range(8)] == [many.ref_count(b) for b in range(8)]
    assert one.evictable_ids() == many.evictable_ids() == []
    with pytest.raises(InvariantError, match="free and not cached"):
        many.incref_all([3])


def test_bulk_append_after_swap_in_is_per_sequence_append(req):
    """Swapped-in sequences are exact, full last blocks or shared partly filled ones:
    the bulk append opens and copies what single appends would, and says so when the
    pool runs out."""

    def build():
        alloc = paged(8, block_size=4, cpu_capacity_slots=32)
        alloc.allocate(req(0, 8, seq_id=0, max_num_seqs=2, target_len=20))
        alloc.fork(0, 1)  # full last block: no sharing of a partly filled one
        alloc.allocate(req(1, 6, seq_id=2, max_num_seqs=2, target_len=20))
        alloc.fork(2, 3)  # shares its partly filled block 3
        for group_id in (0, 1):
            alloc.swap_out(group_id)
            alloc.swap_in(group_id)
        return alloc

    bulk, each = build(), build()
    seqs = (0, 1, 2, 3)
    assert not any(bulk.is_lockstep(s) for s in seqs)
    bulk.append_slot_all()
    for s in seqs:
        each.append_slot(s)
    bulk.check_invariants()
    assert _state(bulk, seqs) == _state(each, seqs)
    assert bulk.drain_transfers() == each.drain_transfers()
    short = build()
    short.allocate(req(2, 4, seq_id=4, target_len=8))  # 3 blocks left: 4, 0 and 1 open
    with pytest.raises(AllocatorError, match="no free block to copy shared block 3 for sequence 2"):
        short.append_slot_all()
    shorter = build()
    shorter.allocate(req(2, 8, seq_id=4, target_len=12))  # 2 blocks left: 4 and 0 open
    with pytest.raises(AllocatorError, match="no free block for sequence 1"):
        shorter.append_slot_all()


def test_copy_if_shared_takes_a_block_only_for_a_shared_one():
    from pagesim.allocators.block_pool import BlockPool

    pool = BlockPool(3)
    shared, alone = pool.take(), pool.take()
    pool.incref(shared)
    assert pool.copy_if_shared(alone) is None and pool.ref_count(alone) == 1
    assert pool.copy_if_shared(shared) == 2  # the next free block
    assert [pool.ref_count(b) for b in range(3)] == [1, 1, 1]
    pool.incref(shared)
    with pytest.raises(AllocatorError, match="out of blocks"):
        pool.copy_if_shared(shared)
    assert pool.ref_count(shared) == 2  # nothing changed


@pytest.mark.parametrize("is_caching", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_decref_all_releases_as_block_by_block(is_caching, seed):
    """decref_all (which releases a run of blocks held once in one push) leaves the
    pool as dropping one reference at a time would: the same counts, the same stack
    order, the same evictor, and the free count it keeps equal to what it holds."""
    import random

    from pagesim.allocators.block_pool import BlockPool

    rng = random.Random(seed)
    pool = BlockPool(64, is_caching=is_caching)
    held: list[int] = []
    for depth in range(40):
        if is_caching and rng.random() < 0.3:
            block_id, _ = pool.take_keyed(1000 + depth, 16 * (depth % 5 + 1))
        else:
            block_id = pool.take()
        held.append(block_id)
    for block_id in rng.sample(held, 15):  # some blocks held by a second table
        pool.incref(block_id)
        held.append(block_id)
    rng.shuffle(held)
    while held:
        size = rng.randint(1, 9)
        batch, held = held[:size], held[size:]
        counts = [pool.ref_count(b) for b in range(64)]
        stack, evictable = pool.free_ids(), pool.evictable_ids()
        released_plain, released_keyed = [], []
        for block_id in batch:  # the reference: one reference at a time
            counts[block_id] -= 1
            if counts[block_id] == 0:
                key, depth = pool.key_of(block_id)
                (released_plain if key is None else released_keyed).append((depth, block_id))
        pool.decref_all(reversed(batch[::-1]))  # any iterable
        assert [pool.ref_count(b) for b in range(64)] == counts
        assert pool.free_ids() == [b for _, b in released_plain][::-1] + stack
        released_keyed.sort(key=lambda item: -item[0])
        assert pool.evictable_ids() == evictable + [b for _, b in released_keyed]
        assert pool.num_free_blocks == len(pool.free_ids()) + len(pool.evictable_ids())
    pool.check_invariants([pool.ref_count(b) for b in range(64)])
