"""ContiguousAllocator stories: Orca's Max / Pow2 / Oracle reservations on tiny and paper-sized pools."""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocRequest, AllocStatus, ContiguousAllocator, MemoryUsage
from pagesim.errors import AllocatorError, ConfigError


def req(group_id, prompt_len, *, num_tokens=None, max_num_seqs=1, seq_id=None, target_len=0):
    return AllocRequest(
        group_id=group_id,
        seq_id=group_id if seq_id is None else seq_id,
        prompt_len=prompt_len,
        num_tokens=prompt_len if num_tokens is None else num_tokens,
        segments=((group_id, prompt_len),),
        max_num_seqs=max_num_seqs,
        target_len=target_len,
    )


def test_exactly_seven_max_reservations_fit_opt13b_a100_pool():
    alloc = ContiguousAllocator(policy="max", capacity_slots=15_728, max_model_len=2048)
    statuses = []
    for g in range(8):
        statuses.append(alloc.can_allocate(req(g, 100)))
        alloc.allocate(req(g, 100))
    assert statuses == [AllocStatus.OK] * 7 + [AllocStatus.LATER]
    alloc.free(3)
    assert alloc.can_allocate(req(9, 100)) is AllocStatus.OK
    alloc.check_invariants()


def test_reservation_sizes_per_policy():
    r = req(0, 100)
    make = lambda policy: ContiguousAllocator(  # noqa: E731
        policy=policy, capacity_slots=4096, max_model_len=2048
    )
    assert make("max").reservation_slots(r) == 2048
    assert make("pow2").reservation_slots(r, true_output_len=25) == 100 + 32
    assert make("pow2").reservation_slots(r, true_output_len=32) == 100 + 32
    assert make("oracle").reservation_slots(r, true_output_len=25) == 125
    # pow2 never reserves past the model's window unless the true length itself does
    assert make("pow2").reservation_slots(req(0, 1000), true_output_len=1030) == 2048
    assert make("pow2").needs_true_output_len and make("oracle").needs_true_output_len
    assert not make("max").needs_true_output_len


def test_pow2_and_oracle_refuse_without_the_true_output_len():
    alloc = ContiguousAllocator(policy="oracle", capacity_slots=4096, max_model_len=2048)
    with pytest.raises(AllocatorError, match="true output length of group 0"):
        alloc.can_allocate(req(0, 10))
    with pytest.raises(AllocatorError, match="true_output_len"):
        alloc.allocate(req(0, 10))


def test_never_later_ok_and_buddy_padding_in_usage():
    # 64 granules of 16 slots = 1024 slots; Oracle 100 + 60 = 160 slots = 10 granules -> 16 (buddy)
    alloc = ContiguousAllocator(policy="oracle", capacity_slots=1024, max_model_len=2048)
    assert alloc.can_allocate(req(0, 1000), true_output_len=100) is AllocStatus.NEVER
    targets = {0: 160, 1: 150, 2: 160, 3: 160}  # final lengths (hindsight accounting)
    for g in range(4):
        assert alloc.allocate(req(g, 100, target_len=targets[g]), true_output_len=60) is not None
    assert alloc.can_allocate(req(4, 600), true_output_len=100) is AllocStatus.LATER
    assert alloc.allocate(req(4, 600), true_output_len=100) is None
    for _ in range(10):
        alloc.append_slot(0)
    u = alloc.usage(is_blocked=True)
    assert u == MemoryUsage(
        capacity_slots=1024,
        token_slots=4 * 100 + 10,
        reserved_slots=50 + 50 + 60 + 60,
        internal_frag_slots=10,  # seq 1 stops at 150 of its 160
        external_frag_slots=4 * (256 - 160) + (1024 - 4 * 256),  # padding + free (blocked)
        unused_slots=0,
    )
    assert alloc.usage(is_blocked=False).unused_slots == 0
    alloc.check_invariants()


def test_append_past_reservation_is_an_error():
    alloc = ContiguousAllocator(policy="oracle", capacity_slots=256, max_model_len=2048)
    alloc.allocate(req(0, 10), true_output_len=2)
    alloc.append_slot(0)
    alloc.append_slot(0)
    assert not alloc.can_append_slots(0)
    with pytest.raises(AllocatorError, match="sequence 0 is full: 12 slots"):
        alloc.append_slot(0)


def test_group_reserves_one_region_per_sequence_and_fork_copies_the_prompt():
    alloc = ContiguousAllocator(policy="oracle", capacity_slots=1024, max_model_len=2048)
    alloc.allocate(req(7, 40, max_num_seqs=3, seq_id=70), true_output_len=24)  # 64 slots each
    assert alloc.heap.allocated_blocks() == {0: 4, 4: 4, 8: 4}
    assert alloc.num_spare_regions(7) == 2
    alloc.fork(70, 71)
    alloc.fork(70, 72)
    assert alloc.drain_transfers().num_copied_blocks == 2 * 3  # 40 tokens = 3 granules, twice
    assert alloc.drain_transfers().num_copied_blocks == 0
    with pytest.raises(AllocatorError, match="no spare region"):
        alloc.fork(70, 73)
    alloc.free(72)  # a dropped beam: its region stays with the group
    assert alloc.num_spare_regions(7) == 1
    alloc.fork(71, 74)
    assert alloc.num_slots(74) == 40
    for s in (70, 71, 74):
        alloc.free(s)
    assert alloc.heap.num_free_granules == 64
    alloc.check_invariants()


def test_bad_input_names_the_problem():
    with pytest.raises(ConfigError, match="smaller than one granule"):
        ContiguousAllocator(policy="max", capacity_slots=15, max_model_len=2048)
    with pytest.raises(ConfigError, match="granule_slots must be >= 1, got 0"):
        ContiguousAllocator(policy="max", capacity_slots=64, max_model_len=2048, granule_slots=0)
    with pytest.raises(ConfigError, match="placement"):
        ContiguousAllocator(policy="max", capacity_slots=64, max_model_len=2048, placement="best")
    alloc = ContiguousAllocator(policy="max", capacity_slots=4096, max_model_len=2048)
    with pytest.raises(AllocatorError, match="unknown sequence 5 \\(never allocated\\)"):
        alloc.free(5)
    alloc.allocate(req(5, 10))
    alloc.free(5)
    with pytest.raises(AllocatorError, match="unknown sequence 5 \\(already freed\\)"):
        alloc.free(5)
    with pytest.raises(AllocatorError, match="target_len >= 0"):
        alloc.allocate(req(6, 10, target_len=-1))


def test_first_fit_placement_does_not_round_to_powers_of_two():
    alloc = ContiguousAllocator(
        policy="oracle", capacity_slots=1024, max_model_len=2048, placement="first_fit"
    )
    for g in range(6):  # 10 granules each
        assert alloc.allocate(req(g, 100, target_len=160), true_output_len=60) is not None
    u = alloc.usage(is_blocked=False)
    assert u.external_frag_slots == 0
    assert u.unused_slots == 1024 - 6 * 160
