"""Simulations with the prototype's pinned prefix (``allocator.prefix_caching: pinned``).

Scenario: 60 synthetic requests behind a 40-token shared prefix (segment 0) on a paged
pool of 16-token blocks: the pinned prefix is 2 blocks (32 tokens), so each request's
prefill computes its own tokens plus the prefix's last 8, with its whole prompt as the
context; the pool starts with those 2 blocks held and holds them to the end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.allocators import make_allocator
from pagesim.simulator import simulate
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import run_spec_from_dict
from pagesim.workloads import build_trace
from pagesim.workloads.assemble import SHARED_PREFIX_SEGMENT_ID, assemble_trace

PREFIX_LEN = 40
PINNED = 32  # two full blocks of 16


def spec_doc(prefix_caching="pinned", scheduler="vllm-paper", seed=3, **workload):
    return {
        "workload": {
            "name": "synthetic",
            "num_requests": 60,
            "shared_prefix_len": PREFIX_LEN,
            **workload,
        },
        "arrivals": {"rate_req_s": 2.0},
        "hardware": {"kv_slots": 8192},
        "allocator": {"kind": "paged", "block_size": 16, "prefix_caching": prefix_caching},
        "scheduler": {"kind": scheduler},
        "metrics": {"every_step": True},
        "check_invariants": True,
        "seed": seed,
    }


def run_recording_plans(doc):
    """Run ``doc`` through run_engine, keeping every step's plan (each step takes 10 ms)."""
    spec = run_spec_from_dict(doc)
    rng = np.random.default_rng(spec.seed)
    trace = build_trace(spec.workload, spec.arrivals, max_model_len=spec.max_model_len, rng=rng)
    alloc = make_allocator(
        spec.allocator,
        capacity_slots=spec.hardware.kv_slots,
        cpu_capacity_slots=0,
        max_model_len=spec.max_model_len,
        shared_prefix=(SHARED_PREFIX_SEGMENT_ID, spec.workload.shared_prefix_len),
    )
    sched = SCHEDULERS[spec.scheduler.kind](
        spec.scheduler, alloc, max_model_len=spec.max_model_len, rng=rng
    )
    plans: list[BatchPlan] = []

    def step_time_s(plan):
        plans.append(plan)
        return 0.01

    res = run_engine(trace, sched, step_time_s, every_step=True, check_invariants=True)
    return trace, alloc, res, plans


@pytest.mark.parametrize("scheduler", ["vllm-paper", "vllm"])
def test_every_prefill_prices_only_the_requests_own_tokens_over_the_prefix(scheduler):
    trace, alloc, res, plans = run_recording_plans(spec_doc(scheduler=scheduler))
    prompts = trace.table["prompt_len"].to_numpy()
    assert (res.requests["status"] == "finished").all() and res.summary["num_preemptions"] == 0
    assert sum(p.num_prefill_seqs for p in plans) == len(prompts)
    assert sum(p.num_prefill_tokens for p in plans) == int((prompts - PINNED).sum())
    assert sum(p.prefill_context_sum for p in plans) == int(prompts.sum())
    assert alloc.prefix_cache.hit_tokens == PINNED * len(prompts)
    assert alloc.pinned_block_ids == (0, 1)


def test_without_pinning_every_prompt_is_computed_whole():
    trace, _, _, plans = run_recording_plans(spec_doc(prefix_caching=False))
    assert sum(p.num_prefill_tokens for p in plans) == int(trace.table["prompt_len"].sum())


def test_memory_holds_the_pinned_prefix_from_the_first_step_to_the_last():
    res = simulate(run_spec_from_dict(spec_doc()))
    ts = res.timeseries
    assert res.extra["pinned_prefix_slots"] == PINNED
    capacity = 8192
    # the idle period before the first arrival already holds the prefix as token states
    assert ts["mem_token_frac"].iloc[0] == pytest.approx(PINNED / capacity)
    assert (ts["mem_token_frac"] * capacity >= PINNED - 1e-6).all()
    _, alloc, _, _ = run_recording_plans(spec_doc())  # everything finished: the pin stays
    assert alloc.usage(is_blocked=False).token_slots == PINNED
    assert alloc.num_free_blocks == alloc.num_total_blocks - 2
    parts = ["token", "reserved", "internal_frag", "external_frag", "unused"]
    assert np.allclose(ts[[f"mem_{p}_frac" for p in parts]].sum(axis=1), 1.0)
    # one request mapping the prefix saves its own copy of it
    assert ts["mem_shared_saved_frac"].max() >= PINNED / capacity
    assert res.summary["prefix_hit_rate"] == pytest.approx(PINNED / (PREFIX_LEN + 128))
    assert "pinned_prefix_slots" not in simulate(run_spec_from_dict(spec_doc(True))).extra


def test_the_budget_counts_only_the_tokens_a_prompt_computes():
    # prompts of 40 + 170..190 tokens against a budget of 200: whole prompts never fit,
    # their own tokens (8 + 170..190) do, so pinned runs admit what unpinned ones reject
    doc = spec_doc(num_requests=6, prompt={"dist": "uniform", "low": 170, "high": 190})
    doc["scheduler"]["max_num_batched_tokens"] = 200
    doc["max_model_len"] = 1024
    pinned = simulate(run_spec_from_dict(doc)).requests
    doc["allocator"]["prefix_caching"] = False
    unpinned = simulate(run_spec_from_dict(doc)).requests
    assert (pinned["status"] == "finished").all()
    assert (unpinned["status"] == "rejected").all()


def test_same_seed_same_run_and_another_seed_another():
    a = simulate(run_spec_from_dict(spec_doc()))
    b = simulate(run_spec_from_dict(spec_doc()))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    strip = lambda s: {k: v for k, v in s.items() if k != "sim_wall_s"}  # noqa: E731
    assert strip(a.summary) == strip(b.summary) and a.extra.keys() == b.extra.keys()
    c = simulate(run_spec_from_dict(spec_doc(seed=4)))
    assert not c.requests.equals(a.requests)


@pytest.mark.parametrize(("prefix_caching", "per_step"), [("pinned", 3), (False, 2)])
def test_one_step_admits_as_many_prompts_as_their_own_tokens_fit_the_budget(
    prefix_caching, per_step
):
    # six prompts of 40 + 100 tokens at once, a budget of 330: whole prompts (140) fit two
    # to a step, own tokens (8 + 100) three
    trace = assemble_trace(
        prompt_len=np.full(6, 100), output_len=np.full(6, 4), arrival_s=None,
        shared_prefix_len=PREFIX_LEN,
    )  # fmt: skip
    doc = spec_doc(prefix_caching=prefix_caching, scheduler="vllm")
    doc["scheduler"]["max_num_batched_tokens"] = 330
    spec = run_spec_from_dict(doc)
    alloc = make_allocator(
        spec.allocator, capacity_slots=8192, cpu_capacity_slots=0, max_model_len=2048,
        shared_prefix=(SHARED_PREFIX_SEGMENT_ID, PREFIX_LEN),
    )  # fmt: skip
    sched = SCHEDULERS["vllm"](spec.scheduler, alloc, max_model_len=2048, rng=None)
    res = run_engine(trace, sched, lambda plan: 0.01, every_step=True, check_invariants=True)
    prefills = res.timeseries["num_prefill_tokens"]
    expected = (100 + PREFIX_LEN - (PINNED if prefix_caching else 0)) * per_step
    assert prefills.iloc[0] == expected
