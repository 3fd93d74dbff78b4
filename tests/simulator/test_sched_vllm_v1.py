"""vLLM V1 scheduler stories (``vllm-v1`` on ``paged-v1``) on tiny pools, with exact
expectations; the decode clock's fast path against the plain per-step one; the spec."""

from __future__ import annotations

import numpy as np
import pytest
from sim_fakes import make_trace

from pagesim.allocators import PagedV1Allocator
from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS, VllmV1Scheduler
from pagesim.simulator.spec import RunSpec, SchedulerSpec, run_spec_from_dict


def v1(num_blocks, block_size=4, *, max_model_len=64, caching=True, **spec):
    alloc = PagedV1Allocator(
        capacity_slots=num_blocks * block_size,
        block_size=block_size,
        is_prefix_caching=caching,
    )
    sched = SCHEDULERS["vllm-v1"](
        SchedulerSpec(kind="vllm-v1", **spec),
        alloc,
        max_model_len=max_model_len,
        rng=np.random.default_rng(0),
    )
    return sched, alloc


class Steps:
    """Every step takes 0.1 s; ``plans`` are the plans the steps ran: (prefill seqs,
    tokens, context sum, scores, decode seqs, context sum, blocks)."""

    def __init__(self) -> None:
        self.plans: list[tuple] = []

    def __call__(self, plan) -> float:
        self.plans.append(tuple(plan)[:7])
        return 0.1


def run(trace, sched):
    steps = Steps()
    res = run_engine(trace, sched, steps, check_invariants=True, every_step=True)
    return res, steps.plans


def column(res, name):
    return res.timeseries[name].astype(int).tolist()


def test_one_budget_running_requests_first_then_waiting_ones_in_chunks():
    # budget 8: r0 (5 tokens) and r1's first 3 tokens; at 0.1 r0 decodes, r1 finishes its
    # prompt (4) and r2, arrived, gets the 3 tokens left; and so on
    sched, _ = v1(17, max_num_batched_tokens=8)
    res, plans = run(make_trace([(0.0, 5, 3), (0.0, 7, 2), (0.1, 12, 4)]), sched)
    assert column(res, "num_prefill_tokens") == [8, 7, 6, 3, 0, 0, 0]
    assert column(res, "num_decode_tokens") == [0, 1, 2, 0, 1, 1, 1]
    req = res.requests.set_index("request_id")
    assert req["first_token_s"].round(9).tolist() == [
        0.1,
        0.2,
        0.4,
    ]  # r1 and r2 after their last chunk
    assert req["finish_s"].round(9).tolist() == [0.3, 0.3, 0.7]
    # a chunk is priced over what the request computed before it (new, context)
    assert plans[0] == (2, 8, 8, 5 * 6 / 2 + 3 * 4 / 2, 0, 0, 0)
    assert plans[1] == (2, 7, 10, 4 * 3 + 4 * 5 / 2 + 3 * 4 / 2, 1, 6, 2)
    assert plans[2] == (1, 6, 9, 6 * 3 + 6 * 7 / 2, 2, 15, 4)


def test_a_prompt_longer_than_the_budget_emits_its_first_token_after_its_last_chunk():
    sched, alloc = v1(8, max_num_batched_tokens=4)
    res, plans = run(make_trace([(0.0, 10, 2)]), sched)
    assert [p[:3] for p in plans] == [(1, 4, 4), (1, 4, 8), (1, 2, 10), (0, 0, 0)]
    assert res.requests["first_token_s"].round(9).tolist() == [0.3]
    assert res.requests["finish_s"].round(9).tolist() == [0.4]
    assert alloc.num_free_blocks == alloc.num_usable_blocks


def test_long_prefill_token_threshold_caps_each_request_chunk():
    sched, _ = v1(16, max_num_batched_tokens=8, long_prefill_token_threshold=3)
    res, plans = run(make_trace([(0.0, 7, 2), (0.0, 2, 3)]), sched)
    assert [p[:2] for p in plans] == [(2, 5), (1, 3), (1, 1), (0, 0)]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 1]
    assert res.requests["first_token_s"].round(9).tolist() == [0.3, 0.1]


def test_max_num_seqs_stops_admission_until_a_request_ends():
    sched, _ = v1(16, max_num_seqs=2)
    res, plans = run(make_trace([(0.0, 2, 2), (0.0, 2, 3), (0.0, 2, 1)]), sched)
    assert column(res, "num_running") == [2, 2, 2]
    assert res.requests["first_token_s"].round(9).tolist() == [0.1, 0.1, 0.3]


