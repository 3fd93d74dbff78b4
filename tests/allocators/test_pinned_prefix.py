"""Pinned-prefix stories (``prefix_caching: pinned``): the prototype's shared prefix.

A pool of 8 blocks of 4 slots pins the full blocks of a 10-token prefix, segment 0:
blocks 0 and 1 (8 tokens); its last 2 tokens are each request's own to compute.
"""

from __future__ import annotations

import pytest

from pagesim.allocators import (
    AllocatorSpec,
    AllocStatus,
    PagedAllocator,
    PrefixCacheCounters,
    make_allocator,
)
from pagesim.errors import ConfigError
from pagesim.simulator.spec import run_spec_from_dict

PREFIX = (0, 10)


def pinned(num_blocks=8, prefix=PREFIX, cpu_blocks=0, watermark=0.0):
    return PagedAllocator(
        capacity_slots=num_blocks * 4,
        block_size=4,
        watermark=watermark,
        cpu_capacity_slots=cpu_blocks * 4,
        pinned_prefix=prefix,
    )


def with_prefix(own_id, own_len):
    """Segments of a prompt that starts with the shared prefix."""
    return (PREFIX, (own_id, own_len))


def test_prefix_blocks_are_held_from_the_start_as_token_states():
    alloc = pinned()
    assert alloc.pinned_block_ids == (0, 1)
    assert alloc.gpu.ref_count(0) == alloc.gpu.ref_count(1) == 1
    assert alloc.num_free_blocks == 6 and alloc.gpu.free_ids()[0] == 2
    u = alloc.usage(is_blocked=False)
    assert (u.token_slots, u.reserved_slots, u.internal_frag_slots) == (8, 0, 0)
    assert (u.unused_slots, u.shared_saved_slots) == (24, 0)
    alloc.check_invariants()


def test_requests_map_the_pinned_blocks_and_compute_only_their_own_tokens(req):
    alloc = pinned()
    a = alloc.allocate(req(0, 13, segments=with_prefix(100, 3), target_len=15))
    b = alloc.allocate(req(1, 14, segments=with_prefix(101, 4), target_len=14))
    assert a.num_cached_tokens == b.num_cached_tokens == 8
    assert alloc.block_table(0) == (0, 1, 2, 3) and alloc.block_table(1) == (0, 1, 4, 5)
    assert alloc.gpu.ref_count(0) == alloc.gpu.ref_count(1) == 3  # the pin + two tables
    assert alloc.prefix_cache == PrefixCacheCounters(
        hit_blocks=4, queried_blocks=6, hit_tokens=16, queried_tokens=27
    )
    u = alloc.usage(is_blocked=False)
    # 8 pinned + 5 + 6 own tokens; a's last block will hold 3 of 4, b's 2 of 4 (full at 14)
    assert (u.token_slots, u.reserved_slots, u.internal_frag_slots) == (19, 2, 3)
    assert u.shared_saved_slots == 2 * 8  # each request saved its own copy of the prefix
    totals = alloc.decode_totals()
    assert (totals.num_seqs, totals.num_slots, totals.num_blocks) == (2, 27, 8)
    alloc.check_invariants()


def test_pinned_blocks_are_never_freed_nor_reused(req):
    alloc = pinned()
    for group_id in range(3):
        alloc.allocate(req(group_id, 11, segments=with_prefix(100 + group_id, 1)))
    for group_id in range(3):
        alloc.free(group_id)
    assert alloc.gpu.ref_count(0) == alloc.gpu.ref_count(1) == 1
    assert alloc.num_free_blocks == 6
    assert 0 not in alloc.gpu.free_ids() and 1 not in alloc.gpu.free_ids()
    # a request without the prefix can take every unpinned block, and never a pinned one
    alloc.allocate(req(9, 24))
    assert sorted(alloc.block_table(9)) == [2, 3, 4, 5, 6, 7]
    assert alloc.num_free_blocks == 0
    alloc.check_invariants()


def test_admission_counts_only_the_requests_own_blocks(req):
    alloc = pinned()
    alloc.allocate(req(0, 16))  # 4 unshared blocks: 2 free left
    prefixed = req(1, 18, segments=with_prefix(100, 8), target_len=18)  # 5 blocks, 3 own
    assert alloc.num_pinned_tokens(prefixed) == 8
    assert alloc.can_allocate(prefixed) is AllocStatus.LATER
    alloc.free(0)
    assert alloc.can_allocate(prefixed) is AllocStatus.OK
    # the unpinned pool is 6 blocks: 7 own blocks can never fit, with the prefix or not
    assert alloc.can_allocate(req(2, 28)) is AllocStatus.NEVER
    assert alloc.can_allocate(req(3, 36, segments=with_prefix(101, 26))) is AllocStatus.NEVER
    # 8 blocks of which 2 pinned: 6 own blocks fill the unpinned pool exactly
    assert alloc.allocate(req(4, 32, segments=with_prefix(102, 22))).num_cached_tokens == 8
    assert alloc.num_free_blocks == 0
    alloc.check_invariants()


