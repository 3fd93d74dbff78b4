"""simulate() and the engine: determinism, rejection paths, time limit, same-time order,
and the Orca / static schedulers over the real allocators."""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest
from sim_fakes import TinyPaged, constant_step, make_trace

from pagesim.allocators import make_allocator
from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError
from pagesim.simulator import METRIC_COLUMNS, REQUEST_COLUMNS, simulate
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import SchedulerSpec, run_spec_from_dict
from pagesim.simulator.vllm_metrics import vllm_metric_columns


def small_spec(**overrides):
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 60},
        "arrivals": {"rate_req_s": 4.0},
        "hardware": {"kv_slots": 4096},
        "check_invariants": True,
        "seed": 7,
    }
    doc.update(overrides)
    return run_spec_from_dict(doc)


def test_same_spec_gives_identical_results():
    spec = small_spec(workload={"name": "sharegpt", "num_requests": 40, "n": 2})
    a, b = simulate(spec), simulate(spec)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    strip = lambda s: {k: v for k, v in s.items() if k != "sim_wall_s"}  # noqa: E731
    assert strip(a.summary) == strip(b.summary)
    assert list(a.summary) == [*METRIC_COLUMNS, *vllm_metric_columns(spec.metrics)]
    assert list(a.requests.columns) == list(REQUEST_COLUMNS)
    c = simulate(small_spec(seed=8, workload={"name": "sharegpt", "num_requests": 40, "n": 2}))
    assert not c.requests.equals(a.requests)


@pytest.mark.parametrize(
    "alloc, sched",
    [
        ("paged", "vllm"),
        ("max", "orca"),
        ("pow2", "orca"),
        ("oracle", "orca"),
        ("oracle", "static"),
    ],
)
def test_every_request_ends_and_invariants_hold(alloc, sched):
    res = simulate(small_spec(allocator={"kind": alloc}, scheduler={"kind": sched}))
    assert len(res.requests) == 60
    assert (res.requests["status"] == "finished").all()
    assert res.summary["num_finished"] == 60
    total = sum(res.summary[c] for c in METRIC_COLUMNS if c.startswith("mem_"))
    assert total == pytest.approx(1.0)


def test_max_allocator_with_a_pool_below_max_model_len_is_a_config_error():
    with pytest.raises(ConfigError, match="max_model_len = 2048"):
        simulate(
            small_spec(
                hardware={"kv_slots": 2000}, allocator={"kind": "max"}, scheduler={"kind": "orca"}
            )
        )


@pytest.mark.parametrize(
    "alloc, sched", [("paged", "vllm"), ("oracle", "orca"), ("oracle", "static")]
)
def test_a_request_longer_than_the_whole_pool_is_rejected_with_reason(alloc, sched):
    spec = small_spec(
        hardware={"kv_slots": 512}, allocator={"kind": alloc}, scheduler={"kind": sched}
    )
    trace = make_trace([(0.0, 100, 20), (0.1, 600, 10), (0.2, 50, 5)])
    res = simulate(spec, trace=trace)
    req = res.requests.set_index("request_id")
    assert req["status"].tolist() == ["finished", "rejected", "finished"]
    assert req.loc[1, "reason"] != ""
    assert res.summary["num_rejected"] == 1


def test_time_limit_reports_unfinished_requests():
    spec = small_spec(max_sim_time_s=5.0)
    res = simulate(spec)
    assert len(res.requests) == 60
    status = res.requests["status"]
    assert set(status) <= {"finished", "unfinished"}
    assert (status == "unfinished").sum() == res.extra["num_unfinished"] > 0
    late = res.requests[res.requests["arrival_s"] > 5.0]
    assert (late["reason"].str.contains("arrives after")).all()
    assert res.extra["makespan_s"] <= 5.0


def _sched(kind, alloc, **spec):
    return SCHEDULERS[kind](
        SchedulerSpec(**spec), alloc, max_model_len=64, rng=np.random.default_rng(0)
    )


def test_arrivals_at_a_step_boundary_join_that_step():
    # steps of 0.25 s; request 1 arrives exactly when the first step ends (t = 0.25)
    sched = _sched("vllm", TinyPaged(32, 4))
    trace = make_trace([(0.0, 4, 3), (0.25, 4, 2)])
    res = run_engine(trace, sched, constant_step(0.25), every_step=True, check_invariants=True)
    ts = res.timeseries
    assert ts["t_s"].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert ts["num_prefill_tokens"].tolist() == [4, 4, 0, 0]  # admitted at 0.25, not later
    assert res.requests["first_token_s"].tolist() == [0.25, 0.5]


