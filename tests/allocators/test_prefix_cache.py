"""Prefix caching stories: content keys, hits, the last block always computed, LRU eviction."""

from __future__ import annotations

from pagesim.allocators import PagedAllocator, PrefixCacheCounters, prompt_block_keys

SYSTEM = (7, 8)  # a shared 8-token system prompt = two blocks of 4


def cached(num_blocks, block_size=4):
    return PagedAllocator(
        capacity_slots=num_blocks * block_size,
        block_size=block_size,
        watermark=0.0,
        is_prefix_caching=True,
    )


def test_keys_chain_over_content_and_only_full_blocks_are_keyed():
    a = prompt_block_keys(((7, 8), (1, 5)), 13, 4)
    b = prompt_block_keys(((7, 8), (2, 5)), 13, 4)
    c = prompt_block_keys(((7, 4), (8, 4), (1, 5)), 13, 4)
    assert len(a) == 3  # the 13th token's block is partial
    assert a[:2] == b[:2] and a[2] != b[2]
    assert a[0] == c[0] and a[1] != c[1]  # different content in block 1
    # a block's key depends on everything before it, not just its own content
    assert prompt_block_keys(((3, 4), (7, 4)), 8, 4)[1] != prompt_block_keys(((7, 8),), 8, 4)[1]
    assert prompt_block_keys((), 8, 4) == []


def test_hit_shares_blocks_and_reports_cached_tokens(req):
    alloc = cached(16)
    first = alloc.allocate(req(0, 10, segments=(SYSTEM, (100, 2))))
    assert first.num_cached_tokens == 0
    second = alloc.allocate(req(1, 11, segments=(SYSTEM, (101, 3))))
    assert second.num_cached_tokens == 8
    assert alloc.block_table(0) == (0, 1, 2) and alloc.block_table(1) == (0, 1, 3)
    assert alloc.gpu.ref_count(0) == 2
    assert alloc.prefix_cache == PrefixCacheCounters(
        hit_blocks=2, queried_blocks=4, hit_tokens=8, queried_tokens=21
    )
    alloc.check_invariants()


def test_whole_prompt_never_comes_from_the_cache(req):
    alloc = cached(16)
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))
    again = alloc.allocate(req(1, 8, segments=(SYSTEM,)))
    assert again.num_cached_tokens == 4  # the last block is recomputed...
    assert alloc.block_table(1) == (0, 1)  # ...into the shared block
    # a recomputed group that already generated tokens may take every prompt block
    back = alloc.allocate(req(2, 8, num_tokens=10, segments=(SYSTEM,)))
    assert back.num_cached_tokens == 8


def test_freed_cached_blocks_stay_until_evicted_tail_first(req):
    alloc = cached(4)
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))  # blocks 0, 1 keyed
    alloc.allocate(req(1, 3))  # block 2, no key (partial)
    alloc.free(0)
    alloc.free(1)
    assert alloc.num_free_blocks == 4
    assert alloc.gpu.free_ids() == [2, 3]  # never-keyed blocks are reused first
    assert alloc.gpu.evictable_ids() == [1, 0]  # deepest first within one release
    alloc.allocate(req(2, 12))  # needs 3 blocks: 2, 3, then evicts 1
    assert alloc.block_table(2) == (2, 3, 1)
    assert alloc.gpu.evictable_ids() == [0]
    alloc.free(2)  # its three full prompt blocks are keyed too: evictable, deepest first
    assert alloc.gpu.evictable_ids() == [0, 1, 3, 2]
    hit = alloc.allocate(req(3, 9, segments=(SYSTEM, (5, 1))))
    assert hit.num_cached_tokens == 4  # block 0 survived, the old block 1 was evicted
    assert alloc.block_table(3) == (0, 1, 3)  # misses evict 1 then 3, in LRU order
    assert alloc.gpu.evictable_ids() == [2]
    alloc.check_invariants()


def test_eviction_is_least_recently_released_first(req):
    alloc = cached(6)
    alloc.allocate(req(0, 4, segments=((1, 4),)))  # block 0
    alloc.allocate(req(1, 4, segments=((2, 4),)))  # block 1
    alloc.allocate(req(2, 4, segments=((3, 4),)))  # block 2
    alloc.free(1)
    alloc.free(0)
    alloc.free(2)
    assert alloc.gpu.evictable_ids() == [1, 0, 2]
    alloc.allocate(req(3, 4, segments=((1, 4),)))  # revives block 0 (a hit)...
    alloc.free(3)  # ...and releases it again: now the most recent
    assert alloc.gpu.evictable_ids() == [1, 2, 0]
    alloc.allocate(req(4, 16))  # 3 fresh (3, 4, 5) + 1 evicted (1)
    assert alloc.block_table(4) == (3, 4, 5, 1)


def test_caching_off_shares_nothing(req):
    alloc = PagedAllocator(capacity_slots=64, block_size=4)
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))
    assert alloc.allocate(req(1, 8, segments=(SYSTEM,))).num_cached_tokens == 0
    assert alloc.block_table(1) == (2, 3)
    assert alloc.prefix_cache == PrefixCacheCounters()
