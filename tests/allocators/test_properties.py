"""Property tests: random operation sequences never leak, double free, or miscount.

After every operation: ``check_invariants()`` (reference counts = tables holding the
block, free/evictable/held partition the pool, ...), the usage breakdown sums to the
capacity (MemoryUsage checks on construction), free + held = total, and each
sequence's length matches a shadow model. The operations mix per-sequence appends
with the bulk append of every sequence (``append_slot_all``, taken when
``can_append_all`` says so, which must imply every group's ``can_append_slots``).
At the end everything is freed and the pools must be whole again.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pagesim.allocators import (
    AllocRequest,
    AllocStatus,
    ContiguousAllocator,
    PagedAllocator,
    PagedV1Allocator,
)

OPS = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 10**6), st.integers(0, 10**6)), max_size=80
)
#: every group's final length: its prompt plus this many tokens (appends stop there)
HEADROOM = 24


def _segments(pick: int, prompt_len: int) -> tuple[tuple[int, int], ...]:
    """A prompt that starts with one of three shared prefixes (or none), for cache hits."""
    prefix_len = min(prompt_len, 4 * (pick % 4))
    head = ((pick % 3, prefix_len),) if prefix_len else ()
    rest = prompt_len - prefix_len
    return head + (((100 + pick % 5, rest),) if rest else ())


class Shadow:
    """What the test believes: live sequences, their lengths, groups, and which are swapped."""

    def __init__(self) -> None:
        self.num_tokens_by_seq: dict[int, int] = {}
        self.group_by_seq: dict[int, int] = {}
        self.target_by_group: dict[int, int] = {}
        self.swapped_group_ids: set[int] = set()
        self.next_id = 0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def seqs_of(self, group_id: int) -> list[int]:
        return [s for s, g in self.group_by_seq.items() if g == group_id]

    def has_room(self, seq_ids) -> bool:
        """Every listed sequence is below its group's final length."""
        return all(
            self.num_tokens_by_seq[s] < self.target_by_group[self.group_by_seq[s]] for s in seq_ids
        )

    def on_gpu(self) -> list[int]:
        return [s for s, g in self.group_by_seq.items() if g not in self.swapped_group_ids]

    def bulk_append(self, alloc) -> None:
        """``append_slot_all`` when the allocator says it can, and every sequence has room."""
        seq_ids = self.on_gpu()
        if not alloc.can_append_all() or not self.has_room(seq_ids):
            return
        groups = {self.group_by_seq[s] for s in seq_ids}
        assert all(alloc.can_append_slots(g) for g in groups)
        alloc.append_slot_all()
        for s in seq_ids:
            self.num_tokens_by_seq[s] += 1

    def drop(self, seq_id: int) -> None:
        del self.num_tokens_by_seq[seq_id]
        group_id = self.group_by_seq.pop(seq_id)
        if not self.seqs_of(group_id):
            self.swapped_group_ids.discard(group_id)


def _check(alloc, shadow: Shadow) -> None:
    alloc.check_invariants()
    for seq_id, n in shadow.num_tokens_by_seq.items():
        assert alloc.num_slots(seq_id) == n
    targets = {s: shadow.target_by_group[g] for s, g in shadow.group_by_seq.items()}
    for is_blocked in (False, True):
        u = alloc.usage(is_blocked)
        assert u.capacity_slots == alloc.capacity_slots
    totals = alloc.decode_totals()
    on_gpu = shadow.on_gpu()
    assert totals.num_seqs == len(on_gpu)
    assert totals.num_slots == sum(shadow.num_tokens_by_seq[s] for s in on_gpu)
    if isinstance(alloc, PagedAllocator):
        assert totals.num_blocks == sum(len(alloc.block_table(s)) for s in on_gpu)
        u = alloc.usage(False)
        assert (u.token_slots, u.reserved_slots, u.internal_frag_slots) == _paged_usage_by_scan(
            alloc, shadow, targets
        )


def _paged_usage_by_scan(alloc, shadow, targets):
    """Reference: per held GPU block, filled = most any holder filled; will = most any will fill."""
    bs = alloc.block_size
    filled: dict[int, int] = {}
    will: dict[int, int] = {}
    for seq_id, n in shadow.num_tokens_by_seq.items():
        if shadow.group_by_seq[seq_id] in shadow.swapped_group_ids:
            continue
        for i, block_id in enumerate(alloc.block_table(seq_id)):
            filled[block_id] = max(filled.get(block_id, 0), min(bs, n - i * bs))
            will[block_id] = max(will.get(block_id, 0), min(bs, targets[seq_id] - i * bs))
    for block_id in alloc.pinned_block_ids:  # full, held by the pin whoever maps them
        filled[block_id] = will[block_id] = bs
    token = sum(filled.values())
    reserved = sum(will[b] - filled[b] for b in filled)
    return token, reserved, len(filled) * bs - token - reserved