def test_preemption_recomputes_the_last_admitted_and_admits_nothing_in_that_step():
    # blocks of 2, 4 usable: r0 (4 tokens) and r1 (3) fill the pool; r0's first decode
    # needs a block: r1, the last admitted, is preempted (its blocks freed, back to the
    # front of waiting). It waits for memory while r0 grows into its freed blocks
    # (evicting them), and comes back when r0 is done, recomputing prompt + 1 token.
    sched, _ = v1(5, block_size=2)
    res, plans = run(make_trace([(0.0, 4, 4), (0.0, 3, 4)]), sched)
    assert column(res, "num_prefill_tokens") == [7, 0, 0, 0, 4, 0, 0]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 1, 0, 1, 1]
    assert column(res, "num_waiting") == [0, 1, 1, 1, 0, 0, 0]
    assert plans[4][:3] == (1, 4, 4)  # nothing left in the prefix cache
    req = res.requests.set_index("request_id")
    assert req["num_preemptions"].tolist() == [0, 1]
    assert req["first_token_s"].round(9).tolist() == [0.1, 0.1]  # the first token time survives
    assert req["finish_s"].round(9).tolist() == [0.4, 0.7]
    assert res.summary["num_preemptions"] == 1


def test_a_preempted_request_finds_its_blocks_in_the_prefix_cache():
    # blocks of 2, 5 usable: r1 preempts itself at its first decode (it is the last);
    # its two full prompt blocks stay cached, free; it waits while they and one more
    # block do not fit; when r0 ends it takes them back and computes one token
    sched, alloc = v1(6, block_size=2)
    res, plans = run(make_trace([(0.0, 4, 3), (0.0, 4, 3)]), sched)
    assert column(res, "num_prefill_tokens") == [8, 0, 0, 1, 0]
    assert column(res, "num_decode_tokens") == [0, 1, 1, 0, 1]
    assert column(res, "prefix_hit_tokens") == [0, 0, 0, 4, 0]
    assert plans[3][:3] == (1, 1, 5)  # 1 new token over 4 cached + itself
    req = res.requests.set_index("request_id")
    assert req["num_preemptions"].tolist() == [0, 1]
    assert req["num_cached_tokens"].tolist() == [0, 4]
    assert req["finish_s"].round(9).tolist() == [0.3, 0.5]
    assert alloc.prefix_cache.hit_tokens == 4


@pytest.mark.parametrize("reserve", [True, False])
def test_reserve_full_prompt_waits_for_the_whole_prompt_v0_15_admits_a_chunk(reserve):
    # budget 2, blocks of 2, 4 usable: r1's 6-token prompt needs 3 blocks; v0.19 waits for
    # them; v0.15.1 admits its first chunk, then r0's growth preempts it
    sched, _ = v1(5, block_size=2, max_num_batched_tokens=2, reserve_full_prompt=reserve)
    res, plans = run(make_trace([(0.0, 2, 6), (0.0, 6, 2)]), sched)
    req = res.requests.set_index("request_id")
    assert req["first_token_s"].round(9).tolist() == [0.1, 0.9]
    if reserve:
        assert column(res, "num_running") == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
        assert req["num_preemptions"].tolist() == [0, 0]
    else:
        assert column(res, "num_running") == [1, 2, 2, 1, 1, 1, 1, 1, 1, 1]
        assert column(res, "num_prefill_tokens")[:3] == [2, 1, 1]
        assert req["num_preemptions"].tolist() == [0, 1]


def test_shared_prompt_blocks_are_hits_for_later_requests():
    system = (7, 8)
    rows = [(0.0, 10, 2), (0.5, 11, 2)]
    trace = make_trace(rows)
    trace.table["segments"] = [(system, (100, 2)), (system, (101, 3))]
    sched, alloc = v1(16)
    res, plans = run(trace, sched)
    assert res.requests["num_cached_tokens"].tolist() == [0, 8]
    assert plans[-2][:3] == (1, 3, 11)
    assert 0 < res.summary["prefix_hit_rate"] < 1
    off, _ = v1(16, caching=False)
    assert run(trace, off)[0].requests["num_cached_tokens"].tolist() == [0, 0]


def test_what_it_cannot_serve_is_rejected_with_a_reason():
    sched, _ = v1(6, max_model_len=24)
    trace = make_trace([(0.0, 4, 2, 2), (0.0, 24, 1), (0.0, 20, 8), (0.0, 23, 1), (0.0, 3, 2)])
    res, plans = run(trace, sched)
    req = res.requests.set_index("request_id")
    assert req["status"].tolist() == ["rejected"] * 4 + ["finished"]
    assert "one sequence per request" in req.loc[0, "reason"]
    assert "shorter than max_model_len" in req.loc[1, "reason"]
    assert "cut the output short" in req.loc[2, "reason"]
    assert "5 usable blocks" in req.loc[3, "reason"]


