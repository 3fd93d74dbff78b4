"""The fast engine against the step engine: the same runs, the same results.

Differential: seeded random configurations run with ``engine: step`` and ``engine:
fast``; per-request rows, summaries, extras and time series must agree (counts
exactly, times to 1e-9 relative).

- ``random_doc``: every scheduler and allocator, parallel sampling, beam search,
  prefix caching (the fast engine falls back to the step engine outside its scope;
  those must agree trivially, and ``extra["fast_engine"]`` says which ran);
- ``orca_doc``: Orca over every reservation policy and heap, in the fast engine;
- ``in_scope_doc``: vllm in the fast engine (paged, one sequence per request)
  stressed: pools small enough to preempt on every step, recompute and swap, CPU swap
  space too small (aborts), watermarks, ``max_num_seqs`` and token budgets that bind,
  prompts over the limit, every arrival process, time limits, ``every_step``,
  invariant checking.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

RTOL = 1e-9


def run_both(doc: dict):
    step = simulate(run_spec_from_dict({**doc, "engine": "step"}))
    fast = simulate(run_spec_from_dict({**doc, "engine": "fast"}))
    return step, fast


def assert_same(step, fast) -> None:
    req_a, req_b = step.requests, fast.requests
    assert list(req_a.columns) == list(req_b.columns)
    for col in req_a.columns:
        a, b = req_a[col], req_b[col]
        if pd.api.types.is_float_dtype(a):
            np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), rtol=RTOL, atol=0, err_msg=col)
        else:
            assert a.tolist() == b.tolist(), col
    pd.testing.assert_frame_equal(
        step.timeseries, fast.timeseries, check_exact=False, rtol=RTOL, atol=1e-12
    )
    for key, a in step.summary.items():
        if key == "sim_wall_s":
            continue
        b = fast.summary[key]
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL), key
    for key, a in step.extra.items():
        assert math.isclose(a, fast.extra[key], rel_tol=RTOL), key


def random_doc(seed: int) -> dict:
    """One random small configuration; ``seed`` picks every choice and the run's seed."""
    rng = np.random.default_rng(seed)
    sched = str(rng.choice(["vllm", "vllm", "vllm", "orca", "static"]))
    alloc = "paged" if sched == "vllm" else str(rng.choice(["max", "pow2", "oracle"]))
    sharing = str(rng.choice(["none", "none", "none", "n", "beam"]))
    num_requests = int(rng.integers(30, 90) if sched == "vllm" else rng.integers(10, 30))
    workload = {"name": "sharegpt", "num_requests": num_requests}
    if sharing == "n":
        workload["n"] = int(rng.integers(2, 5))
    elif sharing == "beam":
        workload["beam_width"] = int(rng.integers(2, 5))
    allocator = {"kind": alloc}
    if alloc == "paged":
        allocator["block_size"] = int(rng.choice([1, 8, 16, 32]))
        if rng.random() < 0.3:
            allocator["prefix_caching"] = True
            workload["shared_prefix_len"] = int(rng.choice([32, 64]))
    doc = {
        "workload": workload,
        "arrivals": {"rate_req_s": float(rng.choice([1.0, 4.0, 16.0]))},
        "hardware": {"kv_slots": int(rng.choice([2048, 4096, 16384]))},
        "allocator": allocator,
        "scheduler": {"kind": sched},
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "seed": seed,
    }
    if sched == "vllm":
        doc["scheduler"]["preemption_mode"] = str(rng.choice(["auto", "recompute", "swap"]))
        doc["scheduler"]["max_num_seqs"] = int(rng.choice([8, 64, 256]))
        doc["allocator"]["swap_space_gib"] = float(rng.choice([0.01, 4.0]))
    if rng.random() < 0.2:
        doc["max_sim_time_s"] = float(rng.choice([3.0, 10.0]))
    if rng.random() < 0.1:
        doc["metrics"]["every_step"] = True
    return doc