def test_engine_idles_until_the_next_arrival_and_counts_idle_memory():
    sched = _sched("vllm", TinyPaged(32, 4))
    trace = make_trace([(1.0, 4, 2), (3.0, 4, 2)])
    res = run_engine(trace, sched, constant_step(0.5), every_step=True)
    ts = res.timeseries
    assert ts["t_s"].tolist() == [0.0, 1.0, 1.5, 2.0, 3.0, 3.5]
    assert ts["num_steps"].tolist() == [0, 1, 1, 0, 1, 1]
    assert ts["duration_s"].tolist() == [1.0, 0.5, 0.5, 1.0, 0.5, 0.5]
    assert res.extra["makespan_s"] == 3.0  # first arrival at 1.0, last step ends at 4.0
    assert ts["mem_unused_frac"].iloc[0] == 1.0


@pytest.mark.parametrize("max_sim_time_s", [None, 0.3])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_is_paused_during_the_replay_and_restored(enabled, max_sim_time_s):
    """Every step runs with the cyclic collector off; after the run, or a step that
    raises, it is on or off as it was before (``run._cyclic_gc_paused``)."""
    seen: list[bool] = []

    def step_time_s(plan) -> float:
        seen.append(gc.isenabled())
        return 0.1

    def failing(plan) -> float:
        raise RuntimeError("a step fails")

    was_enabled = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        trace = make_trace([(0.0, 4, 3), (0.05, 4, 2)])
        run_engine(
            trace, _sched("vllm", TinyPaged(32, 4)), step_time_s, max_sim_time_s=max_sim_time_s
        )
        assert seen
        assert not any(seen)
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError, match="a step fails"):
            run_engine(trace, _sched("vllm", TinyPaged(32, 4)), failing)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was_enabled else gc.disable)()


def contiguous(kind, slots=256, granule=16):
    spec = AllocatorSpec(kind=kind, granule_slots=granule)
    return make_allocator(spec, capacity_slots=slots, cpu_capacity_slots=0, max_model_len=64)


def test_orca_mixes_new_prefills_with_running_decodes():
    sched = _sched("orca", contiguous("oracle"))
    trace = make_trace([(0.0, 10, 3), (0.15, 6, 2)])
    res = run_engine(trace, sched, constant_step(0.1), every_step=True, check_invariants=True)
    ts = res.timeseries
    # t=0: prefill r0; t=0.1: decode r0; t=0.2: decode r0 + prefill r1 (mixed); t=0.3: decode r1
    assert ts["num_prefill_tokens"].tolist() == [10, 0, 6, 0]
    assert ts["num_decode_tokens"].tolist() == [0, 1, 1, 1]
    assert ts["batch_size"].tolist() == [1, 1, 2, 1]


def test_orca_max_admits_only_what_fits_max_model_len_reservations():
    # 256 slots / 64-slot Max reservations: 4 requests at a time, the 5th waits (LATER)
    sched = _sched("orca", contiguous("max"))
    trace = make_trace([(0.0, 4, 3)] * 5)
    res = run_engine(trace, sched, constant_step(0.1), every_step=True, check_invariants=True)
    ts = res.timeseries
    assert ts["num_prefill_tokens"].tolist() == [16, 0, 0, 4, 0, 0]
    assert ts["mem_external_frag_frac"].iloc[0] == 0.0  # every slot reserved: nothing free
    assert ts["num_waiting"].tolist()[:3] == [1, 1, 1]


def test_static_batches_wait_for_the_whole_batch():
    sched = _sched("static", contiguous("oracle"), max_batch_size=2)
    trace = make_trace([(0.0, 4, 2), (0.0, 4, 4), (0.0, 4, 1)])
    res = run_engine(trace, sched, constant_step(0.1), every_step=True, check_invariants=True)
    ts = res.timeseries
    # batch {0, 1}: prefill, then decodes until r1's 4th token; r0 leaves the decode batch
    assert ts["num_prefill_tokens"].tolist() == [8, 0, 0, 0, 4]
    assert ts["num_decode_tokens"].tolist() == [0, 2, 1, 1, 0]
    req = res.requests.set_index("request_id")
    assert req["finish_s"].round(9).tolist() == [0.4, 0.4, 0.5]  # results return with the batch
    assert req["first_token_s"].round(9).tolist() == [0.1, 0.1, 0.5]


