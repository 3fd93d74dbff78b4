"""vLLM v0 scheduler stories on tiny pools, with exact expectations."""

from __future__ import annotations

import numpy as np
from sim_fakes import TinyPaged, constant_step, make_trace

from pagesim.allocators.base import AllocStatus
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import SchedulerSpec


def vllm(alloc, seed=0, **spec):
    return SCHEDULERS["vllm"](
        SchedulerSpec(**spec), alloc, max_model_len=64, rng=np.random.default_rng(seed)
    )


def run(trace, sched, step_s=0.1):
    return run_engine(trace, sched, constant_step(step_s), check_invariants=True, every_step=True)


def test_prefill_and_decode_steps_are_separate_and_fcfs():
    sched = vllm(TinyPaged(16, 4))
    res = run(make_trace([(0.0, 5, 3), (0.0, 7, 2)]), sched)
    ts = res.timeseries
    # step 1: both prompts; then decodes only; request 1 finishes after 1 decode
    assert ts["num_prefill_tokens"].tolist() == [12, 0, 0]
    assert ts["num_decode_tokens"].tolist() == [0, 2, 1]
    req = res.requests.set_index("request_id")
    assert req["first_token_s"].tolist() == [0.1, 0.1]
    assert req["finish_s"].round(9).tolist() == [0.3, 0.2]
    assert req["status"].tolist() == ["finished", "finished"]
    assert res.summary["avg_batch_size"] == 1.5  # decode steps only: 2 then 1


def test_head_of_line_blocking_and_never_rejection():
    # 4 blocks of 4 slots: request 0 takes 3 blocks; request 1 (2 blocks) waits (LATER)
    # although request 2 (1 block) would fit; request 3 can never fit the pool.
    alloc = TinyPaged(4, 4)
    sched = vllm(alloc)
    trace = make_trace([(0.0, 12, 2), (0.0, 8, 1), (0.0, 4, 1), (0.0, 20, 1)])
    res = run(trace, sched)
    req = res.requests.set_index("request_id")
    assert req.loc[3, "status"] == "rejected"
    assert "can ever give" in req.loc[3, "reason"]
    # request 0 prefill at 0.1 ... its decode needs a 4th block (12 tokens -> 13)
    assert req.loc[0, "first_token_s"] == 0.1
    assert req.loc[1, "first_token_s"] > req.loc[0, "first_token_s"]
    assert req.loc[2, "first_token_s"] >= req.loc[1, "first_token_s"]  # FCFS: no overtaking
    assert res.summary["num_rejected"] == 1 and res.summary["num_finished"] == 3


def test_prompt_over_the_token_budget_is_rejected_with_reason():
    sched = vllm(TinyPaged(64, 4), max_num_batched_tokens=16)
    res = run(make_trace([(0.0, 17, 2), (0.0, 16, 2)]), sched)
    req = res.requests.set_index("request_id")
    assert req.loc[0, "status"] == "rejected"
    assert "max_num_batched_tokens" in req.loc[0, "reason"]
    assert req.loc[1, "status"] == "finished"


def test_token_budget_and_max_num_seqs_split_prefills():
    sched = vllm(TinyPaged(64, 4), max_num_batched_tokens=10, max_num_seqs=3)
    res = run(make_trace([(0.0, 4, 1)] * 5), sched)
    # budget 10 tokens: 2 prompts of 4 per prefill step; each finishes in its prefill step
    assert res.timeseries["num_prefill_tokens"].tolist() == [8, 8, 4]
    sched = vllm(TinyPaged(64, 4), max_num_seqs=3)
    res = run(make_trace([(0.0, 4, 1)] * 5), sched)
    assert res.timeseries["num_prefill_tokens"].tolist() == [12, 8]