def in_scope_doc(seed: int) -> dict:
    """A random configuration inside the fast engine's scope, built to hit its events."""
    rng = np.random.default_rng(1000 + seed)
    arrivals = {"process": str(rng.choice(["poisson", "poisson", "gamma", "burst"]))}
    if arrivals["process"] != "burst":
        arrivals["rate_req_s"] = float(rng.choice([1.0, 4.0, 16.0, 64.0]))
    if arrivals["process"] == "gamma":
        arrivals["cv"] = float(rng.choice([0.5, 3.0]))
    doc = {
        "workload": {
            "name": str(rng.choice(["sharegpt", "alpaca-like"])),
            "num_requests": int(rng.integers(20, 100)),
        },
        "arrivals": arrivals,
        "hardware": {"kv_slots": int(rng.choice([300, 700, 1500, 3000, 8000, 60000]))},
        "allocator": {
            "kind": "paged",
            "block_size": int(rng.choice([1, 4, 16, 32, 128])),
            "watermark": float(rng.choice([0.0, 0.01, 0.1])),
            "swap_space_gib": float(rng.choice([0.0005, 0.005, 4.0])),
        },
        "scheduler": {
            "kind": "vllm",
            "preemption_mode": str(rng.choice(["auto", "recompute", "swap"])),
            "max_num_seqs": int(rng.choice([2, 8, 64, 256])),
            "max_num_batched_tokens": int(rng.choice([512, 2560])),
        },
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "max_model_len": int(rng.choice([512, 2048])),
        "seed": seed,
    }
    if rng.random() < 0.25:
        doc["max_sim_time_s"] = float(rng.choice([2.0, 10.0, 30.0]))
    if rng.random() < 0.15:
        doc["metrics"]["every_step"] = True
    if rng.random() < 0.3:
        doc["check_invariants"] = True
    return doc


def orca_doc(seed: int) -> dict:
    """A random Orca configuration (in the fast engine's scope): every reservation
    policy and heap, granule sizes, pools small enough to block and to never fit."""
    rng = np.random.default_rng(2000 + seed)
    policy = str(rng.choice(["max", "pow2", "oracle"]))
    arrivals = {"process": str(rng.choice(["poisson", "gamma", "burst"]))}
    if arrivals["process"] != "burst":
        arrivals["rate_req_s"] = float(rng.choice([1.0, 8.0, 64.0]))
    max_model_len = int(rng.choice([512, 2048]))
    kv_slots = int(rng.choice([300, 1500, 4000, 16000]))
    if policy == "max":
        kv_slots = max(kv_slots, max_model_len)
    doc = {
        "workload": {
            "name": str(rng.choice(["sharegpt", "alpaca-like"])),
            "num_requests": int(rng.integers(20, 80)),
        },
        "arrivals": arrivals,
        "hardware": {"kv_slots": kv_slots},
        "allocator": {
            "kind": policy,
            "placement": str(rng.choice(["buddy", "first_fit"])),
            "granule_slots": int(rng.choice([1, 16, 64])),
        },
        "scheduler": {"kind": "orca", "max_num_seqs": int(rng.choice([2, 8, 256]))},
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "max_model_len": max_model_len,
        "seed": seed,
    }
    if rng.random() < 0.25:
        doc["max_sim_time_s"] = float(rng.choice([2.0, 10.0]))
    if rng.random() < 0.15:
        doc["metrics"]["every_step"] = True
    if rng.random() < 0.3:
        doc["check_invariants"] = True
    return doc


@pytest.mark.parametrize("seed", range(24))
def test_fast_equals_step_on_random_configs(seed):
    step, fast = run_both(random_doc(seed))
    assert_same(step, fast)
    assert "fast_engine" not in step.extra
    assert fast.extra["fast_engine"] in (0.0, 1.0)


@pytest.mark.parametrize("seed", range(40))
def test_fast_equals_step_in_scope(seed):
    step, fast = run_both(in_scope_doc(seed))
    assert fast.extra["fast_engine"] == 1.0
    assert_same(step, fast)


