"""Replicas behind a router: a fleet of one is the single server, round-robin splits a
trace as two single runs of its alternating rows, same spec -> same output, refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.fleet.routers import ROUTERS
from pagesim.simulator.fleet.run import simulate_fleet
from pagesim.simulator.spec import run_spec_from_dict
from pagesim.workloads import build_trace
from pagesim.workloads.trace import Trace

BASE = {
    "workload": {"name": "sharegpt", "num_requests": 120},
    "arrivals": {"process": "poisson", "rate_req_s": 6.0},
    "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 6000},
    "allocator": {"kind": "paged", "block_size": 16, "prefix_caching": True},
    "check_invariants": True,
}


def spec_of(**cluster):
    return run_spec_from_dict({**BASE, "cluster": cluster} if cluster else BASE)


def trace_with_users(spec) -> Trace:
    rng = np.random.default_rng(spec.seed)
    trace = build_trace(spec.workload, spec.arrivals, max_model_len=spec.max_model_len, rng=rng)
    table = trace.table.copy()
    users = (table["request_id"].to_numpy() % 5).astype(np.int64)
    table["user_id"] = users
    return Trace(table, name="with-users")


def comparable(result):
    summary = {k: v for k, v in result.summary.items() if k != "sim_wall_s"}
    requests = result.requests.drop(columns=["replica"], errors="ignore")
    series = result.timeseries.drop(columns=["replica"], errors="ignore")
    return summary, requests, series


def assert_same(a, b):
    sa, ra, ta = comparable(a)
    sb, rb, tb = comparable(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key] == sb[key] or (np.isnan(sa[key]) and np.isnan(sb[key])), key
    pd.testing.assert_frame_equal(ra, rb)
    pd.testing.assert_frame_equal(ta, tb)


@pytest.mark.parametrize("router", list(ROUTERS))
def test_a_fleet_of_one_is_the_single_server(router):
    single = spec_of()
    trace = trace_with_users(single)
    fleet = spec_of(replicas=1, router=router)
    one = simulate_fleet(fleet, trace=trace)
    assert (one.requests["replica"] == 0).all()
    assert_same(simulate(single, trace=trace), one)
    assert one.replicas["num_requests"].tolist() == [trace.num_requests]


def test_round_robin_over_two_replicas_is_two_single_runs_of_alternate_rows():
    """Round-robin reads no state, so each replica replays its own rows as a server alone
    would (request ids renumbered in the same order: FCFS is by id)."""
    single = spec_of()
    trace = trace_with_users(single)
    two = simulate(spec_of(replicas=2, router="round-robin"), trace=trace)
    for replica in (0, 1):
        rows = trace.table.iloc[replica::2].copy()
        rows["request_id"] = np.arange(len(rows), dtype=np.int64)
        alone = simulate(single, trace=Trace(rows.reset_index(drop=True), name="half"))
        mine = two.requests[two.requests["replica"] == replica].reset_index(drop=True)
        for col in ("status", "first_token_s", "finish_s", "num_preemptions", "num_cached_tokens"):
            assert mine[col].tolist() == alone.requests[col].tolist(), col
        row = two.replicas.iloc[replica]
        assert row["num_steps"] == alone.extra["num_steps"]
        assert row["mem_token_frac"] == alone.summary["mem_token_frac"]


@pytest.mark.parametrize("router", list(ROUTERS))
def test_same_spec_and_seed_same_output_for_every_router(router):
    spec = spec_of(replicas=3, router=router, sticky_fallback="least-outstanding")
    trace = trace_with_users(spec)
    a, b = simulate(spec, trace=trace), simulate(spec, trace=trace)
    assert_same(a, b)
    assert a.requests["replica"].tolist() == b.requests["replica"].tolist()
    pd.testing.assert_frame_equal(a.replicas, b.replicas)
    assert sorted(a.requests["replica"].unique().tolist()) == [0, 1, 2]


def test_fleet_summary_is_over_all_requests_and_replicas_add_up():
    result = simulate(spec_of(replicas=3, router="least-outstanding"))
    assert result.summary["num_finished"] == 120
    assert result.replicas["num_requests"].sum() == 120
    assert result.replicas["num_finished"].sum() == 120
    assert result.extra["num_steps"] == result.replicas["num_steps"].sum()
    assert set(result.timeseries["replica"]) == {0, 1, 2}
    assert result.extra["kv_capacity_slots"] == 3 * result.replicas["kv_capacity_slots"][0]


def test_time_limit_reports_every_request_of_the_fleet():
    spec = run_spec_from_dict(
        {**BASE, "cluster": {"replicas": 2, "router": "least-kv"}, "max_sim_time_s": 5.0}
    )
    result = simulate(spec)
    assert len(result.requests) == 120
    late = result.requests[result.requests["reason"].str.startswith("arrives after")]
    assert len(late) > 0 and (late["replica"] == -1).all()


def test_refusals_name_what_is_allowed():
    with pytest.raises(ConfigError, match="known: round-robin, random, least-outstanding"):
        run_spec_from_dict({"cluster": {"replicas": 2, "router": "fastest"}}, "fleet.yaml")
    with pytest.raises(ConfigError, match="user_id"):
        simulate(spec_of(replicas=2, router="sticky"))
    with pytest.raises(ConfigError, match="reducers"):
        simulate(
            run_spec_from_dict(
                {**BASE, "cluster": {"replicas": 2}, "metrics": {"reducers": ["time-weighted"]}}
            )
        )