class PlainVllmV1(VllmV1Scheduler):
    """Every request advanced one by one (no decode clock, no steady runs)."""

    rides_clock = False


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_decode_clock_changes_no_result(monkeypatch, seed):
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 120, "shared_prefix_len": 40},
        "arrivals": {"process": "poisson", "rate_req_s": 8.0},
        "hardware": {"kv_slots": 3000 + 1500 * seed},
        "allocator": {"kind": "paged-v1"},
        "scheduler": {
            "kind": "vllm-v1",
            "max_num_batched_tokens": 384 + 256 * seed,
            "reserve_full_prompt": seed != 1,
            "long_prefill_token_threshold": 96 * (seed % 2),
            "async_scheduling": seed != 1,
        },
        "seed": seed,
        "check_invariants": True,
        "metrics": {"every_step": True},
    }
    fast = simulate(run_spec_from_dict(doc))
    monkeypatch.setitem(SCHEDULERS, "vllm-v1", PlainVllmV1)
    plain = simulate(run_spec_from_dict(doc))
    assert fast.requests.equals(plain.requests)
    assert fast.timeseries.equals(plain.timeseries)
    assert fast.extra["num_steps"] == plain.extra["num_steps"]


@pytest.mark.parametrize("is_async", [False, True])
def test_async_scheduling_admits_a_request_that_arrived_during_a_step_one_step_later(is_async):
    # steps of 0.1 s; r1 arrives at 0.25, while the step [0.2, 0.3] runs. Without async
    # scheduling the step at 0.3 admits it (first token 0.4); with it, the step at 0.3
    # was scheduled at 0.2, so r1 joins the step at 0.4 (first token 0.5). r2 arrives at
    # 5.0 with nothing running: scheduled at once either way (first token 5.1).
    sched, _ = v1(32, async_scheduling=is_async)
    res, _ = run(make_trace([(0.0, 2, 10), (0.25, 2, 3), (5.0, 2, 2)]), sched)
    req = res.requests.set_index("request_id")
    late = 0.1 if is_async else 0.0
    assert req["first_token_s"].round(9).tolist() == [0.1, round(0.4 + late, 9), 5.1]
    assert req["finish_s"].round(9).tolist() == [1.0, round(0.6 + late, 9), 5.2]


def test_async_scheduling_counts_from_when_a_request_reaches_the_scheduler():
    # a front-end delay of 0.1 s: r1 (arrival 0.12) reaches the scheduler at 0.22, during
    # the step [0.2, 0.3]: the step at 0.4 admits it
    sched, _ = v1(32, async_scheduling=True)
    steps = Steps()
    res = run_engine(
        make_trace([(0.0, 2, 10), (0.12, 2, 3)]),
        sched,
        steps,
        check_invariants=True,
        every_step=True,
        arrival_delay_s=0.1,
    )
    assert res.requests["first_token_s"].round(9).tolist() == [0.2, 0.5]


class Squeezed(VllmV1Scheduler):
    """Its budget drops to 2 tokens at its third step (and every step is scheduled)."""

    budgets = [8, 8, 2]

    def schedule(self, now_s):
        self.max_num_batched_tokens = self.budgets.pop(0) if self.budgets else 8
        return super().schedule(now_s)

    def steady_ticks(self):
        return 0


def test_a_request_the_budget_does_not_reach_gets_no_token_and_keeps_its_place(monkeypatch):
    # three decoding requests; the budget drops to 2 for one step: the third gets no
    # token in it (it leaves the decode clock), and decodes again in the next
    monkeypatch.setitem(SCHEDULERS, "vllm-v1", Squeezed)
    sched, _ = v1(16)
    res, plans = run(make_trace([(0.0, 2, 4), (0.0, 2, 4), (0.0, 2, 4)]), sched)
    assert column(res, "num_decode_tokens") == [0, 3, 2, 3, 1]
    req = res.requests.set_index("request_id")
    assert req["finish_s"].round(9).tolist() == [0.4, 0.4, 0.5]


