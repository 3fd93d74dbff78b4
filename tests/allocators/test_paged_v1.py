"""vLLM V1's KV cache manager (``paged-v1``): stories on tiny pools, with exact block ids.

Blocks of 4 slots; block 0 is the null block. ``SYSTEM`` is an 8-token prompt segment
(two full blocks) that several requests start with.
"""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocStatus, PagedV1Allocator, PrefixCacheCounters
from pagesim.allocators.prefix_cache import prompt_block_keys
from pagesim.allocators.v1_pool import ContentKeys, own_segment_id
from pagesim.errors import AllocatorError, ConfigError

SYSTEM = (7, 8)


def v1(num_blocks, block_size=4, *, caching=True, extra_slots=0):
    return PagedV1Allocator(
        capacity_slots=num_blocks * block_size + extra_slots,
        block_size=block_size,
        is_prefix_caching=caching,
    )


def test_the_null_block_is_taken_and_the_queue_starts_in_id_order():
    alloc = v1(5)
    assert (alloc.num_total_blocks, alloc.num_usable_blocks, alloc.num_free_blocks) == (5, 4, 4)
    assert alloc.free_queue() == [1, 2, 3, 4]
    u = alloc.usage(is_blocked=False)
    assert (u.external_frag_slots, u.unused_slots) == (4, 16)  # the null block is the pool's
    with pytest.raises(ConfigError, match="smaller than two blocks"):
        v1(1)


def test_content_keys_are_the_prompt_keys_then_the_request_own_tokens():
    keys = ContentKeys((SYSTEM, (3, 5)), 13, own_segment_id(0), 4).upto(5)
    assert keys[:3] == prompt_block_keys((SYSTEM, (3, 5)), 13, 4)
    other = ContentKeys((SYSTEM, (3, 5)), 13, own_segment_id(1), 4).upto(5)
    assert keys[:3] == other[:3] and keys[3] != other[3]  # block 3 holds generated tokens
    bare = ContentKeys((), 6, own_segment_id(0), 4).upto(2)  # no segments: all its own
    assert bare != ContentKeys((), 6, own_segment_id(1), 4).upto(2)
    assert own_segment_id(0) != -1  # Python hashes -1 and -2 alike
    with pytest.raises(AllocatorError, match="segments cover 8 tokens"):
        ContentKeys((SYSTEM,), 9, own_segment_id(0), 4)


def test_hits_share_blocks_and_freed_blocks_go_to_the_tail_in_reverse(req):
    alloc = v1(6)
    first = alloc.allocate(req(0, 10, segments=(SYSTEM, (100, 2))))
    assert first.num_cached_tokens == 0 and alloc.block_table(0) == (1, 2, 3)
    second = alloc.allocate(req(1, 11, segments=(SYSTEM, (101, 3))))
    assert second.num_cached_tokens == 8 and alloc.block_table(1) == (1, 2, 4)
    assert [alloc.pool.ref_count(b) for b in range(6)] == [1, 2, 2, 1, 1, 0]  # 0: the pool's
    alloc.free(0)  # 3, 2, 1: only 3 is held by nobody now
    assert alloc.free_queue() == [5, 3]
    alloc.free(1)  # 4, 2, 1: the tail first
    assert alloc.free_queue() == [5, 3, 4, 2, 1]
    # freed blocks keep their keys: a hit takes them out of the middle of the queue
    third = alloc.allocate(req(2, 9, segments=(SYSTEM, (102, 1))))
    assert third.num_cached_tokens == 8 and alloc.block_table(2) == (1, 2, 5)
    assert alloc.free_queue() == [3, 4]
    assert alloc.prefix_cache == PrefixCacheCounters(
        hit_blocks=4, queried_blocks=6, hit_tokens=16, queried_tokens=30
    )
    alloc.check_invariants()


def test_the_last_token_is_always_computed(req):
    alloc = v1(8)
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))
    again = alloc.allocate(req(1, 8, segments=(SYSTEM,)))
    assert again.num_cached_tokens == 4  # a whole block is recomputed for the last token...
    assert alloc.block_table(1) == (1, 3)  # ...into a block of its own
    # two blocks now hold the same content: a look-up finds the first cached
    key = alloc.pool.key_of(2)
    assert key is not None and alloc.pool.key_of(3) == key and alloc.pool.lookup(key) == 2
    # a request back after a preemption, with tokens past its prompt, takes the whole prompt
    back = alloc.allocate(req(2, 8, num_tokens=10, segments=(SYSTEM,)))
    assert back.num_cached_tokens == 8 and alloc.block_table(2) == (1, 2, 4)
    alloc.check_invariants()