def _run_paged(alloc: PagedAllocator, ops) -> Shadow:
    shadow = Shadow()
    for op, a, b in ops:
        live = sorted(shadow.num_tokens_by_seq)
        if op == 0 or not live:
            prompt_len = 1 + a % 14
            group_id = seq_id = shadow.new_id()
            target = prompt_len + HEADROOM
            r = AllocRequest(
                group_id,
                seq_id,
                prompt_len,
                prompt_len,
                _segments(b, prompt_len),
                target_len=target,
            )
            status = alloc.can_allocate(r)
            got = alloc.allocate(r)
            assert (got is not None) == (status is AllocStatus.OK)
            if got is not None:
                assert 0 <= got.num_cached_tokens < prompt_len
                shadow.num_tokens_by_seq[seq_id] = prompt_len
                shadow.group_by_seq[seq_id] = group_id
                shadow.target_by_group[group_id] = target
        elif op == 6:
            shadow.bulk_append(alloc)
        else:
            seq_id = live[a % len(live)]
            group_id = shadow.group_by_seq[seq_id]
            is_swapped = group_id in shadow.swapped_group_ids
            room = shadow.has_room(shadow.seqs_of(group_id))
            if op == 1 and not is_swapped and room and alloc.can_append_slots(group_id):
                for s in shadow.seqs_of(group_id):
                    alloc.append_slot(s)
                    shadow.num_tokens_by_seq[s] += 1
            elif op == 2 and not is_swapped:
                child = shadow.new_id()
                alloc.fork(seq_id, child)
                shadow.num_tokens_by_seq[child] = shadow.num_tokens_by_seq[seq_id]
                shadow.group_by_seq[child] = group_id
            elif op == 3:
                alloc.free(seq_id)
                shadow.drop(seq_id)
            elif op == 4 and not is_swapped and alloc.can_swap_out(group_id):
                alloc.swap_out(group_id)
                shadow.swapped_group_ids.add(group_id)
            elif op == 5 and is_swapped and alloc.can_swap_in(group_id) is AllocStatus.OK:
                alloc.swap_in(group_id)
                shadow.swapped_group_ids.discard(group_id)
        _check(alloc, shadow)
    return shadow


@settings(max_examples=200, deadline=None)
@given(
    ops=OPS,
    block_size=st.sampled_from([1, 2, 4]),
    num_blocks=st.integers(1, 24),
    num_cpu_blocks=st.integers(0, 12),
    is_prefix_caching=st.booleans(),
    watermark=st.sampled_from([0.0, 0.1]),
)
def test_paged_random_operations_keep_every_invariant(
    ops, block_size, num_blocks, num_cpu_blocks, is_prefix_caching, watermark
):
    alloc = PagedAllocator(
        capacity_slots=num_blocks * block_size + block_size - 1,
        block_size=block_size,
        watermark=watermark,
        is_prefix_caching=is_prefix_caching,
        cpu_capacity_slots=num_cpu_blocks * block_size,
    )
    shadow = _run_paged(alloc, ops)
    for seq_id in sorted(shadow.num_tokens_by_seq):
        alloc.free(seq_id)
    alloc.check_invariants()
    assert alloc.num_free_blocks == alloc.num_total_blocks
    assert alloc.num_cpu_free_blocks == alloc.num_cpu_total_blocks
    assert alloc.usage(is_blocked=False).unused_slots == num_blocks * block_size


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    block_size=st.sampled_from([1, 2, 4]),
    num_blocks=st.integers(1, 24),
    num_cpu_blocks=st.integers(0, 12),
    prefix_len=st.integers(0, 12),
    watermark=st.sampled_from([0.0, 0.1]),
)
def test_paged_random_operations_with_a_pinned_prefix_keep_every_invariant(
    ops, block_size, num_blocks, num_cpu_blocks, prefix_len, watermark
):
    """Segment 0 (one of ``_segments``' prefixes) pinned: its blocks stay held throughout."""
    num_pinned = prefix_len // block_size
    assume(num_pinned < num_blocks)
    alloc = PagedAllocator(
        capacity_slots=num_blocks * block_size + block_size - 1,
        block_size=block_size,
        watermark=watermark,
        cpu_capacity_slots=num_cpu_blocks * block_size,
        pinned_prefix=(0, prefix_len),
    )
    pins = alloc.pinned_block_ids
    assert len(pins) == num_pinned
    shadow = _run_paged(alloc, ops)
    for seq_id in sorted(shadow.num_tokens_by_seq):
        alloc.free(seq_id)
    alloc.check_invariants()
    assert alloc.pinned_block_ids == pins
    assert all(alloc.gpu.ref_count(b) == 1 for b in pins)
    assert alloc.num_free_blocks == alloc.num_total_blocks - num_pinned
    assert alloc.num_cpu_free_blocks == alloc.num_cpu_total_blocks
    u = alloc.usage(is_blocked=False)
    assert (u.token_slots, u.unused_slots) == (
        num_pinned * block_size,
        (num_blocks - num_pinned) * block_size,
    )