def test_paged_allocator_through_vllm_scheduler_with_beams_and_samples():
    spec = AllocatorSpec(kind="paged", block_size=4, watermark=0.0)
    alloc = make_allocator(spec, capacity_slots=96, cpu_capacity_slots=96, max_model_len=64)
    sched = _sched("vllm", alloc)
    trace = make_trace([(0.0, 6, 6, 3), (0.0, 5, 6, 1, 3), (0.1, 10, 8), (0.2, 7, 6, 2)])
    res = run_engine(trace, sched, constant_step(0.1), every_step=True, check_invariants=True)
    assert (res.requests["status"] == "finished").all()
    assert res.extra["num_copied_blocks"] > 0


@pytest.mark.parametrize("kind", ["orca", "static"])
def test_beam_search_on_contiguous_reservations(kind):
    sched = _sched(kind, contiguous("oracle", slots=512))
    trace = make_trace([(0.0, 6, 12, 1, 4), (0.0, 5, 9, 1, 3)])
    res = run_engine(trace, sched, constant_step(0.1), every_step=True, check_invariants=True)
    assert (res.requests["status"] == "finished").all()
    assert res.timeseries["num_decode_tokens"].max() == 7  # 4 + 3 beams decoding together


def count_schedule_calls(monkeypatch, cls) -> list[float]:
    """The times at which ``cls.schedule`` is called from now on (a list that fills)."""
    calls: list[float] = []
    original = cls.schedule

    def counted(self, now_s):
        calls.append(now_s)
        return original(self, now_s)

    monkeypatch.setattr(cls, "schedule", counted)
    return calls


@pytest.mark.parametrize(
    ("scheduler", "allocator"), [("vllm", "paged"), ("orca", "oracle"), ("orca", "max")]
)
@pytest.mark.pure_python
def test_steady_decodes_skip_schedule(monkeypatch, scheduler, allocator):
    """When nothing waits, the decode steps between admissions (finishes included) run as
    steady decode spans: ``schedule()`` is called about once per admission, not per step."""
    calls = count_schedule_calls(monkeypatch, SCHEDULERS[scheduler])
    spec = small_spec(
        arrivals={"rate_req_s": 0.5},
        scheduler={"kind": scheduler},
        allocator={"kind": allocator},
        hardware={"kv_slots": 16384},
        check_invariants=False,
    )
    result = simulate(spec)
    assert result.summary["num_finished"] == 60
    num_steps = int(result.timeseries["num_steps"].sum())
    # an idle engine's check before an arrival, the prefill, and a few stragglers
    assert len(calls) <= 2 * 60 + 5
    assert num_steps > 10 * len(calls)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"scheduler": {"kind": "vllm", "preemption_mode": "swap"}},
        {"allocator": {"kind": "paged", "block_size": 8, "watermark": 0.05}},
        {"workload": {"name": "sharegpt", "num_requests": 120, "n": 2}},
        {
            "workload": {
                "name": "synthetic",
                "num_requests": 120,
                "prompt": {"dist": "lognormal", "mean": 400.0, "cv": 0.5},
                "output": {"dist": "lognormal", "mean": 3.0, "cv": 1.0},
                "min_len": 1,  # prompts that finish in their prefill step free memory
            }
        },
        {"arrivals": {"process": "poisson", "rate_req_s": 30.0}},
        {
            "arrivals": {"process": "poisson", "rate_req_s": 30.0},
            "scheduler": {"kind": "vllm", "max_num_batched_tokens": 1024},
        },
    ],
    ids=[
        "recompute",
        "swap",
        "watermark",
        "parallel",
        "short-outputs",
        "arrivals",
        "arrivals-budget",
    ],
)
@pytest.mark.pure_python
def test_steady_behind_a_blocked_head(monkeypatch, overrides):
    """vllm: while the head of the queue waits for memory (after a prefill step that
    stopped there, after groups finished without freeing enough, and as requests
    arrive behind it), the decode steps run as steady spans without ``schedule()``.
    The results are those of calling ``schedule()`` there (the rule switched off) and
    the calls are fewer."""
    with_rule, calls_with_rule, calls_without = _switched_off(
        monkeypatch, SCHEDULERS["vllm"], "steady_behind_blocked_head", _burst_spec(overrides)
    )
    assert with_rule.summary["num_finished"] > 100
    # forked samples share their last block, so their spans stop at the first step
    if "n" in overrides.get("workload", {}):
        assert calls_with_rule <= calls_without
    else:
        assert calls_with_rule < calls_without


def _switched_off(monkeypatch, cls, flag: str, spec):
    """Run ``spec``, then again with the scheduler class's ``flag`` off: the results
    must agree; returns the first run and both runs' ``schedule()`` calls."""
    calls = count_schedule_calls(monkeypatch, cls)
    with_rule = simulate(spec)
    calls_with_rule = len(calls)
    monkeypatch.setattr(cls, flag, False)
    calls.clear()
    _same_run(with_rule, simulate(spec))
    return with_rule, calls_with_rule, len(calls)