def test_spec_keys_belong_to_vllm_v1_and_paged_v1():
    doc = {"scheduler": {"kind": "vllm-v1"}, "allocator": {"kind": "paged-v1"}}
    spec = run_spec_from_dict(doc)
    assert spec.allocator.prefix_caching is True  # V1 caches unless told not to
    assert spec.scheduler.reserve_full_prompt is None  # the release's rule; on without one
    assert spec.scheduler.long_prefill_token_threshold == 0
    off = run_spec_from_dict({**doc, "allocator": {"kind": "paged-v1", "prefix_caching": False}})
    assert off.allocator.prefix_caching is False
    assert run_spec_from_dict({}).allocator.prefix_caching is False  # paged: vLLM v0's default
    with pytest.raises(
        ConfigError, match="needs vLLM V1's KV cache manager \\(paged-v1\\), got 'paged'"
    ):
        run_spec_from_dict({"scheduler": {"kind": "vllm-v1"}})
    with pytest.raises(
        ConfigError, match="'vllm' needs a paged allocator \\(paged\\), got 'paged-v1'"
    ):
        run_spec_from_dict({"allocator": {"kind": "paged-v1"}})
    with pytest.raises(ConfigError, match="long_prefill_token_threshold is a rule of vLLM V1"):
        run_spec_from_dict({"scheduler": {"long_prefill_token_threshold": 64}})
    with pytest.raises(ConfigError, match="reserve_full_prompt is a rule of vLLM V1"):
        run_spec_from_dict({"scheduler": {"kind": "vllm", "reserve_full_prompt": False}})
    with pytest.raises(ConfigError, match="recompute only"):
        run_spec_from_dict({**doc, "scheduler": {"kind": "vllm-v1", "preemption_mode": "swap"}})
    with pytest.raises(ConfigError, match="cannot be greater than max_model_len"):
        run_spec_from_dict(
            {**doc, "scheduler": {"kind": "vllm-v1", "long_prefill_token_threshold": 4096}}
        )
    with pytest.raises(ConfigError, match="watermark does not apply to paged-v1"):
        run_spec_from_dict({**doc, "allocator": {"kind": "paged-v1", "watermark": 0.05}})
    with pytest.raises(ConfigError, match="swap_space_gib does not apply to paged-v1"):
        run_spec_from_dict({**doc, "allocator": {"kind": "paged-v1", "swap_space_gib": 1.0}})
    # a dumped spec reads back
    full = run_spec_from_dict(
        {**doc, "scheduler": {"kind": "vllm-v1", "long_prefill_token_threshold": 64}}
    )
    assert run_spec_from_dict(full.model_dump(mode="json")) == full
    assert run_spec_from_dict(RunSpec().model_dump(mode="json")) == RunSpec()
    with pytest.raises(ConfigError, match="pinned is the paper prototype's rule"):
        simulate(
            run_spec_from_dict(
                {**doc, "allocator": {"kind": "paged-v1", "prefix_caching": "pinned"}}
            )
        )


def test_the_pool_is_the_engine_num_gpu_blocks():
    """A server's pool: ``hardware.kv_slots`` = its "GPU KV cache size" in tokens,
    ``num_gpu_blocks`` x ``block_size``; the null block is one of them."""
    from pagesim.allocators import make_allocator
    from pagesim.simulator.memory import kv_pool

    spec = run_spec_from_dict(
        {
            "hardware": {"kv_slots": 2_000 * 16},
            "allocator": {"kind": "paged-v1", "block_size": 16},
            "scheduler": {"kind": "vllm-v1"},
        }
    )
    pool = kv_pool(spec.hardware, swap_space_gib=spec.allocator.swap_space_gib)
    alloc = make_allocator(
        spec.allocator,
        capacity_slots=pool.capacity_slots,
        cpu_capacity_slots=pool.cpu_capacity_slots,
        max_model_len=spec.max_model_len,
    )
    assert (alloc.num_total_blocks, alloc.num_usable_blocks) == (2_000, 1_999)


def test_without_chunked_prefill_a_prompt_runs_whole_or_waits():
    """Rule 7 (--no-enable-chunked-prefill). Budget 8: r0 (5) runs; r1 (6) does not fit
    the 3 left and waits (no first chunk); at 0.1 r0 decodes and r1 runs whole; r2 (12
    tokens + 4 out) can never fit the budget: rejected with the reason. With chunking (the
    default) r1 takes a first chunk of 3 in the first step and the rest in the second."""
    trace = [(0.0, 5, 3), (0.0, 6, 2), (0.1, 12, 4)]
    sched, _ = v1(17, max_num_batched_tokens=8, chunked_prefill=False)
    res, _ = run(make_trace(trace), sched)
    assert column(res, "num_prefill_tokens")[:2] == [5, 6]
    assert column(res, "num_decode_tokens")[:2] == [0, 1]
    req = res.requests.set_index("request_id")
    assert req["first_token_s"].round(9).tolist()[:2] == [0.1, 0.2]
    assert req.loc[2, "status"] == "rejected"
    assert "without chunked prefill" in req.loc[2, "reason"]
    chunked, _ = v1(17, max_num_batched_tokens=8)
    res, _ = run(make_trace(trace[:2]), chunked)
    assert column(res, "num_prefill_tokens")[:2] == [8, 3]


def test_chunked_prefill_true_belongs_to_vllm_v1():
    with pytest.raises(ConfigError, match="chunked_prefill: 'vllm' computes each prompt whole"):
        run_spec_from_dict({"scheduler": {"kind": "vllm", "chunked_prefill": True}})
    spec = run_spec_from_dict({"scheduler": {"kind": "vllm", "chunked_prefill": False}})
    assert spec.scheduler.chunked_prefill is False
