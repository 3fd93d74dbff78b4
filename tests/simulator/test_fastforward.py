"""Fast-forward against the step engine: the same runs, the same results.

Differential: seeded random configurations (seed, rate, pool small enough to preempt,
block size, n, beam width, prefix caching, preemption mode, every scheduler and
allocator, sample interval, time limit) run with ``engine: step`` and ``engine: fast``;
per-request rows, summaries and time series must agree (counts exactly, times to
1e-9 relative). Configurations fast-forward declines must agree trivially.
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


@pytest.mark.parametrize("seed", range(24))
def test_fast_equals_step_on_random_configs(seed):
    step, fast = run_both(random_doc(seed))
    assert_same(step, fast)


@pytest.mark.parametrize("kv_slots", [1024, 4096, 65536])
@pytest.mark.parametrize("rate", [2.0, 50.0])
def test_vllm_single_sequence_runs_are_mostly_fast_forwarded(kv_slots, rate):
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 60},
        "arrivals": {"rate_req_s": rate},
        "hardware": {"kv_slots": kv_slots},
        "check_invariants": True,
        "seed": 3,
    }
    step, fast = run_both(doc)
    assert_same(step, fast)
    assert "num_fast_forwarded_steps" not in step.extra
    assert fast.extra["num_fast_forwarded_steps"] > 0.5 * fast.extra["num_steps"]


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