def _burst_spec(overrides: dict, *, check_invariants: bool = False):
    """120 ShareGPT requests at t = 0 on a 4,096-slot pool, with ``overrides``."""
    return small_spec(
        **{
            "workload": {"name": "sharegpt", "num_requests": 120},
            "arrivals": {"process": "burst"},
            "hardware": {"kv_slots": 4096},
            "check_invariants": check_invariants,
            **overrides,
        }
    )


def _same_run(a, b) -> None:
    """Two runs' requests table, time series, summary (but its wall time) and steps agree."""
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    strip = lambda s: {k: v for k, v in s.items() if k != "sim_wall_s"}  # noqa: E731
    assert strip(a.summary) == strip(b.summary)
    assert a.extra["num_steps"] == b.extra["num_steps"]


_SHORTCUT_CASES = {
    "recompute": {},
    "swap": {"scheduler": {"kind": "vllm", "preemption_mode": "swap"}},
    "watermark": {"allocator": {"kind": "paged", "block_size": 8, "watermark": 0.05}},
    "parallel": {"workload": {"name": "sharegpt", "num_requests": 120, "n": 2}},
    "beams": {
        "workload": {"name": "alpaca-like", "num_requests": 80, "beam_width": 3},
        "hardware": {"kv_slots": 1024},
    },
    "prefix-caching": {
        "workload": {"name": "sharegpt", "num_requests": 120, "shared_prefix_len": 64},
        "allocator": {"kind": "paged", "block_size": 16, "prefix_caching": True},
    },
    "short-outputs": {
        "workload": {
            "name": "synthetic",
            "num_requests": 120,
            "prompt": {"dist": "lognormal", "mean": 400.0, "cv": 0.5},
            "output": {"dist": "lognormal", "mean": 3.0, "cv": 1.0},
            "min_len": 1,
        }
    },
    "arrivals-budget": {
        "arrivals": {"process": "poisson", "rate_req_s": 30.0},
        "scheduler": {"kind": "vllm", "max_num_batched_tokens": 1024},
    },
    "vllm-paper": {"scheduler": {"kind": "vllm-paper"}},
    "vllm-paper-swap": {"scheduler": {"kind": "vllm-paper", "preemption_mode": "swap"}},
}


@pytest.mark.pure_python
@pytest.mark.parametrize("case", list(_SHORTCUT_CASES))
def test_steady_after_a_plain_step(monkeypatch, case):
    """After a step in which no group finished, forked or started riding (a step that
    preempted, for one), the scheduler's steady rule is asked too, so the next decode
    steps run as a span instead of ``schedule()`` calls. The results are those of
    calling ``schedule()`` there (the rule switched off), and the calls are no more."""
    overrides = _SHORTCUT_CASES[case]
    kind = overrides.get("scheduler", {}).get("kind", "vllm")
    with_rule, calls_with_rule, calls_without = _switched_off(
        monkeypatch, SCHEDULERS[kind], "steady_after_plain_step", _burst_spec(overrides)
    )
    assert with_rule.summary["num_finished"] > 60
    assert calls_with_rule <= calls_without
    if case in ("recompute", "watermark"):  # these preempt by recompute behind a blocked head
        assert calls_with_rule < calls_without


@pytest.mark.pure_python
@pytest.mark.parametrize("case", list(_SHORTCUT_CASES))
def test_reused_head_verdicts(monkeypatch, case):
    """vllm's admission checks reuse the allocator's answers that cannot have changed (a
    head answered LATER until memory is given back; the head checked after an advance,
    in the next ``schedule()``): the results are those of asking every time (the reuse
    switched off), with fewer questions, and with the invariants checked."""
    from pagesim.allocators.paged import PagedAllocator

    overrides = _SHORTCUT_CASES[case]
    kind = overrides.get("scheduler", {}).get("kind", "vllm")
    spec = _burst_spec(overrides, check_invariants=True)
    asked: list[object] = []
    original = PagedAllocator.can_allocate

    def counted(self, req, true_output_len=None):
        asked.append(req.group_id)
        return original(self, req, true_output_len)

    monkeypatch.setattr(PagedAllocator, "can_allocate", counted)
    with_reuse = simulate(spec)
    num_asked = len(asked)
    monkeypatch.setattr(SCHEDULERS[kind], "reuse_head_verdicts", False)
    asked.clear()
    _same_run(with_reuse, simulate(spec))
    assert with_reuse.summary["num_finished"] > 60
    assert num_asked < len(asked)