@settings(max_examples=200, deadline=None)
@given(
    ops=OPS,
    policy=st.sampled_from(["max", "pow2", "oracle"]),
    placement=st.sampled_from(["buddy", "first_fit", "artifact-buddy"]),
    num_granules=st.integers(1, 40),
)
def test_contiguous_random_operations_keep_every_invariant(ops, policy, placement, num_granules):
    alloc = ContiguousAllocator(
        policy=policy,
        capacity_slots=num_granules * 4 + 3,
        max_model_len=32,
        granule_slots=4,
        placement=placement,
    )
    shadow = Shadow()
    for op, a, b in ops:
        live = sorted(shadow.num_tokens_by_seq)
        if op == 0 or not live:
            prompt_len = 1 + a % 20
            group_id = seq_id = shadow.new_id()
            true_output_len = b % 13
            target = prompt_len + true_output_len
            r = AllocRequest(
                group_id,
                seq_id,
                prompt_len,
                prompt_len,
                (),
                max_num_seqs=1 + b % 3,
                target_len=target,
            )
            status = alloc.can_allocate(r, true_output_len)
            got = alloc.allocate(r, true_output_len)
            assert (got is not None) == (status is AllocStatus.OK)
            if got is not None:
                shadow.num_tokens_by_seq[seq_id] = prompt_len
                shadow.group_by_seq[seq_id] = group_id
                shadow.target_by_group[group_id] = target
        elif op == 6:
            shadow.bulk_append(alloc)
        else:
            seq_id = live[a % len(live)]
            group_id = shadow.group_by_seq[seq_id]
            room = shadow.has_room(shadow.seqs_of(group_id))
            if op in (1, 4) and room and alloc.can_append_slots(group_id):
                for s in shadow.seqs_of(group_id):
                    alloc.append_slot(s)
                    shadow.num_tokens_by_seq[s] += 1
            elif op == 2 and alloc.num_spare_regions(group_id):
                child = shadow.new_id()
                alloc.fork(seq_id, child)
                shadow.num_tokens_by_seq[child] = shadow.num_tokens_by_seq[seq_id]
                shadow.group_by_seq[child] = group_id
            elif op in (3, 5):
                alloc.free(seq_id)
                shadow.drop(seq_id)
        _check(alloc, shadow)
    for seq_id in sorted(shadow.num_tokens_by_seq):
        alloc.free(seq_id)
    alloc.check_invariants()
    assert alloc.num_free_blocks == alloc.num_total_blocks == num_granules


def _trajectory(ops) -> list:
    alloc = PagedAllocator(
        capacity_slots=64, block_size=4, is_prefix_caching=True, cpu_capacity_slots=32
    )
    shadow = _run_paged(alloc, ops)
    tables = {s: alloc.block_table(s) for s in sorted(shadow.num_tokens_by_seq)}
    return [tables, alloc.drain_transfers(), alloc.prefix_cache, alloc.gpu.evictable_ids()]


@settings(max_examples=30, deadline=None)
@given(ops=OPS)
def test_same_operations_give_identical_state(ops):
    assert _trajectory(ops) == _trajectory(ops)


def _v1_usage_by_scan(alloc: PagedV1Allocator, shadow: Shadow, targets: dict[int, int]):
    """Reference: per held block, filled = most any holder filled; will = most any will
    fill (hits are full for every holder)."""
    bs = alloc.block_size
    filled: dict[int, int] = {}
    will: dict[int, int] = {}
    for seq_id, n in shadow.num_tokens_by_seq.items():
        for i, block_id in enumerate(alloc.block_table(seq_id)):
            filled[block_id] = max(filled.get(block_id, 0), min(bs, n - i * bs))
            will[block_id] = max(will.get(block_id, 0), min(bs, targets[seq_id] - i * bs))
    token = sum(filled.values())
    reserved = sum(max(will[b], filled[b]) - filled[b] for b in filled)
    return token, reserved, len(filled) * bs - token - reserved


