"""Stories of the paper prototype's scheduler (``vllm-paper``) on tiny pools, step by step.

Each story also runs the default ``vllm`` where the two differ, so the difference the
variant makes is what the test pins down.
"""

from __future__ import annotations

import numpy as np
import pytest
from sim_fakes import TinyPaged, constant_step, make_trace

from pagesim.allocators.paged import PagedAllocator
from pagesim.simulator import simulate
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.schedulers.vllm_paper import VllmPaperScheduler
from pagesim.simulator.spec import SchedulerSpec, run_spec_from_dict


def sched(alloc, kind="vllm-paper", **spec):
    return SCHEDULERS[kind](
        SchedulerSpec(**spec), alloc, max_model_len=64, rng=np.random.default_rng(0)
    )


def run(trace, scheduler):
    return run_engine(trace, scheduler, constant_step(0.1), check_invariants=True, every_step=True)


def column(res, name):
    return res.timeseries[name].tolist()


def test_registered_as_its_own_kind():
    assert SCHEDULERS["vllm-paper"] is VllmPaperScheduler
    assert SCHEDULERS["vllm"] is not VllmPaperScheduler


def test_a_prompt_joins_the_running_decodes_in_the_same_step():
    # r0 (prompt 5, 3 tokens) runs alone; r1 arrives at 0.15, during r0's first decode,
    # and is prefilled at 0.2 in the same step as r0's second decode.
    trace = make_trace([(0.0, 5, 3), (0.15, 7, 2)])
    res = run(trace, sched(TinyPaged(16, 4)))
    assert column(res, "num_prefill_tokens") == [5, 0, 7, 0]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 1]
    assert column(res, "batch_size") == [1, 1, 2, 1]  # groups in the step, prefills counted
    req = res.requests.set_index("request_id")
    assert req["first_token_s"].round(9).tolist() == [0.1, 0.3]
    assert req["finish_s"].round(9).tolist() == [0.3, 0.4]
    # vLLM v0 makes r1's prefill a step of its own, and r0 waits for it
    v0 = run(trace, sched(TinyPaged(16, 4), kind="vllm"))
    assert column(v0, "num_prefill_tokens") == [5, 0, 7, 0]
    assert column(v0, "num_decode_tokens") == [0, 1, 0, 2]
    assert v0.requests["finish_s"].round(9).tolist() == [0.4, 0.4]


def test_the_token_budget_starts_at_the_running_sequences():
    # budget 8: at 0.1 one sequence runs, so 1 + 4 fits and 1 + 4 + 4 does not; r2 waits
    # one step (2 running + 4 = 6). vLLM v0 counts prompts only and admits both at once.
    trace = make_trace([(0.0, 4, 5), (0.05, 4, 5), (0.05, 4, 5)])
    res = run(trace, sched(TinyPaged(64, 4), max_num_batched_tokens=8))
    assert column(res, "num_prefill_tokens")[:3] == [4, 4, 4]
    assert column(res, "num_decode_tokens")[:3] == [0, 1, 2]
    v0 = run(trace, sched(TinyPaged(64, 4), kind="vllm", max_num_batched_tokens=8))
    assert column(v0, "num_prefill_tokens")[:2] == [4, 8]


def test_the_cap_counts_running_groups_plus_the_candidates_sequences():
    # max_num_seqs 2: r0 samples n = 2; the artifact counts it as one running group, so
    # r1 (one sequence) is admitted beside it (1 + 1 <= 2). vLLM v0 counts r0 as 2
    # sequences and holds r1 back until r0 finishes.
    trace = make_trace([(0.0, 4, 3, 2), (0.0, 4, 3)])
    res = run(trace, sched(TinyPaged(64, 4), max_num_seqs=2))
    assert column(res, "num_prefill_tokens") == [8, 0, 0]
    v0 = run(trace, sched(TinyPaged(64, 4), kind="vllm", max_num_seqs=2))
    assert column(v0, "num_prefill_tokens") == [4, 0, 0, 4, 0, 0]
    # and a group with more sequences than the cap is rejected with the reason
    res = run(make_trace([(0.0, 4, 3, 3)]), sched(TinyPaged(64, 4), max_num_seqs=2))
    assert res.requests.loc[0, "status"] == "rejected"
    assert "max_num_seqs = 2" in res.requests.loc[0, "reason"]