_COPYING_CASES = {
    "n=2": {"workload": {"name": "sharegpt", "num_requests": 60, "n": 2}},
    "n=4, every step": {
        "workload": {"name": "alpaca-like", "num_requests": 80, "n": 4},
        "arrivals": {"rate_req_s": 8.0},
        "metrics": {"every_step": True},
    },
    "n=3, short windows, time limit": {
        "workload": {"name": "alpaca-like", "num_requests": 80, "n": 3},
        "arrivals": {"rate_req_s": 8.0},
        "metrics": {"sample_interval_s": 0.05},
        "max_sim_time_s": 6.0,
    },
    "n=4, swap, block 8": {
        "workload": {"name": "sharegpt", "num_requests": 60, "n": 4},
        "hardware": {"kv_slots": 2048},
        "allocator": {"kind": "paged", "block_size": 8},
        "scheduler": {"kind": "vllm", "preemption_mode": "swap"},
    },
    "n=2, orca": {
        "workload": {"name": "sharegpt", "num_requests": 60, "n": 2},
        "scheduler": {"kind": "orca"},
        "allocator": {"kind": "oracle"},
    },
}


@pytest.mark.pure_python
@pytest.mark.parametrize("case", list(_COPYING_CASES))
def test_copying_steps_run_in_spans(monkeypatch, case):
    """A decode step whose appends copy blocks (forks writing into their shared last
    block) runs inside a decode span (``append_all_copying``), with the invariants
    checked at every step: the results are those of taking it through ``schedule()``
    (the fused call switched off), and in the paged cases there are fewer calls."""
    from pagesim.allocators.base import KVAllocator

    spec = small_spec(**_COPYING_CASES[case])
    kind = spec.scheduler.kind
    calls = count_schedule_calls(monkeypatch, SCHEDULERS[kind])
    in_spans = simulate(spec)
    calls_in_spans = len(calls)
    monkeypatch.setattr(KVAllocator, "append_all_copying", lambda self, is_blocked: None)
    calls.clear()
    _same_run(in_spans, simulate(spec))
    assert in_spans.summary["num_finished"] > 20
    if kind == "vllm":
        assert in_spans.timeseries["num_copied_blocks"].sum() > 0
        assert calls_in_spans < len(calls)
    else:
        assert calls_in_spans <= len(calls)


def _ended_groups(trace):
    """The trace's groups, ended by hand: finished (times 1.0 / 3.0), rejected, unfinished."""
    from pagesim.simulator.run import _groups

    groups = list(_groups(trace))
    statuses = ("finished", "finished", "rejected", "unfinished")
    for group, status in zip(groups, statuses, strict=False):
        group.status = status
        group.reason = "" if status == "finished" else f"{status} here"
        group.first_token_s, group.finish_s = 1.0, 3.0
    return groups


def test_request_table_rows_follow_the_formulas_in_request_id_order():
    from pagesim.simulator.request_log import RequestLog

    trace = make_trace([(0.5, 16, 5), (0.5, 8, 1), (1.0, 8, 4), (2.0, 4, 4)])
    log = RequestLog()
    for group in reversed(_ended_groups(trace)):
        log.add(group)
    table = log.frame(trace.table)
    assert list(table.columns) == list(REQUEST_COLUMNS)
    assert table["request_id"].tolist() == [0, 1, 2, 3]
    assert table["status"].tolist() == ["finished", "finished", "rejected", "unfinished"]
    assert table["ttft_s"].tolist()[:2] == [0.5, 0.5]
    assert table["tpot_s"].tolist()[0] == (3.0 - 1.0) / 4
    assert table["normalized_latency_s_per_tok"].tolist()[:2] == [2.5 / 5, 2.5 / 1]
    assert np.isnan(table["tpot_s"].iloc[1])  # a one-token output has no TPOT
    assert table[["first_token_s", "ttft_s", "e2e_s"]].iloc[2:].isna().all().all()
    ints = ["request_id", "prompt_len", "output_len", "n", "beam_width", "num_preemptions"]
    assert (table[ints].dtypes == np.int64).all()


def test_a_request_that_never_ended_is_an_error_not_a_missing_row():
    from pagesim.errors import InvariantError
    from pagesim.simulator.request_log import RequestLog

    trace = make_trace([(0.0, 16, 5), (0.0, 8, 1), (1.0, 8, 4)])
    log = RequestLog()
    for group in _ended_groups(trace)[:2]:
        log.add(group)
    with pytest.raises(InvariantError, match="1 never ended"):
        log.frame(trace.table)
