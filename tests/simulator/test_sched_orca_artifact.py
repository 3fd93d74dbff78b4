"""Orca with the paper artifact's admission (``scheduler.admission: artifact``), step by step,
beside today's default rule on the same tiny workloads."""

from __future__ import annotations

import numpy as np
from sim_fakes import constant_step, make_trace

from pagesim.allocators import ContiguousAllocator
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import SchedulerSpec


def orca(admission, *, placement="buddy", capacity_slots=1024, **spec):
    alloc = ContiguousAllocator(
        policy="oracle",
        capacity_slots=capacity_slots,
        max_model_len=64,
        granule_slots=4,
        placement=placement,
    )
    return SCHEDULERS["orca"](
        SchedulerSpec(kind="orca", admission=admission, **spec),
        alloc,
        max_model_len=64,
        rng=np.random.default_rng(0),
    )


def run(trace, sched):
    return run_engine(trace, sched, constant_step(0.1), check_invariants=True, every_step=True)


def prefills(res):
    return res.timeseries["num_prefill_tokens"].tolist()


def test_the_token_budget_counts_running_sequences_and_admitted_prompts():
    # budget 8: at 0.1 one sequence runs: r1 fits (1 + 4), r2 does not (9); at 0.2 it does
    trace = make_trace([(0.0, 4, 5), (0.05, 4, 5), (0.05, 4, 5)])
    res = run(trace, orca("artifact", max_num_batched_tokens=8))
    assert prefills(res)[:3] == [4, 4, 4]
    assert res.timeseries["num_decode_tokens"].tolist()[:3] == [0, 1, 2]
    # the default rule has no token budget
    assert prefills(run(trace, orca("default", max_num_batched_tokens=8)))[:2] == [4, 8]


def test_the_cap_counts_running_groups_plus_the_candidates_sequences():
    # max_num_seqs 2: r0 (n = 2) is one running group, so r1 joins it (1 + 1 <= 2);
    # the default rule counts r0's two sequences and holds r1 back until r0 is done
    trace = make_trace([(0.0, 4, 3, 2), (0.0, 4, 3)])
    assert prefills(run(trace, orca("artifact", max_num_seqs=2))) == [8, 0, 0]
    assert prefills(run(trace, orca("default", max_num_seqs=2))) == [4, 0, 0, 4, 0, 0]


def test_memory_is_checked_before_the_cap():
    # 3 granules of 4 slots: r0 (prompt 4 + 4 = 2 granules) leaves one free; r1 (5 slots,
    # 2 granules) does not fit. With the cap reached as well (max_num_seqs 1), the
    # artifact stops on memory first, so r1 waits for memory and the free granule is
    # external fragmentation; the default rule stops on the cap and counts it unused.
    trace = make_trace([(0.0, 4, 4), (0.0, 4, 1)])
    art = run(trace, orca("artifact", capacity_slots=12, max_num_seqs=1)).timeseries
    dft = run(trace, orca("default", capacity_slots=12, max_num_seqs=1)).timeseries
    assert art["num_prefill_tokens"].tolist() == [4, 0, 0, 0, 4]
    assert dft["num_prefill_tokens"].tolist() == [4, 0, 0, 0, 4]
    assert art["mem_external_frag_frac"].tolist()[:4] == [4 / 12] * 4
    assert art["mem_unused_frac"].tolist()[:4] == [0.0] * 4
    assert dft["mem_external_frag_frac"].tolist()[:4] == [0.0] * 4
    assert dft["mem_unused_frac"].tolist()[:4] == [4 / 12] * 4


def test_a_prompt_over_the_budget_is_rejected_with_the_reason():
    res = run(make_trace([(0.0, 9, 2), (0.0, 4, 2)]), orca("artifact", max_num_batched_tokens=8))
    req = res.requests.set_index("request_id")
    assert req.loc[0, "status"] == "rejected"
    assert "max_num_batched_tokens = 8" in req.loc[0, "reason"]
    assert req.loc[1, "status"] == "finished"


def test_artifact_admission_on_the_artifact_buddy_keeps_every_invariant():
    rng = np.random.default_rng(3)
    rows = [(0.05 * i, int(rng.integers(1, 30)), int(rng.integers(1, 30))) for i in range(60)]
    res = run(make_trace(rows), orca("artifact", placement="artifact-buddy", capacity_slots=400))
    assert res.summary["num_finished"] == 60
