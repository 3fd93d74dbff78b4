"""make_allocator / ALLOCATORS: sizes from the pool, and clear errors for impossible configs."""

from __future__ import annotations

import pytest

from pagesim.allocators import (
    ALLOCATORS,
    AllocatorSpec,
    ContiguousAllocator,
    PagedAllocator,
    PagedV1Allocator,
    make_allocator,
)
from pagesim.errors import ConfigError


def build(**kw):
    return make_allocator(
        AllocatorSpec(**kw), capacity_slots=15_728, cpu_capacity_slots=5_000, max_model_len=2048
    )


def test_every_registered_kind_is_built_by_its_class():
    assert {"paged", "max", "pow2", "oracle"} <= set(ALLOCATORS)  # the shipped ones
    for kind, cls in ALLOCATORS.items():
        assert isinstance(build(kind=kind), cls), kind


def test_paged_sizes_come_from_slots_and_block_size():
    alloc = build(kind="paged", block_size=16, watermark=0.01, prefix_caching=True)
    assert isinstance(alloc, PagedAllocator)
    assert alloc.num_total_blocks == 983 and alloc.num_cpu_total_blocks == 5_000 // 16
    assert alloc.watermark_blocks == 9 and alloc.is_prefix_caching
    assert alloc.capacity_slots == 15_728 and alloc.is_paged


def test_contiguous_kinds_and_placements():
    for kind in ("max", "pow2", "oracle"):
        alloc = build(kind=kind, placement="first_fit", granule_slots=8)
        assert isinstance(alloc, ContiguousAllocator)
        assert alloc.kind == kind and alloc.placement == "first_fit"
        assert alloc.num_total_blocks == 15_728 // 8 and not alloc.is_paged
    assert build(kind="pow2").needs_true_output_len
    assert not build(kind="max").needs_true_output_len


def test_impossible_pools_name_the_value():
    small = {"capacity_slots": 1024, "cpu_capacity_slots": 0, "max_model_len": 2048}
    spec = AllocatorSpec(kind="paged", block_size=32)
    with pytest.raises(
        ConfigError, match="KV pool of 31 slots is smaller than one block.*block_size=32"
    ):
        make_allocator(spec, capacity_slots=31, cpu_capacity_slots=0, max_model_len=2048)
    bad = AllocatorSpec.model_construct(kind="paged", block_size=0, granule_slots=16)
    with pytest.raises(ConfigError, match="block_size .* got 0"):
        make_allocator(bad, capacity_slots=1024, cpu_capacity_slots=0, max_model_len=2048)
    with pytest.raises(ConfigError, match="'max' reserves max_model_len = 2048 slots .* only 1024"):
        make_allocator(AllocatorSpec(kind="max"), **{**small, "max_model_len": 2048})
    assert make_allocator(AllocatorSpec(kind="pow2"), **small).capacity_slots == 1024
    unknown = AllocatorSpec.model_construct(kind="slab", block_size=16, granule_slots=16)
    with pytest.raises(ConfigError, match="unknown allocator 'slab'"):
        make_allocator(unknown, capacity_slots=1024, cpu_capacity_slots=0, max_model_len=2048)


def test_paged_v1_sizes_and_defaults():
    alloc = make_allocator(
        AllocatorSpec(kind="paged-v1"),
        capacity_slots=15_728,
        cpu_capacity_slots=0,
        max_model_len=2048,
    )
    assert isinstance(alloc, PagedV1Allocator) and alloc.is_paged
    assert (alloc.num_total_blocks, alloc.num_usable_blocks) == (983, 982)  # the null block
    assert alloc.is_prefix_caching  # vLLM V1's default
    assert not build(kind="paged-v1", prefix_caching=False).is_prefix_caching