def test_recompute_preempts_the_tail_and_it_is_not_readmitted_in_the_same_step():
    # 4 blocks of 2 slots. r0 and r1 (prompt 4 each) fill the pool in one prefill step.
    # At 0.1 r0 needs a 3rd block: r1 (tail) is preempted by recompute and, although its
    # blocks are free again, not readmitted in that step. At 0.2 it waits for memory
    # (5 tokens = 3 blocks, 1 free: LATER). r0 finishes at 0.3 and r1 is prefilled
    # with prompt + generated = 5 tokens; its first-token time is kept.
    alloc = TinyPaged(4, 2)
    res = run(make_trace([(0.0, 4, 3), (0.0, 4, 2)]), sched(alloc))
    assert column(res, "num_prefill_tokens") == [8, 0, 0, 5]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 0]
    assert column(res, "num_waiting") == [0, 1, 1, 0]
    req = res.requests.set_index("request_id")
    assert req["num_preemptions"].tolist() == [0, 1]
    assert req["first_token_s"].round(9).tolist() == [0.1, 0.1]
    assert req["finish_s"].round(9).tolist() == [0.3, 0.4]
    assert res.summary["num_preemptions"] == 1


def test_a_swap_out_stops_swap_in_and_admission_until_the_group_is_back():
    # always swap (the artifact's --always-swap): at 0.1 r1 is swapped out (2 blocks) so
    # that r0 can grow; nothing comes back in that step, and r2 (arrived at 0.05, 1 block
    # free) is not admitted while r1 is out. At 0.2 r1 cannot come back (2 blocks + 1 per
    # sequence > 1 free); r0 finishes at 0.3; at 0.3 r1 is swapped in and decodes, and r2
    # is admitted in the same step only once nothing is swapped out.
    alloc = TinyPaged(4, 2, num_cpu_blocks=8)
    trace = make_trace([(0.0, 4, 3), (0.0, 4, 2), (0.05, 1, 1)])
    res = run(trace, sched(alloc, preemption_mode="swap"))
    assert column(res, "num_prefill_tokens") == [8, 0, 0, 1]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 1]
    assert column(res, "num_swapped") == [0, 1, 1, 0]
    assert column(res, "num_swapped_blocks") == [0, 2, 0, 2]
    req = res.requests.set_index("request_id")
    assert req["finish_s"].round(9).tolist() == [0.3, 0.4, 0.4]


