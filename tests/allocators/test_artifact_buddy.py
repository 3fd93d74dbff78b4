"""ArtifactBuddyHeap: the artifact's chunked, LIFO buddy placement, with exact placements."""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocRequest, AllocStatus, ContiguousAllocator
from pagesim.allocators.artifact_buddy import ArtifactBuddyHeap
from pagesim.allocators.buddy import BuddyHeap
from pagesim.errors import AllocatorError, ConfigError


def test_the_pool_is_cut_into_chunks_of_the_longest_sequence():
    heap = ArtifactBuddyHeap(998, 128)  # the artifact's OPT-13B pool, 2048 / 16 = 128
    assert heap.free_blocks() == [
        *((128 * i, 128) for i in range(7)),
        (896, 64),
        (960, 32),
        (992, 4),
        (996, 2),
    ]
    assert heap.num_free_granules == 998
    assert heap.num_fit_when_empty(128) == 7
    assert heap.num_fit_when_empty(65) == 7  # rounded to 128
    assert heap.num_fit_when_empty(64) == 15
    heap.check_invariants()


def test_allocation_is_lifo_highest_chunk_first():
    heap = ArtifactBuddyHeap(998, 128)
    assert heap.alloc(128) == 768  # the last chunk pushed is taken first
    assert heap.alloc(100) == 640  # rounded to 128
    heap.free(768)
    assert heap.alloc(128) == 768  # the block freed last comes back first
    # the smallest order that holds 20 -> 32 is the 32-chunk at 960
    assert heap.alloc(20) == 960
    # no free 32 left: the 64-chunk splits, its upper half is pushed and taken next
    assert heap.alloc(32) == 896
    assert heap.alloc(32) == 928
    assert heap.num_free_granules == 998 - 2 * 128 - 3 * 32
    heap.check_invariants()


def test_merges_stop_at_a_chunk_and_the_merged_block_goes_on_top():
    heap = ArtifactBuddyHeap(256, 128)
    assert heap.alloc(64) == 128  # chunk 128 splits; 192 is pushed
    assert heap.free_blocks() == [(0, 128), (192, 64)]
    heap.free(128)  # merges with 192 into 128, but never with 0 into a 256 block
    assert heap.free_blocks() == [(0, 128), (128, 128)]
    assert heap.alloc(128) == 128
    # BuddyHeap, by contrast, merges the whole pool and places at the lowest address
    canonical = BuddyHeap(256)
    assert canonical.alloc(64) == 0
    canonical.free(0)
    assert canonical.free_blocks() == [(0, 256)]
    heap.check_invariants()


def test_a_request_larger_than_a_chunk_never_fits():
    heap = ArtifactBuddyHeap(998, 128)
    assert heap.alloc(129) is None
    assert heap.num_fit_when_empty(129) == 0 and heap.num_fit_now(129) == 0
    alloc = ContiguousAllocator(
        policy="oracle", capacity_slots=998 * 16, max_model_len=2048, placement="artifact-buddy"
    )
    r = AllocRequest(group_id=0, seq_id=0, prompt_len=2000, num_tokens=2000, segments=((0, 2000),))
    assert alloc.can_allocate(r, true_output_len=100) is AllocStatus.NEVER  # 2100 slots
    canonical = ContiguousAllocator(policy="oracle", capacity_slots=998 * 16, max_model_len=2048)
    assert canonical.can_allocate(r, true_output_len=100) is AllocStatus.OK


def test_seven_max_reservations_fit_the_artifact_pool_and_the_chunk_follows_max_model_len():
    alloc = ContiguousAllocator(
        policy="max", capacity_slots=998 * 16, max_model_len=2048, placement="artifact-buddy"
    )
    assert alloc.heap.max_block_granules == 128
    for g in range(7):
        r = AllocRequest(group_id=g, seq_id=g, prompt_len=10, num_tokens=10, segments=((g, 10),))
        assert alloc.allocate(r) is not None
    r = AllocRequest(group_id=7, seq_id=7, prompt_len=10, num_tokens=10, segments=((7, 10),))
    assert alloc.can_allocate(r) is AllocStatus.LATER
    assert [alloc.region(s).offset_granules for s in range(7)] == [768, 640, 512, 384, 256, 128, 0]
    alloc.check_invariants()
    small = ContiguousAllocator(
        policy="max", capacity_slots=4096, max_model_len=1000, placement="artifact-buddy"
    )
    assert small.heap.max_block_granules == 32  # 1000 // 16 = 62, rounded down to 32


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="at least one granule"):
        ArtifactBuddyHeap(0)
    heap = ArtifactBuddyHeap(16, 8)
    with pytest.raises(AllocatorError, match="no allocated block at offset 3"):
        heap.free(3)
    with pytest.raises(AllocatorError, match="cannot allocate 0"):
        heap.alloc(0)