def test_which_prompts_map_the_prefix_and_how_far(req):
    alloc = pinned()
    assert alloc.num_pinned_tokens(req(0, 12, segments=((5, 12),))) == 0  # other content
    assert alloc.num_pinned_tokens(req(1, 12, segments=((0, 6), (7, 6)))) == 4  # 6 // 4 blocks
    # the last prompt token is always computed: a prompt of exactly 8 prefix tokens maps 1
    assert alloc.num_pinned_tokens(req(2, 8, segments=((0, 8),))) == 4
    # a recomputed group holding generated tokens beyond the prompt maps both blocks
    assert alloc.num_pinned_tokens(req(3, 8, num_tokens=10, segments=((0, 8),))) == 8
    got = alloc.allocate(req(3, 8, num_tokens=10, segments=((0, 8),)))
    assert got.num_cached_tokens == 8 and alloc.block_table(3) == (0, 1, 2)
    alloc.check_invariants()


def test_forks_share_the_pinned_blocks_and_copy_only_their_own(req):
    alloc = pinned()
    alloc.allocate(req(0, 13, segments=with_prefix(100, 3), max_num_seqs=2))
    alloc.fork(0, 50)
    assert alloc.gpu.ref_count(0) == 3 and alloc.gpu.ref_count(3) == 2
    alloc.append_slot(50)  # the shared partial block 3 is copied; pinned ones never are
    assert alloc.block_table(50) == (0, 1, 2, 4)
    assert alloc.drain_transfers().num_copied_blocks == 1
    alloc.free(0)
    alloc.free(50)
    assert alloc.gpu.ref_count(0) == 1
    alloc.check_invariants()


def test_a_swapped_group_takes_copies_of_the_prefix_and_comes_back_with_its_own(req):
    alloc = pinned(cpu_blocks=8)
    alloc.allocate(req(0, 13, segments=with_prefix(100, 3), max_num_seqs=2))
    alloc.fork(0, 50)
    alloc.swap_out(0)
    assert alloc.gpu.ref_count(0) == 1 and alloc.num_free_blocks == 6
    assert alloc.drain_transfers().num_swapped_out_blocks == 4  # 2 pinned + 2 own, once each
    alloc.swap_in(0)
    assert alloc.drain_transfers().num_swapped_in_blocks == 4
    assert alloc.block_table(0)[:2] == alloc.block_table(50)[:2]
    assert not set(alloc.block_table(0)) & {0, 1}  # private copies (the artifact's swap_in)
    alloc.check_invariants()


def test_pinning_errors_are_one_line_and_name_the_key():
    with pytest.raises(ConfigError, match=r"^allocator.prefix_caching: .*allowed: false, true"):
        PagedAllocator(
            capacity_slots=32, block_size=4, is_prefix_caching=True, pinned_prefix=PREFIX
        )
    with pytest.raises(ConfigError, match=r"^workload.shared_prefix_len: .* 8 blocks, .* only 8"):
        pinned(prefix=(0, 32))
    with pytest.raises(ConfigError) as bad:
        run_spec_from_dict({"allocator": {"prefix_caching": "pin"}}, "run.yaml")
    assert str(bad.value) == (
        "run.yaml: allocator.prefix_caching: 'pin' is not allowed; allowed: false, true, pinned"
    )
    assert "\n" not in str(bad.value)
    with pytest.raises(ConfigError, match="1 is not allowed"):  # YAML 1 is not true
        run_spec_from_dict({"allocator": {"prefix_caching": 1}}, "run.yaml")


def test_make_allocator_pins_the_workloads_prefix_only_when_asked():
    sizes = {"capacity_slots": 64, "cpu_capacity_slots": 0, "max_model_len": 64}
    spec = AllocatorSpec(block_size=4, prefix_caching="pinned")
    alloc = make_allocator(spec, **sizes, shared_prefix=(0, 9))
    assert alloc.pinned_block_ids == (0, 1) and not alloc.is_prefix_caching
    assert make_allocator(spec, **sizes, shared_prefix=(0, 3)).pinned_block_ids == ()
    automatic = make_allocator(AllocatorSpec(block_size=4, prefix_caching=True), **sizes,
                               shared_prefix=(0, 9))  # fmt: skip
    assert automatic.pinned_block_ids == () and automatic.is_prefix_caching
    oracle = make_allocator(AllocatorSpec(kind="oracle", prefix_caching="pinned"), **sizes,
                            shared_prefix=(0, 9))  # fmt: skip
    assert oracle.num_pinned_tokens(oracle_req()) == 0  # contiguous pools share nothing


def oracle_req():
    from pagesim.allocators import AllocRequest

    return AllocRequest(0, 0, 12, 12, ((0, 9), (1, 3)), 1, 20)
