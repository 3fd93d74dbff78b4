"""The beam ancestry model (``schedulers/ancestry.py``, ``scheduler.beam_keep_prob``):
the parent of each of a step's ``k`` candidates is its own beam with probability p,
otherwise a uniform draw among the current beams; p = 0 is the uniform draw, on the
same random stream as before the option existed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.schedulers.ancestry import (
    UniformDraws,
    beam_parents,
    beam_plan,
    keep_line_prob,
)
from pagesim.simulator.spec import run_spec_from_dict


def draws(seed: int, keep_prob: float, num_beams: int = 4, beam_width: int = 4, steps: int = 50):
    rng = np.random.default_rng(seed)
    return np.stack([beam_parents(rng, num_beams, beam_width, keep_prob) for _ in range(steps)])


def test_the_same_seed_gives_the_same_parents_and_another_seed_others():
    assert np.array_equal(draws(7, 0.4), draws(7, 0.4))
    assert not np.array_equal(draws(7, 0.4), draws(8, 0.4))


def test_keep_prob_zero_is_the_uniform_draws_exact_stream():
    rng = np.random.default_rng(3)
    uniform = np.stack([rng.integers(0, 4, size=4) for _ in range(50)])
    assert np.array_equal(draws(3, 0.0), uniform)


def test_keep_prob_one_keeps_every_line_and_the_first_step_forks_the_prompt():
    assert np.array_equal(draws(5, 1.0), np.tile(np.arange(4), (50, 1)))
    # one beam (just after the prompt), k slots: every slot continues it
    assert np.array_equal(draws(5, 0.7, num_beams=1), np.zeros((50, 4), dtype=np.int64))


@pytest.mark.parametrize("keep_prob", [0.0, 0.3, 0.8])
def test_parent_frequencies_match_the_model(keep_prob):
    k, steps = 4, 40_000
    parents = draws(11, keep_prob, num_beams=k, beam_width=k, steps=steps)
    own = (1 - keep_prob) / k + keep_prob
    other = (1 - keep_prob) / k
    expected = np.full((k, k), other)
    np.fill_diagonal(expected, own)
    # observed[i, j]: how often slot i's parent is beam j
    observed = np.stack([np.bincount(parents[:, i], minlength=k) for i in range(k)]) / steps
    tol = 5 * np.sqrt(expected * (1 - expected) / steps)
    assert np.all(np.abs(observed - expected) <= tol), (observed, expected)
    # beam j continues its own line when it is the parent of at least one slot
    kept = np.mean([np.any(parents == j, axis=1).mean() for j in range(k)])
    p_kept = keep_line_prob(keep_prob, k)
    assert abs(kept - p_kept) <= 5 * np.sqrt(p_kept * (1 - p_kept) / steps)


@pytest.mark.parametrize(("keep_prob", "k"), [(0.0, 2), (0.25, 3), (0.6, 4)])
def test_keep_line_prob_is_the_exact_enumeration(keep_prob, k):
    def slot_prob(slot: int, parent: int) -> float:
        return keep_prob * (slot == parent) + (1 - keep_prob) / k

    exact = sum(
        np.prod([slot_prob(i, p) for i, p in enumerate(choice)])
        for choice in itertools.product(range(k), repeat=k)
        if 0 in choice
    )
    assert keep_line_prob(keep_prob, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "often"])
def test_bad_keep_prob_is_one_line_naming_the_key(bad):
    with pytest.raises(ConfigError) as info:
        run_spec_from_dict({"scheduler": {"beam_keep_prob": bad}})
    message = str(info.value)
    assert "scheduler.beam_keep_prob" in message
    assert "\n" not in message


def saved_frac(keep_prob: float, seed: int = 0) -> float:
    spec = run_spec_from_dict(
        {
            "workload": {"name": "alpaca-like", "num_requests": 120, "beam_width": 4},
            "arrivals": {"rate_req_s": 4.0},
            "hardware": {"kv_slots": 15728},
            "scheduler": {"beam_keep_prob": keep_prob},
            "seed": seed,
            "check_invariants": True,
        }
    )
    return simulate(spec).extra["mem_sharing_saved_frac"]


def test_beams_that_keep_their_lines_share_less_and_runs_repeat():
    saved = [saved_frac(p) for p in (0.0, 0.5, 1.0)]
    assert saved[0] > saved[1] > saved[2] > 0  # the prompt stays shared even at p = 1
    assert saved_frac(0.5) == saved[1]


@pytest.mark.parametrize("seed", range(6))
def test_one_call_for_several_groups_draws_what_one_call_each_would(seed):
    """numpy fills ``integers(0, k, size)`` one value at a time from the generator, so
    one call of groups x width values for consecutive groups with k beams each gives
    the values and the generator state of one call per group, for every k and width,
    and whichever 32-bit half the generator holds; k = 1 consumes nothing."""
    rnd = np.random.default_rng(1000 + seed)
    shapes = zip(rnd.integers(1, 10, 80), rnd.integers(1, 9, 80), strict=True)
    plan = [(int(k), int(w)) for k, w in shapes]
    plan.sort(key=lambda kw: (kw[0] + kw[1]) % 3)  # runs of one shape, and shapes that change
    each, batched = np.random.default_rng(seed), np.random.default_rng(seed)
    for rng in (each, batched):
        rng.integers(0, 3, size=seed % 2)  # an odd draw leaves half of a 64-bit value
    one_by_one = [each.integers(0, k, size=w).tolist() for k, w in plan]
    together = []
    for (k, w), run in itertools.groupby(plan):
        values = batched.integers(0, k, size=len(list(run)) * w).tolist()
        together += [list(row) for row in zip(*[iter(values)] * w, strict=True)]
    assert together == one_by_one
    assert batched.bit_generator.state == each.bit_generator.state


def generator_used(sched, seed: int) -> dict:
    """The state a generator seeded ``seed`` would have after the scheduler's draws: its
    own when it draws directly (``beam_keep_prob`` > 0), else one that gave out the
    32-bit values the uniform draws used (it reads its generator ahead)."""
    if sched._beam_keep_prob:
        return sched.rng.bit_generator.state
    rng = np.random.default_rng(seed)
    rng.integers(0, 2**32, size=sched._uniform.num_taken)
    return rng.bit_generator.state


@pytest.mark.parametrize("seed", range(6))
def test_uniform_draws_are_the_values_of_the_calls(seed):
    """``UniformDraws.integers(n, size)`` against ``rng.integers(0, n, size)`` calls on a
    generator with the same seed: ranges that never reject (powers of two), ones that
    reject rarely (3, 5, 7) or often (about 2 ** 31: half the draws), and one value;
    sizes odd and even; after a draw that left half of a 64-bit value buffered; chunks
    of one value and larger. The values match and ``num_taken`` is what the calls used."""
    rnd = np.random.default_rng(100 + seed)
    calls = np.random.default_rng(seed)
    ahead = np.random.default_rng(seed)
    for rng in (calls, ahead):
        rng.integers(0, 10, size=seed % 3)  # 1 leaves half of a 64-bit value
    draws = UniformDraws(ahead, chunk=int(rnd.choice([1, 7, 4096])))
    ranges = [1, 2, 3, 4, 5, 7, 64, 1000, 2**31 + 11, 2**32 - 5]
    for _ in range(400):
        n = int(rnd.choice(ranges))
        size = int(rnd.integers(0, 10))
        assert draws.integers(n, size) == calls.integers(0, n, size=size).tolist()
    used = np.random.default_rng(seed)
    used.integers(0, 10, size=seed % 3)
    used.integers(0, 2**32, size=draws.num_taken)
    assert used.bit_generator.state == calls.bit_generator.state
    with pytest.raises(ValueError, match="1 to 2\\*\\*32 - 1 values"):
        draws.integers(2**32, 1)


def test_the_scheduler_plans_each_beam_step_ahead_from_the_draw_its_own_call_would_make():
    """``Scheduler._draw_beam_parents``: the groups that take a beam step after this
    token (beam search, not finished, more than one beam) get the plan of the parents
    one ``rng.integers(0, beams, size=width)`` call each would draw, in batch order."""
    from pagesim.allocators import PagedAllocator
    from pagesim.simulator.request import SequenceGroup
    from pagesim.simulator.schedulers import SCHEDULERS
    from pagesim.simulator.spec import SchedulerSpec

    shapes = [  # (beams, width, tokens left)
        (4, 4, 9),
        (4, 4, 1),
        (1, 4, 9),
        (3, 3, 5),
        (3, 3, 2),
        (4, 4, 3),
        (1, 1, 9),
        (2, 6, 4),
        (2, 3, 4),
        (6, 6, 5),
    ]
    groups = []
    for group_id, (beams, width, left) in enumerate(shapes):
        group = SequenceGroup(group_id, 0.0, 8, 10, 1, width, ())
        group.seq_ids = list(range(10 * group_id, 10 * group_id + beams))
        group.num_generated = 10 - left
        groups.append(group)
    sched = SCHEDULERS["vllm"](
        SchedulerSpec(),
        PagedAllocator(capacity_slots=1024),
        max_model_len=64,
        rng=np.random.default_rng(5),
    )
    sched._draw_beam_parents([(1, g.group_id, g) for g in groups])
    rng = np.random.default_rng(5)
    expected = {
        g.group_id: beam_plan(
            len(g.seq_ids), rng.integers(0, len(g.seq_ids), size=g.beam_width).tolist()
        )
        for g in groups
        if g.beam_width > 1 and len(g.seq_ids) > 1 and g.num_generated + 1 < g.output_len
    }
    assert sorted(expected) == [0, 3, 4, 5, 7, 8, 9]  # 1: its last token; 2, 6: one beam
    assert {g.group_id: plan for g, plan in sched._beam_plan_by_group.items()} == expected
    assert set(sched._beam_plans) == {(4, 4), (3, 3), (2, 6), (2, 3)}  # 6 ** 6 outcomes: not kept
    assert generator_used(sched, 5) == rng.bit_generator.state


def test_a_beam_plan_frees_the_unchosen_and_forks_the_chosen_again():
    assert beam_plan(4, [2, 0, 2, 2]) == ((1, 3), ((0, 0), (2, 2)))
    assert beam_plan(4, [3, 1, 0, 2]) == ((), ((0, 0), (1, 0), (2, 0), (3, 0)))
    assert beam_plan(1, [0, 0, 0]) == ((), ((0, 2),))


@pytest.mark.parametrize("keep_prob", [0.0, 0.5])
def test_each_beam_step_consumes_the_generator_as_one_draw_each(keep_prob):
    """Through the scheduler's steps (the prefill step's beam step from the prompt's one
    beam, then steps of 3 beams, two groups per step): the generator ends where one
    ``beam_parents`` call per group and step leaves it; with keep_prob > 0 that call
    draws its keeps even for one beam."""
    from sim_fakes import make_trace

    from pagesim.allocators import PagedAllocator
    from pagesim.simulator.run import _groups
    from pagesim.simulator.schedulers import SCHEDULERS
    from pagesim.simulator.spec import SchedulerSpec

    sched = SCHEDULERS["vllm"](
        SchedulerSpec(beam_keep_prob=keep_prob),
        PagedAllocator(capacity_slots=4096),
        max_model_len=256,
        rng=np.random.default_rng(9),
    )
    for group in _groups(make_trace([(0.0, 6, 8, 1, 3), (0.0, 9, 8, 1, 3)])):
        sched.add(group)
    reference = np.random.default_rng(9)
    now = 0.0
    for step in range(7):
        now += 0.1
        sched.finish_step(sched.schedule(now), now)
        for _ in range(2):  # the prefill step forks the prompt's beam: 1 beam, 3 slots
            beam_parents(reference, 1 if step == 0 else 3, 3, keep_prob)
        assert generator_used(sched, 9) == reference.bit_generator.state
    sched.check_invariants()