def test_eviction_takes_the_head_least_recently_freed_tail_first(req):
    alloc = v1(5)
    alloc.allocate(req(0, 8, segments=((1, 8),)))  # blocks 1, 2
    alloc.allocate(req(1, 8, segments=((2, 8),)))  # blocks 3, 4
    alloc.free(1)
    alloc.free(0)
    assert alloc.free_queue() == [4, 3, 2, 1]
    alloc.allocate(req(2, 4, segments=((3, 4),)))  # evicts request 1's tail, block 4
    assert alloc.block_table(2) == (4,)
    hit = alloc.allocate(req(3, 9, segments=((2, 8), (9, 1))))
    assert hit.num_cached_tokens == 4  # request 1's head survived; its tail did not
    assert alloc.block_table(3) == (3, 2, 1)  # then request 0's blocks, tail first
    assert alloc.free_queue() == []
    gone = alloc.find_cached(req(4, 9, segments=((1, 8), (9, 1))))
    assert gone == 0  # request 0's keys went with its blocks
    alloc.check_invariants()


def test_admission_counts_the_hits_that_sit_in_the_free_queue(req):
    alloc = v1(4)  # 3 usable blocks
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))
    alloc.free(0)
    r = req(1, 12, segments=(SYSTEM, (5, 4)))
    assert alloc.find_cached(r) == 8
    assert alloc.can_allocate(r) is AllocStatus.OK  # 1 new + 2 hits taken from the queue
    alloc.allocate(req(2, 1))  # takes block 3
    assert alloc.can_allocate(r) is AllocStatus.LATER  # 3 blocks, 2 free: hits included
    assert alloc.can_fit(r, 8)  # its first two blocks alone would fit
    assert alloc.can_allocate(req(3, 13)) is AllocStatus.NEVER  # 4 blocks > 3 usable


def test_chunks_take_blocks_as_they_are_computed_and_cache_them_when_full(req):
    alloc = v1(10)
    r0 = req(0, 10, segments=((1, 10),))
    assert alloc.find_cached(r0) == 0
    assert alloc.admit(r0, 3) is not None
    assert alloc.block_table(0) == (1,) and alloc.num_slots(0) == 3
    assert alloc.pool.key_of(1) is None
    assert alloc.allocate_slots(0, 3)
    assert alloc.block_table(0) == (1, 2) and alloc.pool.key_of(1) is not None
    assert alloc.pool.key_of(2) is None
    # a request admitted now hits what is cached so far
    r1 = req(1, 10, segments=((1, 10),))
    assert alloc.find_cached(r1) == 4
    assert alloc.admit(r1, 6).num_cached_tokens == 4
    assert alloc.block_table(1) == (1, 3, 4) and alloc.num_slots(1) == 10
    assert alloc.allocate_slots(0, 4)
    assert alloc.block_table(0) == (1, 2, 5)
    # two blocks with the content of block 1 of the prompt: the first cached is found
    assert alloc.pool.lookup(alloc.pool.key_of(3)) == 3 and alloc.pool.key_of(
        2
    ) == alloc.pool.key_of(3)
    alloc.check_invariants()


def test_a_failed_allocation_changes_nothing(req):
    alloc = v1(4)
    alloc.allocate(req(0, 8))
    assert alloc.admit(req(1, 9), 9) is None
    assert alloc.allocate_slots(0, 4)  # one more block: the last
    assert not alloc.allocate_slots(0, 1)
    assert alloc.num_slots(0) == 12 and alloc.block_table(0) == (1, 2, 3)
    assert not alloc.can_append_slots(0)
    with pytest.raises(AllocatorError, match="no free block"):
        alloc.append_slot(0)
    with pytest.raises(AllocatorError, match="no forks"):
        alloc.fork(0, 9)
    alloc.check_invariants()


