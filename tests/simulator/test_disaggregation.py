"""Prefill/decode disaggregation on tiny traces with hand-computed times, and refusals."""

from __future__ import annotations

import math

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict
from tests.simulator.sim_fakes import make_trace

STEP_S = 0.05
#: OPT-13B: 2 x 40 layers x 40 KV heads x 128 x 2 bytes per token, on one GPU
KV_BYTES_PER_TOKEN = 2 * 40 * 40 * 128 * 2


class ConstantCost:
    """Every step (prefill or decode) takes STEP_S."""

    description = "constant step"

    def step_time_s(self, plan) -> float:
        return STEP_S

    def decode_time_fn(self, *, is_paged: bool):
        return lambda num_seqs, context_sum, num_blocks: STEP_S


def spec(decode_instances: int = 1, **top):
    return run_spec_from_dict(
        {
            "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 4096},
            "disaggregation": {
                "prefill": {"tp": 1, "instances": 1},
                "decode": {"tp": 1, "instances": decode_instances},
                "link": {"bus_bw_gbps": 1.0, "latency_us": 100.0, "source": "test"},
            },
            "check_invariants": True,
            **top,
        }
    )


def test_ttft_is_the_prefill_step_and_the_decode_waits_for_the_migration():
    """Prompt 100, output 4: the prefill step ends at 0.05 s with the first token; the
    100 tokens' KV (819,200 B each) cross a 1 GB/s link in 0.08192 s + 100 us; then three
    decode steps."""
    result = simulate(spec(), trace=make_trace([(0.0, 100, 4)]), cost_model=ConstantCost())
    row = result.requests.iloc[0]
    migration_s = 100 * KV_BYTES_PER_TOKEN / 1e9 + 100e-6
    assert row["status"] == "finished"
    assert row["ttft_s"] == pytest.approx(STEP_S)
    assert row["finish_s"] == pytest.approx(STEP_S + migration_s + 3 * STEP_S)
    assert row["tpot_s"] == pytest.approx((migration_s + 3 * STEP_S) / 3)
    assert result.extra["num_migrations"] == 1
    assert result.extra["migration_s_sum"] == pytest.approx(migration_s)
    assert result.replicas["role"].tolist() == ["prefill", "decode"]
    assert row["replica"] == 1


def test_requests_go_to_the_least_loaded_decode_instance():
    """Two prompts prefilled in one step are handed over in order: the first to decode
    instance 0 (both empty: the first wins), the second to decode instance 1."""
    trace = make_trace([(0.0, 100, 3), (0.0, 60, 5)])
    result = simulate(spec(decode_instances=2), trace=trace, cost_model=ConstantCost())
    assert result.requests["replica"].tolist() == [1, 2]
    assert result.requests["ttft_s"].tolist() == pytest.approx([STEP_S, STEP_S])
    second = result.requests.iloc[1]
    migration_s = 60 * KV_BYTES_PER_TOKEN / 1e9 + 100e-6
    assert second["finish_s"] == pytest.approx(STEP_S + migration_s + 4 * STEP_S)


def test_a_one_token_output_ends_at_its_prefill():
    result = simulate(spec(), trace=make_trace([(0.0, 40, 1)]), cost_model=ConstantCost())
    row = result.requests.iloc[0]
    assert row["finish_s"] == pytest.approx(STEP_S) and math.isnan(row["tpot_s"])
    assert result.extra["num_migrations"] == 0


def test_same_spec_same_output_on_a_workload():
    doc = {
        "workload": {"name": "sharegpt", "num_requests": 60},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
    }
    s = spec(decode_instances=2, **doc)
    a, b = simulate(s), simulate(s)
    assert a.requests.equals(b.requests)
    assert a.summary["num_finished"] == 60


def test_refusals():
    with pytest.raises(ConfigError, match="allocator.kind must be 'paged', got 'max'"):
        run_spec_from_dict(
            {"allocator": {"kind": "max"}, "scheduler": {"kind": "orca"}, "disaggregation": {}}
        )
    with pytest.raises(ConfigError, match="scheduler.kind must be 'vllm', got 'vllm-paper'"):
        simulate(spec(scheduler={"kind": "vllm-paper"}), trace=make_trace([(0.0, 10, 2)]))
    with pytest.raises(ConfigError, match="n > 1"):
        simulate(spec(), trace=make_trace([(0.0, 10, 2, 2)]), cost_model=ConstantCost())