def test_recompute_preempts_the_latest_arrival_and_requeues_it_first():
    # 4 blocks of 2 slots. r0: prompt 4 (2 full blocks), r1: prompt 4: pool full.
    # First decode: r0 needs a 3rd block -> r1 (tail) is preempted by recompute,
    # freed, and readmitted once r0 is done with prompt + generated = 4 + 1 tokens.
    alloc = TinyPaged(4, 2)
    sched = vllm(alloc)
    res = run(make_trace([(0.0, 4, 3), (0.0, 4, 2)]), sched)
    req = res.requests.set_index("request_id")
    assert req["num_preemptions"].tolist() == [0, 1]
    assert req["status"].tolist() == ["finished", "finished"]
    ts = res.timeseries
    # prefill [4,4]; decode r0 (r1 preempted); decode r0 -> done at 0.3;
    # r1 readmitted: one prefill of 4 + 1 = 5 tokens generates its last token.
    assert ts["num_prefill_tokens"].tolist() == [8, 0, 0, 5]
    assert ts["num_decode_tokens"].tolist() == [0, 1, 1, 0]
    assert ts["num_waiting"].tolist() == [0, 1, 1, 0]  # queues while each step runs
    assert req.loc[1, "first_token_s"] == 0.1  # the first token time survives recompute
    assert abs(req.loc[1, "finish_s"] - 0.4) < 1e-9
    assert res.summary["num_preemptions"] == 1
    assert res.summary["num_swapped_blocks"] == 0


def test_last_running_group_preempts_itself():
    # one request grows past the pool (3 blocks of 2, watermark 0): prompt 5 + 3 outputs
    # needs slot 7 -> 4 blocks: it cannot be served and preempts itself, then on
    # readmission (prompt 5 + 2 generated = 7 tokens > 6 slots) it is rejected.
    sched = vllm(TinyPaged(3, 2))
    res = run(make_trace([(0.0, 5, 4)]), sched)
    req = res.requests.iloc[0]
    assert req["num_preemptions"] == 1
    assert req["status"] == "rejected" and "can ever give" in req["reason"]


def test_parallel_sampling_forks_after_prefill_and_copies_on_write():
    # prompt 6 on blocks of 4: the second block is half full and shared by both samples
    # after the fork; the first decode copies it once (the first sibling copies, the
    # last writes in place).
    alloc = TinyPaged(16, 4)
    sched = vllm(alloc)
    res = run(make_trace([(0.0, 6, 4, 2)]), sched)
    ts = res.timeseries
    assert ts["num_prefill_tokens"].tolist() == [6, 0, 0, 0]
    assert ts["num_decode_tokens"].tolist() == [0, 2, 2, 2]
    assert ts["num_copied_blocks"].tolist() == [0, 1, 0, 0]
    assert res.extra["num_copied_blocks"] == 1
    assert res.requests.iloc[0]["status"] == "finished"
    assert res.summary["throughput_tok_s"] * res.extra["makespan_s"] == 8  # 2 samples x 4


def test_multi_sequence_group_is_swapped_out_and_back():
    # 6 blocks of 2 slots, CPU room for 4. r0: prompt 4 (2 blocks). r1: n=2, prompt 3
    # (2 blocks). After the fork, r1's samples share both blocks. Decode 1: r0 needs a
    # new block (3rd), r1's two samples: one new block for the CoW'd half block... the
    # pool runs out and r1 (latest arrival) is swapped out, then comes back.
    alloc = TinyPaged(6, 2, num_cpu_blocks=4)
    sched = vllm(alloc)
    res = run(make_trace([(0.0, 4, 4), (0.0, 3, 4, 2)]), sched)
    req = res.requests.set_index("request_id")
    assert req["status"].tolist() == ["finished", "finished"]
    assert req["num_preemptions"].tolist() == [0, 1]
    ts = res.timeseries
    assert ts["num_swapped"].max() == 1
    assert res.summary["num_swapped_blocks"] > 0
    assert res.summary["num_swapped_blocks"] % 2 == 0  # out and back in, same block count


def test_swap_space_exhausted_aborts_the_group_with_reason():
    alloc = TinyPaged(6, 2, num_cpu_blocks=0)
    sched = vllm(alloc)
    res = run(make_trace([(0.0, 4, 4), (0.0, 3, 4, 2)]), sched)
    req = res.requests.set_index("request_id")
    assert req.loc[0, "status"] == "finished"
    assert req.loc[1, "status"] == "rejected"
    assert "swap space" in req.loc[1, "reason"]