def test_bulk_appends_open_blocks_in_sequence_id_order(req):
    alloc = v1(10)
    alloc.allocate(req(9, 4, segments=((9, 4),)))  # seq 9 admitted first
    alloc.allocate(req(7, 4, segments=((8, 4),)))
    assert alloc.block_table(9) == (1,) and alloc.block_table(7) == (2,)
    assert alloc.can_append_all()
    alloc.append_slot_all()  # both open a block: the lower id first
    assert alloc.block_table(7) == (2, 3) and alloc.block_table(9) == (1, 4)
    assert alloc.decode_totals() == (2, 10, 4)
    for _ in range(3):
        alloc.append_slot_all()
    assert alloc.num_slots(9) == 8
    # the block the appends filled holds generated tokens: keyed when its request is freed
    assert alloc.pool.key_of(4) is None
    alloc.check_invariants()
    alloc.free(9)
    assert alloc.pool.key_of(4) is not None
    assert alloc.free_queue()[-2:] == [4, 1]
    # back after a preemption (8 tokens: prompt + 4 generated), it finds its own blocks
    back = alloc.allocate(req(9, 4, num_tokens=9, seq_id=11, segments=((9, 4),)))
    assert back.num_cached_tokens == 8 and alloc.block_table(11) == (1, 4, 5)
    # a request that finished never comes back: the blocks its decodes filled stay unkeyed
    alloc.free_finished(7)
    assert alloc.pool.key_of(2) is not None and alloc.pool.key_of(3) is None
    assert alloc.free_queue()[-2:] == [3, 2]
    alloc.check_invariants()


def test_bulk_appends_need_a_free_block_per_opener(req):
    alloc = v1(5)
    alloc.allocate(req(0, 4))
    alloc.allocate(req(1, 4))
    assert alloc.can_append_all()  # two openers, two free blocks
    alloc.allocate(req(2, 1))
    assert not alloc.can_append_all()  # two openers, one free block
    assert alloc.append_all_measured(False) is None
    assert alloc.num_slots(0) == 4


def test_usage_counts_shared_blocks_once_and_the_null_block_as_the_pool_own(req):
    alloc = v1(6, extra_slots=3)  # 27 slots: 6 blocks and 3 past the last
    alloc.allocate(req(0, 8, segments=(SYSTEM,), target_len=14))
    alloc.allocate(req(1, 10, segments=(SYSTEM, (9, 2)), target_len=11))
    u = alloc.usage(is_blocked=False)
    assert u.capacity_slots == 27
    # blocks 1, 2 (8 tokens, shared) and 3 (2 tokens; 1 slot reserved, 1 past the target)
    assert (u.token_slots, u.reserved_slots, u.internal_frag_slots) == (10, 1, 1)
    assert (u.external_frag_slots, u.unused_slots, u.shared_saved_slots) == (7, 8, 8)
    alloc.free(1)
    alloc.free(0)
    blocked = alloc.usage(is_blocked=True)  # cached free blocks are free: evictable
    assert (blocked.token_slots, blocked.external_frag_slots, blocked.unused_slots) == (0, 27, 0)
    assert alloc.pool.num_cached_free_blocks == 2


def test_without_caching_nothing_is_keyed_or_hit(req):
    alloc = v1(6, caching=False)
    alloc.allocate(req(0, 8, segments=(SYSTEM,)))
    alloc.free(0)
    again = alloc.allocate(req(1, 9, segments=(SYSTEM, (1, 1))))
    assert again.num_cached_tokens == 0 and alloc.block_table(1) == (3, 4, 5)
    alloc.check_invariants()


def test_a_look_up_is_redone_once_a_bulk_append_evicts_its_hits(req):
    alloc = v1(4)  # 3 usable blocks
    alloc.allocate(req(0, 4, segments=((1, 4),)))  # block 1, keyed
    alloc.free(0)
    alloc.allocate(req(1, 4))  # block 2
    head = req(2, 5, segments=((1, 4), (9, 1)))
    assert alloc.find_cached(head) == 4
    for _ in range(5):  # the first append opens block 3, the fifth evicts block 1
        alloc.append_slot_all()
    assert alloc.block_table(1) == (2, 3, 1)
    assert alloc.find_cached(head) == 0
    assert not alloc.can_fit(head, 5)