def test_a_recompute_in_the_step_does_not_stop_a_swap_in():
    # 5 blocks of 2 slots (the fake allocator opens a block only when one is needed).
    # r0 (prompt 1), r1 (prompt 4), r2 (prompt 2, n = 2) are prefilled together.
    # 0.1: r2's two samples each need a block, none is free: r2 (the tail) swaps out.
    # 0.2: r2 cannot come back (1 block + 1 per sequence > 0 free).
    # 0.3: r1 needs a block: it is the tail and preempts itself by recompute, freeing 3
    #      blocks; nothing was swapped *out*, so r2 comes back in that very step (1 block
    #      in) and decodes, while r1 (preempted now) is not readmitted.
    # 0.4: r0 has finished; r1 needs 3 blocks for prompt + 3 generated, 2 are free.
    # 0.5: r2 has finished; r1 is prefilled with 7 tokens and ends at 0.6.
    # vLLM v0 swaps nothing in during a step that preempted: r2 comes back at 0.4.
    trace = make_trace([(0.0, 1, 4), (0.0, 4, 4), (0.0, 2, 3, 2)])

    def tiny():
        return TinyPaged(5, 2, num_cpu_blocks=16)

    res = run(trace, sched(tiny()))
    assert column(res, "num_prefill_tokens") == [7, 0, 0, 0, 0, 7]
    assert column(res, "num_decode_tokens") == [0, 2, 2, 3, 2, 0]
    assert column(res, "num_swapped") == [0, 1, 1, 0, 0, 0]
    assert column(res, "num_waiting") == [0, 0, 0, 1, 1, 0]
    assert column(res, "num_swapped_blocks") == [0, 1, 0, 1, 0, 0]
    req = res.requests.set_index("request_id")
    assert req["finish_s"].round(9).tolist() == [0.4, 0.6, 0.5]
    v0 = run(trace, sched(tiny(), kind="vllm"))
    assert column(v0, "num_swapped") == [0, 1, 1, 1, 0, 0, 0]
    assert column(v0, "num_decode_tokens") == [0, 2, 2, 1, 2, 2, 0]


@pytest.mark.pure_python
def test_steady_decode_spans_change_nothing():
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 120, "n": 2},
        "arrivals": {"process": "poisson", "rate_req_s": 8.0},
        "hardware": {"kv_slots": 6000},
        "allocator": {"kind": "paged", "swap_space_gib": 1.0},
        "scheduler": {"kind": "vllm-paper", "max_num_seqs": 2048},
        "metrics": {"every_step": True},
        "check_invariants": True,
    }
    fast = simulate(run_spec_from_dict(doc))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(VllmPaperScheduler, "steady_ticks", lambda self: 0)
        slow = simulate(run_spec_from_dict(doc))
    assert fast.summary["num_preemptions"] > 0  # the run exercises preemption
    assert fast.requests.equals(slow.requests)
    assert fast.timeseries.equals(slow.timeseries)


@pytest.mark.slow
def test_invariants_hold_on_the_artifact_trace(shared_data):
    # the artifact's ShareGPT lengths at a load where memory runs short (preemptions)
    csv = shared_data("paper_artifact", "sharegpt_opt_lengths.csv")
    doc = {
        "workload": {
            "name": "sharegpt-paper",
            "path": str(csv),
            "duration_s": 120.0,
            "selection": "artifact",
        },
        "arrivals": {"process": "quantized-poisson", "rate_req_s": 4.0, "quantum_s": 0.01},
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15968},
        "allocator": {"kind": "paged", "swap_space_gib": 20.0},
        "scheduler": {"kind": "vllm-paper", "max_num_seqs": 2048},
        "check_invariants": True,
        "max_sim_time_s": 240.0,
    }
    res = simulate(run_spec_from_dict(doc))
    assert res.summary["num_finished"] > 300
    assert res.summary["num_rejected"] == 0


@pytest.mark.parametrize("shape", [(3, 1), (1, 3)], ids=["n=3", "beam=3"])
def test_a_group_holds_all_its_sequences_from_the_step_that_prefills_it(shape):
    # One request, prompt 6 (blocks of 4: one full block and one partly filled), 3
    # samples or beams. The artifact admits the group with 3 sequences sharing the
    # prompt's table, so the prefill step already saves 2 x 2 blocks of 4 slots (of 64);
    # vLLM v0 holds one sequence in that step and forks after it.
    n, width = shape
    trace = make_trace([(0.0, 6, 3, n, width)])

    def first_step_saved(kind):
        alloc = PagedAllocator(capacity_slots=64, block_size=4, watermark=0.0)
        res = run(trace, sched(alloc, kind=kind))
        assert res.requests.loc[0, "status"] == "finished"
        return column(res, "mem_shared_saved_frac")[0]

    assert first_step_saved("vllm-paper") == pytest.approx(2 * 2 * 4 / 64)
    assert first_step_saved("vllm") == 0.0