def test_forced_swap_mode_swaps_single_sequence_groups():
    alloc = TinyPaged(4, 2, num_cpu_blocks=8)
    sched = vllm(alloc, preemption_mode="swap")
    res = run(make_trace([(0.0, 4, 3), (0.0, 4, 2)]), sched)
    assert res.requests["num_preemptions"].tolist() == [0, 1]
    assert res.summary["num_swapped_blocks"] == 4  # 2 blocks out, 2 back in
    assert (res.requests["status"] == "finished").all()


def test_beam_search_keeps_k_beams_and_is_seeded():
    def beam_run(seed):
        alloc = TinyPaged(64, 4)
        sched = vllm(alloc, seed=seed)
        res = run(make_trace([(0.0, 5, 8, 1, 4)]), sched)
        return res, alloc

    res, alloc = beam_run(1)
    ts = res.timeseries
    assert ts["num_decode_tokens"].tolist() == [0] + [4] * 7  # k = 4 beams every decode
    assert res.requests.iloc[0]["status"] == "finished"
    assert not alloc.table  # everything freed at the end
    again, _ = beam_run(1)
    assert again.timeseries.equals(res.timeseries)
    copies = [beam_run(s)[0].extra["num_copied_blocks"] for s in range(6)]
    assert len(set(copies)) > 1  # the parents drawn depend on the seed


def test_beam_step_rule_forks_chosen_parents_and_frees_the_others():
    alloc = TinyPaged(64, 4)
    sched = vllm(alloc, seed=3)
    group_trace = make_trace([(0.0, 4, 10, 1, 3)])
    from pagesim.simulator.run import _groups

    group = next(_groups(group_trace))
    sched.add(group)
    sched.finish_step(sched.schedule(0.0), 0.1)  # prefill, then 3 beams from the one parent
    assert len(group.seq_ids) == 3 and group.seq_ids[0] == 0
    before = list(group.seq_ids)
    expected_parents = np.random.default_rng(3).integers(0, 1, size=3)  # first draw: 1 beam
    assert expected_parents.tolist() == [0, 0, 0]
    rng_copy = np.random.Generator(np.random.PCG64())
    rng_copy.bit_generator.state = sched.rng.bit_generator.state
    parents = rng_copy.integers(0, 3, size=3).tolist()
    step = sched.schedule(0.1)  # each beam appends its token
    tables_before = {seq_id: list(alloc.table[seq_id]) for seq_id in before}
    sched.finish_step(step, 0.2)  # the beam step among 3 beams
    chosen = sorted(set(parents))
    dropped = [before[i] for i in range(3) if i not in chosen]
    assert dropped  # seed 3 drops a beam
    # each chosen beam continues, followed by its children, which take the dropped
    # beams' ids in order (3 beams before and after)
    expected: list[int] = []
    parent_of: dict[int, int] = {}
    reused = iter(dropped)
    for i in chosen:
        expected.append(before[i])
        parent_of[before[i]] = before[i]
        for _ in range(parents.count(i) - 1):
            child = next(reused)
            expected.append(child)
            parent_of[child] = before[i]
    assert group.seq_ids == expected
    # every beam now holds its parent's blocks (shared); the dropped lines' own blocks are free
    for seq_id, parent in parent_of.items():
        assert alloc.table[seq_id] == tables_before[parent]
    held = {b for seq_id in group.seq_ids for b in alloc.table[seq_id]}
    released = {b for d in dropped for b in tables_before[d]} - held
    assert released and all(alloc.ref[b] == 0 for b in released)
    sched.check_invariants()
    alloc.check_invariants()


def test_admission_status_is_what_the_allocator_says():
    alloc = TinyPaged(4, 4, watermark_blocks=1)
    sched = vllm(alloc)
    from pagesim.simulator.run import _groups

    big, fits = list(_groups(make_trace([(0.0, 16, 2), (0.0, 12, 2)])))
    assert sched._admission_status(big) is AllocStatus.NEVER  # 4 blocks > 4 - watermark
    assert sched._admission_status(fits) is AllocStatus.OK
