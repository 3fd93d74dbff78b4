"""The vLLM-named metrics: a tiny run worked out by hand, and their identities on real runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_fakes import TinyPaged, constant_step, make_trace

from pagesim.simulator import simulate, token_gaps
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import MetricsSpec, SchedulerSpec, SloSpec, run_spec_from_dict
from pagesim.simulator.token_gaps import TokenGaps
from pagesim.simulator.vllm_metrics import max_concurrency, vllm_metric_columns, vllm_summary


def _tiny_run():
    """vLLM v0 over a roomy pool, every step 0.5 s. Requests (arrival, prompt, output):
    A (0, 4, 3), B (0.25, 8, 2), C (0.25, 4, 1). By hand:

        step 1  [0.0, 0.5]  prefill A          A: token 1 at 0.5
        step 2  [0.5, 1.0]  prefill B, C       B: token 1 at 1.0; C: token 1 at 1.0, done
        step 3  [1.0, 1.5]  decode A, B        A: token 2 (gap 1.0); B: token 2 (gap 0.5), done
        step 4  [1.5, 2.0]  decode A           A: token 3 (gap 0.5), done

    (a step is all-prefill or all-decode, so A sits out step 2: its gap is 1.0 s).
    """
    sched = SCHEDULERS["vllm"](
        SchedulerSpec(), TinyPaged(32, 4), max_model_len=64, rng=np.random.default_rng(0)
    )
    trace = make_trace([(0.0, 4, 3), (0.25, 8, 2), (0.25, 4, 1)])
    result = run_engine(trace, sched, constant_step(0.5), check_invariants=True)
    return result, sched.token_gaps


def test_tiny_run_by_hand():
    result, gaps = _tiny_run()
    req = result.requests
    assert req["first_token_s"].tolist() == [0.5, 1.0, 1.0]
    assert req["finish_s"].tolist() == [2.0, 1.5, 1.0]
    assert result.extra["makespan_s"] == 2.0
    spec = MetricsSpec(percentiles=[25, 90], slo=SloSpec(ttft_ms=750, tpot_ms=600))
    got = vllm_summary(req, duration_s=2.0, spec=spec, token_gaps=gaps)
    expected = {
        "completed": 3,
        "request_throughput": 3 / 2.0,
        # A: TPOT 750 > 600, bad; B: TTFT 750 <= 750 (the bound is inclusive), TPOT 500,
        # good; C: TTFT 750, one token (TPOT counts as 0), good
        "request_goodput": 2 / 2.0,
        "output_throughput": (3 + 2 + 1) / 2.0,
        "total_token_throughput": (4 + 8 + 4 + 3 + 2 + 1) / 2.0,
        # TTFT: A 500, B 750, C 750
        "mean_ttft_ms": 2000 / 3,
        "median_ttft_ms": 750.0,
        "std_ttft_ms": 250 * math.sqrt(2) / 3,  # deviations -500/3, 250/3, 250/3
        "p25_ttft_ms": 625.0,  # rank 0.5 between 500 and 750
        "p90_ttft_ms": 750.0,
        # TPOT (C has one token, so none): A (2.0 - 0.5) / 2 = 750, B (1.5 - 1.0) / 1 = 500
        "mean_tpot_ms": 625.0,
        "median_tpot_ms": 625.0,
        "std_tpot_ms": 125.0,
        "p25_tpot_ms": 562.5,  # rank 0.25
        "p90_tpot_ms": 725.0,  # rank 0.9
        # ITL: A's gaps 1000, 500; B's gap 500
        "mean_itl_ms": 2000 / 3,
        "median_itl_ms": 500.0,
        "std_itl_ms": 500 * math.sqrt(2) / 3,
        "p25_itl_ms": 500.0,
        "p90_itl_ms": 900.0,  # rank 1.8: 500 + 0.8 * (1000 - 500)
        # E2EL: A 2000, B 1250, C 750
        "mean_e2el_ms": 4000 / 3,
        "median_e2el_ms": 1250.0,
        "std_e2el_ms": math.sqrt((2000**2 + 250**2 + 1750**2) / 27),  # deviations k / 3
        "p25_e2el_ms": 1000.0,  # rank 0.5 between 750 and 1250
        "p90_e2el_ms": 1850.0,  # rank 1.8: 1250 + 0.8 * 750
        # A [0, 2.0), B [0.25, 1.5), C [0.25, 1.0) overlap on [0.25, 1.0)
        "max_concurrent_requests": 3,
    }
    assert list(got) == list(expected) == list(vllm_metric_columns(spec))
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12), name


def test_tiny_run_goodput_with_an_e2el_bound_and_without_slo():
    result, gaps = _tiny_run()
    slo = SloSpec(ttft_ms=750, tpot_ms=600, e2el_ms=1000)  # B (1250 ms) now misses
    got = vllm_summary(result.requests, duration_s=2.0, spec=MetricsSpec(slo=slo), token_gaps=gaps)
    assert got["request_goodput"] == 0.5
    plain = vllm_summary(result.requests, duration_s=2.0, spec=MetricsSpec(), token_gaps=None)
    assert "request_goodput" not in plain and "p99_ttft_ms" in plain
    assert math.isnan(plain["mean_itl_ms"]) and math.isnan(plain["p99_itl_ms"])


def test_statistics_of_nothing_are_nan_not_zero():
    result, _ = _tiny_run()
    none = result.requests.iloc[:0]
    got = vllm_summary(none, duration_s=2.0, spec=MetricsSpec(), token_gaps=TokenGaps())
    assert got["completed"] == 0 and got["request_throughput"] == 0
    assert math.isnan(got["mean_ttft_ms"]) and math.isnan(got["median_itl_ms"])
    assert got["max_concurrent_requests"] == 0


def test_token_gaps_match_numpy_on_the_expanded_list():
    rng = np.random.default_rng(1)
    gaps = TokenGaps()
    expanded = []
    values, counts = rng.choice([0.01, 0.02, 0.035, 0.5], 40), rng.integers(1, 9, 40)
    for value, count in zip(values, counts, strict=True):
        gaps.add(float(value), int(count))
        expanded += [float(value)] * int(count)
    assert gaps.num_gaps == len(expanded)
    assert gaps.mean() == pytest.approx(np.mean(expanded), rel=1e-12)
    assert gaps.std() == pytest.approx(np.std(expanded), rel=1e-12)
    for q in (0, 1, 25, 50, 90, 99, 99.9, 100):
        assert gaps.percentile(q) == pytest.approx(np.percentile(expanded, q), rel=1e-12), q


def test_tick_runs_are_the_runs_of_each_step():
    """add_tick_runs (a steady run's steps in one call) records the gaps add_run records
    step by step: the same floats (end minus previous end) and counts, over runs whose
    first step follows another tick (its own previous end), with a read in between."""
    rng = np.random.default_rng(3)
    one_by_one, in_one_call = TokenGaps(), TokenGaps()
    t, total = 0.125, 0
    for run in range(12):
        prev = t
        ends = (t + np.cumsum(rng.uniform(0.01, 0.05, size=int(rng.integers(1, 9))))).tolist()
        count = int(rng.integers(1, 30))
        for end in ends:
            one_by_one.add_run(end - prev, count)
            prev = end
        in_one_call.add_tick_runs(t, ends, count)
        total += count * len(ends)
        t = ends[-1] + float(rng.uniform(0.0, 0.2))  # a tick outside the runs
        if run == 6:
            assert in_one_call.num_gaps == total
            in_one_call.arrays()
    for a, b in zip(one_by_one.arrays(), in_one_call.arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert in_one_call.num_gaps == total


@pytest.mark.pure_python
def test_token_gaps_folded_in_any_order_tally_the_same(monkeypatch):
    """Single gaps folded every few adds, chunks, runs and early reads give the tally
    that np.unique gives of everything at once."""
    monkeypatch.setattr(token_gaps, "MIN_FOLD", 4)
    rng = np.random.default_rng(2)
    gaps = TokenGaps()
    all_values, all_counts = [], []
    choices = [0.0, 0.01, 0.02, 0.035, 0.5, 1.25]
    for i in range(300):
        value, count = float(rng.choice(choices)), int(rng.integers(1, 5))
        kind = i % 7
        if kind == 3:
            gaps.add_run(value, count)
        elif kind == 5:
            gaps.add_many(np.array([value, 0.75]), np.array([count, 0]))
        else:
            gaps.add(value, count)
        all_values.append(value)
        all_counts.append(count)
        if i % 50 == 49:
            assert gaps.num_gaps == sum(all_counts)
            gaps.arrays()
    distinct, index = np.unique(all_values, return_inverse=True)
    want = np.bincount(index, weights=all_counts).astype(np.int64)
    values, counts = gaps.arrays()
    assert values.tolist() == distinct.tolist() and counts.tolist() == want.tolist()
    assert counts.dtype == np.int64 and gaps.num_gaps == sum(all_counts)


def test_max_concurrency_departures_before_arrivals():
    # back to back: [0, 1) then [1, 2) never overlap; a third inside both makes 2
    assert max_concurrency(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == 1
    assert max_concurrency(np.array([0.0, 1.0, 0.5]), np.array([1.0, 2.0, 1.5])) == 2


def _sharegpt_run(scheduler: dict | None = None, **metrics):
    return simulate(
        run_spec_from_dict(
            {
                "workload": {"name": "sharegpt", "num_requests": 150},
                "arrivals": {"rate_req_s": 6.0},
                "hardware": {"kv_slots": 6000},
                "scheduler": scheduler or {},
                "metrics": metrics,
                "seed": 3,
            }
        )
    )


def test_simulate_reports_them_and_itl_adds_up_to_the_decode_time():
    """Identity: the gaps of a request sum to finish - first token, and there are
    output_len - 1 of them; so mean ITL = total decode time / total gaps."""
    res = _sharegpt_run(percentiles=[50, 90, 99], slo={"ttft_ms": 1000, "tpot_ms": 80})
    s = res.summary
    assert s["num_preemptions"] > 0  # the small pool preempts: gaps span recomputes too
    done = res.requests[res.requests["status"] == "finished"]
    total_gap_s = float((done["finish_s"] - done["first_token_s"]).sum())
    num_gaps = int((done["output_len"] - 1).sum())
    assert s["mean_itl_ms"] == pytest.approx(1000 * total_gap_s / num_gaps, rel=1e-9)
    assert s["completed"] == s["num_finished"] and s["request_throughput"] == s["throughput_req_s"]
    assert s["output_throughput"] == pytest.approx(s["throughput_tok_s"])
    assert s["median_ttft_ms"] == pytest.approx(1000 * s["ttft_s_p50"])
    assert s["p99_e2el_ms"] == pytest.approx(1000 * s["e2e_s_p99"])
    assert 0 < s["request_goodput"] <= s["request_throughput"]
    assert s["p50_itl_ms"] <= s["p90_itl_ms"] <= s["p99_itl_ms"]


@pytest.mark.pure_python
@pytest.mark.parametrize("preemption_mode", ["recompute", "swap"])
def test_riding_groups_record_the_gaps_of_groups_advanced_one_by_one(preemption_mode, monkeypatch):
    """Groups that ride the decode clock keep no per-token times; the gap bookkeeping
    (one shared gap for riders that ticked at the previous tick, one each for fresh ones)
    must give the multiset of gaps that advancing every group by hand gives, exactly."""
    from pagesim.simulator.schedulers import VllmScheduler

    sched = {"preemption_mode": preemption_mode}
    riding = _sharegpt_run(scheduler=sched, percentiles=[1, 50, 99])
    monkeypatch.setattr(VllmScheduler, "rides_clock", False)
    by_hand = _sharegpt_run(scheduler=sched, percentiles=[1, 50, 99])
    assert by_hand.summary["num_preemptions"] > 0
    for name in vllm_metric_columns(MetricsSpec(percentiles=[1, 50, 99])):
        assert riding.summary[name] == pytest.approx(by_hand.summary[name], rel=1e-12), name
    for name in ("mean_itl_ms", "p99_itl_ms", "std_itl_ms"):
        assert riding.summary[name] == by_hand.summary[name], name