@settings(max_examples=200, deadline=None)
@given(
    ops=OPS,
    block_size=st.sampled_from([1, 2, 4]),
    num_blocks=st.integers(2, 24),
    is_prefix_caching=st.booleans(),
)
def test_paged_v1_random_operations_keep_every_invariant(
    ops, block_size, num_blocks, is_prefix_caching
):
    """vLLM V1's manager: admissions whole or by a first chunk (some with tokens past
    their prompt, as a preempted request comes back, some of a group freed before),
    chunks and single tokens (``allocate_slots``), bulk appends while every sequence
    is past its prompt, frees."""
    alloc = PagedV1Allocator(
        capacity_slots=num_blocks * block_size + block_size - 1,
        block_size=block_size,
        is_prefix_caching=is_prefix_caching,
    )
    shadow = Shadow()
    prompt_by_group: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
    freed: list[tuple[int, int]] = []  # (group id, tokens it held)
    for op, a, b in ops:
        live = sorted(shadow.num_tokens_by_seq)
        if op in (0, 5) or not live:
            if op == 5 and freed:
                group_id, held = freed.pop(a % len(freed))
                prompt_len, segments = prompt_by_group[group_id]
                num_tokens = max(held, prompt_len)
            else:
                group_id = shadow.new_id()
                prompt_len = 1 + a % 14
                segments = _segments(b, prompt_len)
                num_tokens = prompt_len + (b % 3 == 0) * (b % 5)
                prompt_by_group[group_id] = (prompt_len, segments)
            seq_id = shadow.new_id()
            target = num_tokens + HEADROOM
            r = AllocRequest(group_id, seq_id, prompt_len, num_tokens, segments, target_len=target)
            hit = alloc.find_cached(r)
            assert hit % block_size == 0 and 0 <= hit < num_tokens
            if b % 2:
                status = alloc.can_allocate(r)
                got = alloc.allocate(r)
                assert (got is not None) == (status is AllocStatus.OK)
                held = num_tokens
            else:
                held = hit + 1 + b % (num_tokens - hit)
                fits = alloc.can_fit(r, held)
                got = alloc.admit(r, held - hit)
                assert (got is not None) == fits
            if got is not None:
                assert got.num_cached_tokens == hit
                shadow.num_tokens_by_seq[seq_id] = held
                shadow.group_by_seq[seq_id] = group_id
                shadow.target_by_group[group_id] = target
                prompt_by_group[seq_id] = (prompt_len, segments)
        elif op == 6:
            seq_ids = shadow.on_gpu()
            past_prompt = all(shadow.num_tokens_by_seq[s] >= prompt_by_group[s][0] for s in seq_ids)
            if past_prompt:
                shadow.bulk_append(alloc)
        else:
            seq_id = live[a % len(live)]
            if op in (1, 2):
                n = 1 + b % 4
                room = (
                    shadow.target_by_group[shadow.group_by_seq[seq_id]]
                    - shadow.num_tokens_by_seq[seq_id]
                )
                if n <= room:
                    can = alloc.can_append_slots(shadow.group_by_seq[seq_id])
                    grew = alloc.allocate_slots(seq_id, n)
                    if n == 1:
                        assert grew == can
                    if grew:
                        shadow.num_tokens_by_seq[seq_id] += n
            else:
                freed.append((shadow.group_by_seq[seq_id], shadow.num_tokens_by_seq[seq_id]))
                alloc.free(seq_id)
                shadow.drop(seq_id)
        alloc.check_invariants()
        targets = {s: shadow.target_by_group[g] for s, g in shadow.group_by_seq.items()}
        for seq_id, n in shadow.num_tokens_by_seq.items():
            assert alloc.num_slots(seq_id) == n
        totals = alloc.decode_totals()
        assert totals.num_seqs == len(shadow.num_tokens_by_seq)
        assert totals.num_slots == sum(shadow.num_tokens_by_seq.values())
        assert totals.num_blocks == sum(len(alloc.block_table(s)) for s in shadow.num_tokens_by_seq)
        u = alloc.usage(False)
        assert (u.token_slots, u.reserved_slots, u.internal_frag_slots) == _v1_usage_by_scan(
            alloc, shadow, targets
        )
        assert alloc.usage(True).unused_slots == 0
    for seq_id in sorted(shadow.num_tokens_by_seq):
        alloc.free(seq_id)
    alloc.check_invariants()
    assert alloc.num_free_blocks == alloc.num_usable_blocks == num_blocks - 1
    assert alloc.usage(is_blocked=False).unused_slots == (num_blocks - 1) * block_size