@pytest.mark.parametrize("seed", range(24))
def test_fast_equals_step_orca(seed):
    step, fast = run_both(orca_doc(seed))
    assert fast.extra["fast_engine"] == 1.0
    assert_same(step, fast)


def test_orca_configs_block_and_reject():
    """The Orca differential sees head-of-line blocking (memory-bound batches), requests
    that can never fit (rejected with a reason), and time limits."""
    seen = dict.fromkeys(["never", "unfinished", "memory_bound"], 0)
    for seed in range(24):
        res = simulate(run_spec_from_dict(orca_doc(seed)))
        seen["never"] += any("can never fit" in r for r in res.requests["reason"])
        seen["unfinished"] += res.extra["num_unfinished"] > 0
        seen["memory_bound"] += res.summary["mem_external_frag_frac"] > 0.05
    assert all(seen.values()), seen


def test_in_scope_configs_hit_every_event():
    """The in-scope differential is only as good as the events its configurations
    cause: preemption by recompute and by swap, swap aborts, rejections (prompt limit
    and never-fits), time limits, runs that finish."""
    seen = dict.fromkeys(
        ["recompute", "swap", "abort", "swap_in_never", "prompt_limit", "never", "unfinished"]
        + ["all_finished"],
        0,
    )
    for seed in range(40):
        doc = in_scope_doc(seed)
        res = simulate(run_spec_from_dict(doc))
        req = res.requests
        reasons = req["reason"].tolist()
        if doc["scheduler"]["preemption_mode"] == "swap":
            seen["swap"] += res.summary["num_swapped_blocks"] > 0
        else:
            seen["recompute"] += res.summary["num_preemptions"] > 0
        seen["abort"] += any(r.startswith("aborted: the CPU") for r in reasons)
        seen["swap_in_never"] += any(r.startswith("aborted: the swapped") for r in reasons)
        seen["prompt_limit"] += any(r.startswith("prompt of") for r in reasons)
        seen["never"] += any(r.startswith("needs") for r in reasons)
        seen["unfinished"] += res.extra["num_unfinished"] > 0
        seen["all_finished"] += res.summary["num_finished"] == len(req)
    assert all(seen.values()), seen


def test_out_of_scope_runs_fall_back_and_say_so():
    from pagesim.simulator.fastengine import unsupported_reason
    from pagesim.workloads import build_trace

    cases = {
        "static": {"scheduler": {"kind": "static"}, "allocator": {"kind": "oracle"}},
        "prefix caching": {"allocator": {"prefix_caching": True}},
        "parallel sampling": {"workload": {"name": "alpaca-like", "num_requests": 10, "n": 2}},
    }
    for needle, doc in cases.items():
        spec = run_spec_from_dict({"workload": {"name": "alpaca-like", "num_requests": 10}, **doc})
        trace = build_trace(
            spec.workload,
            spec.arrivals,
            max_model_len=spec.max_model_len,
            rng=np.random.default_rng(0),
        )
        assert needle in unsupported_reason(spec, trace)
        assert simulate(spec).extra["fast_engine"] == 0.0


def test_preemptions_happen_and_agree():
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 80},
        "arrivals": {"process": "burst"},
        "hardware": {"kv_slots": 2048},
        "allocator": {"block_size": 8},
        "seed": 11,
    }
    step, fast = run_both(doc)
    assert step.summary["num_preemptions"] > 0
    assert_same(step, fast)


def test_fast_engine_is_deterministic():
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 50},
        "arrivals": {"rate_req_s": 8.0},
        "hardware": {"kv_slots": 4096},
        "engine": "fast",
        "seed": 5,
    }
    a = simulate(run_spec_from_dict(doc))
    b = simulate(run_spec_from_dict(doc))
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)


def test_unknown_engine_is_a_config_error():
    from pagesim.errors import ConfigError

    with pytest.raises(ConfigError, match="engine"):
        run_spec_from_dict({"engine": "turbo"})
