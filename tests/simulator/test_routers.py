"""Routers' choices on tiny hand-built fleet states, with exact expectations."""

from __future__ import annotations

import numpy as np
import pytest

from pagesim.allocators import make_allocator
from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError
from pagesim.simulator.fleet.routers import ROUTERS, FleetState
from pagesim.simulator.request import SequenceGroup


def router(name: str, num_replicas: int, *, seed: int = 0, user_ids=None, fallback=None):
    rng = np.random.default_rng(seed)
    fb = None
    if fallback is not None:
        fb = ROUTERS[fallback](num_replicas, rng=rng, user_ids=user_ids)
    return ROUTERS[name](num_replicas, rng=rng, user_ids=user_ids, fallback=fb)


def group(group_id: int = 0, segments=((1, 48),)) -> SequenceGroup:
    prompt_len = sum(length for _, length in segments)
    return SequenceGroup(group_id, 0.0, prompt_len, 8, 1, 1, tuple(segments))


class FakeAlloc:
    """What the state-reading routers ask an allocator."""

    def __init__(self, held_slots: int, capacity_slots: int = 100, cached: int = 0):
        self.held, self.capacity_slots, self.cached = held_slots, capacity_slots, cached

    def usage_slots(self, is_blocked: bool):
        return (self.held, 0, 0, 0, self.capacity_slots - self.held, 0)

    def cached_prefix_tokens(self, req) -> int:
        return self.cached


def state(outstanding, allocs=None) -> FleetState:
    return FleetState(list(outstanding), [None] * len(outstanding), allocs or [])


def test_round_robin_cycles_in_arrival_order():
    assert router("round-robin", 3).assign(7).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_random_draws_uniform_from_the_generator_given():
    expected = np.random.default_rng(7).integers(0, 3, size=6).tolist()
    assert router("random", 3, seed=7).assign(6).tolist() == expected


def test_least_outstanding_takes_the_fewest_in_flight_ties_to_lowest_index():
    r = router("least-outstanding", 3)
    assert r.route(group(), state([2, 0, 1])) == 1
    assert r.route(group(), state([1, 1, 1])) == 0
    assert r.route(group(), state([3, 2, 2])) == 1


def test_least_kv_takes_the_least_used_pool_ties_by_load():
    r = router("least-kv", 3)
    allocs = [FakeAlloc(50), FakeAlloc(20), FakeAlloc(30)]
    assert r.route(group(), state([0, 5, 0], allocs)) == 1
    # equal usage: fewer requests in flight wins
    allocs = [FakeAlloc(20), FakeAlloc(20), FakeAlloc(20)]
    assert r.route(group(), state([3, 2, 2], allocs)) == 1
    # usage is a share of each pool's own capacity
    allocs = [FakeAlloc(20, 100), FakeAlloc(30, 200)]
    assert router("least-kv", 2).route(group(), state([0, 0], allocs)) == 1


def test_prefix_aware_takes_the_longest_cached_prefix_ties_by_load():
    r = router("prefix-aware", 3)
    allocs = [FakeAlloc(0, cached=16), FakeAlloc(0, cached=32), FakeAlloc(0, cached=0)]
    assert r.route(group(), state([9, 9, 0], allocs)) == 1
    allocs = [FakeAlloc(0, cached=32), FakeAlloc(0, cached=32), FakeAlloc(0, cached=0)]
    assert r.route(group(), state([4, 3, 0], allocs)) == 1
    allocs = [FakeAlloc(0), FakeAlloc(0), FakeAlloc(0)]
    assert r.route(group(), state([4, 3, 3], allocs)) == 1


@pytest.mark.parametrize("kind", ["paged", "paged-v1"])
def test_cached_prefix_tokens_reads_the_pool_without_changing_it(kind):
    """A pool holding a request's two full prompt blocks answers 32 for a request with the
    same first 40 tokens (whole blocks only), 0 for one with other content."""
    alloc = make_allocator(
        AllocatorSpec(kind=kind, block_size=16, prefix_caching=True),
        capacity_slots=16 * 16,
        cpu_capacity_slots=0,
        max_model_len=2048,
        shared_prefix=(0, 0),
    )
    first = group(0, ((5, 40),))
    if kind == "paged":
        assert alloc.allocate(first.alloc_request(0)) is not None
    else:
        assert alloc.admit(first.alloc_request(0), 40) is not None
    before = alloc.usage_slots(False)
    same_start = group(1, ((5, 40), (6, 20)))
    assert alloc.cached_prefix_tokens(same_start.alloc_request(-1)) == 32
    assert alloc.cached_prefix_tokens(group(2, ((7, 60),)).alloc_request(-1)) == 0
    assert alloc.usage_slots(False) == before
    alloc.check_invariants()


def test_sticky_follows_a_users_first_request_and_falls_back_without_a_user():
    users = np.array([5, -1, 5, 7, 7, -1], dtype=np.int64)
    r = router("sticky", 2, user_ids=users, fallback="round-robin")
    # the fallback places rows 0 (user 5), 1 (none), 3 (user 7), 5 (none): 0, 1, 0, 1
    assert r.assign(6).tolist() == [0, 1, 0, 0, 0, 1]


def test_sticky_over_a_state_reading_fallback_routes_at_arrival():
    users = np.array([5, 5, 8], dtype=np.int64)
    r = router("sticky", 3, user_ids=users, fallback="least-outstanding")
    assert r.reads_state
    s = state([2, 0, 1])
    assert r.route(group(0), s) == 1
    assert r.route(group(1), state([2, 9, 0])) == 1  # user 5 stays
    assert r.route(group(2), state([2, 9, 0])) == 2


def test_sticky_refuses_a_trace_without_users():
    with pytest.raises(ConfigError, match="user_id column"):
        router("sticky", 2, user_ids=None, fallback="round-robin")
