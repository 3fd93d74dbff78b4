"""Swap stories: whole groups out and in, sharing kept, vLLM v0.4's swap-in check."""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocStatus, PagedAllocator, Transfers
from pagesim.errors import AllocatorError


def swappable(num_blocks, num_cpu_blocks, *, watermark=0.0, caching=False):
    return PagedAllocator(
        capacity_slots=num_blocks * 4,
        block_size=4,
        watermark=watermark,
        cpu_capacity_slots=num_cpu_blocks * 4,
        is_prefix_caching=caching,
    )


def test_group_swaps_out_and_in_whole_keeping_its_sharing(req):
    alloc = swappable(8, 8)
    alloc.allocate(req(0, 6, seq_id=10))  # GPU [0, 1]
    alloc.fork(10, 11)
    alloc.append_slot(11)  # CoW: 11 -> [0, 2]
    alloc.drain_transfers()
    assert alloc.can_swap_out(0)
    alloc.swap_out(0)
    assert alloc.is_swapped(0)
    assert alloc.block_table(10) == (0, 1) and alloc.block_table(11) == (0, 2)  # CPU ids
    assert alloc.cpu.ref_count(0) == 2
    assert alloc.num_free_blocks == 8 and alloc.num_cpu_free_blocks == 5
    assert alloc.drain_transfers() == Transfers(num_swapped_out_blocks=3)
    assert not alloc.can_append_slots(0)
    with pytest.raises(AllocatorError, match="swapped out"):
        alloc.append_slot(10)
    # released per table, tail first: 1 (from 10), then 2 and 0 (from 11): stack 0, 2, 1, 3, ...
    assert alloc.gpu.free_ids()[:4] == [0, 2, 1, 3]
    alloc.allocate(req(1, 4))  # takes GPU block 0 meanwhile
    assert alloc.can_swap_in(0) is AllocStatus.OK
    alloc.swap_in(0)
    assert alloc.block_table(10) == (2, 1) and alloc.block_table(11) == (2, 3)
    assert alloc.gpu.ref_count(2) == 2
    assert alloc.num_cpu_free_blocks == 8
    assert alloc.drain_transfers() == Transfers(num_swapped_in_blocks=3)
    alloc.check_invariants()


def test_can_swap_in_counts_a_block_per_sequence_and_the_watermark(req):
    alloc = swappable(10, 10, watermark=0.1)  # watermark_blocks = 1
    alloc.allocate(req(0, 12, seq_id=10))  # 3 blocks
    alloc.fork(10, 11)
    alloc.swap_out(0)
    # required = 3 distinct + 2 sequences = 5
    alloc.allocate(req(1, 16))  # 4 GPU blocks held: 6 free
    assert alloc.can_swap_in(0) is AllocStatus.OK  # 6 - 5 >= 1
    alloc.allocate(req(2, 4))
    assert alloc.can_swap_in(0) is AllocStatus.LATER  # 5 - 5 < 1
    alloc.free(2)
    assert alloc.can_swap_in(0) is AllocStatus.OK
    small = swappable(4, 10)
    small.allocate(req(0, 12, seq_id=10))
    small.fork(10, 11)
    small.swap_out(0)
    assert small.can_swap_in(0) is AllocStatus.NEVER  # 4 GPU blocks < 5


def test_swap_out_needs_room_on_the_cpu_and_free_releases_cpu_blocks(req):
    alloc = swappable(8, 2)
    alloc.allocate(req(0, 12))
    assert not alloc.can_swap_out(0)
    with pytest.raises(AllocatorError, match="cannot be swapped out"):
        alloc.swap_out(0)
    alloc.allocate(req(1, 8))
    alloc.swap_out(1)
    alloc.free(1)
    assert alloc.num_cpu_free_blocks == 2
    assert alloc.seq_ids(1) == ()
    with pytest.raises(AllocatorError, match="unknown group 1"):
        alloc.can_swap_in(1)
    alloc.check_invariants()


def test_a_block_shared_with_another_group_keeps_its_gpu_copy(req):
    alloc = swappable(8, 8, caching=True)
    alloc.allocate(req(0, 6, segments=((9, 6),)))  # [0 keyed, 1]
    alloc.allocate(req(1, 5, segments=((9, 5),)))  # [0 hit, 2]
    alloc.swap_out(0)
    assert alloc.gpu.ref_count(0) == 1  # still group 1's
    assert alloc.drain_transfers().num_swapped_out_blocks == 2
    alloc.swap_in(0)
    assert alloc.block_table(0)[0] == 0  # the keyed block revives the shared GPU copy
    assert alloc.gpu.ref_count(0) == 2
    alloc.check_invariants()
