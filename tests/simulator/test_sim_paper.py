"""The paper's Figure 2 and Figure 13a setup, end to end with the real trace, allocators
and cost model: OPT-13B, 15,728 KV slots (12 GiB), ShareGPT, Poisson 2 req/s.

The memory breakdown and batch size are measured over the steady part of the run:
from a quarter of the arrival span (the ramp-up, while the pool is still filling) to
the last arrival (after it the server drains). Bands are the paper's numbers ± 5
percentage points (Fig. 2) and ± 25 % on the ratios (Fig. 13a).

Known gaps, kept visible as strict xfails rather than tuned away:
- token states run ~5-6 points under the paper for every system: the shipped
  ShareGPT trace has a mean prompt of ~54 tokens against the paper's 161 (prompts
  are token states from the first step), so Orca (Max) and Orca (Pow2) fall just
  outside the band;
- vLLM is not memory-saturated at 2 req/s here: with the analytic A100 cost model a
  decode step of ~20 requests takes ~31 ms, so ~21 batched requests already carry
  the 2 req/s x 334 output tokens (Little's law); the paper's vLLM batches 30.4,
  i.e. its steps took ~45 ms. With spare memory, the token-state share and the
  vLLM/Orca batch ratios come out lower than the paper's.
"""

from __future__ import annotations

import pytest

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

SYSTEMS = ("max", "pow2", "oracle", "paged")
PAPER_TOKEN_PCT = {"max": 20.4, "pow2": 26.8, "oracle": 38.2, "paged": 96.3}
NUM_REQUESTS = 600


def spec_for(kind: str, **overrides):
    doc = {
        "workload": {"name": "sharegpt", "num_requests": NUM_REQUESTS},
        "arrivals": {"process": "poisson", "rate_req_s": 2.0},
        "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15728},
        "allocator": {"kind": kind},
        "scheduler": {"kind": "vllm" if kind == "paged" else "orca"},
        "metrics": {"sample_interval_s": 5.0},
        "seed": 0,
        **overrides,
    }
    return run_spec_from_dict(doc)


def steady(result) -> dict[str, float]:
    ts = result.timeseries
    last = float(result.requests["arrival_s"].max())
    w = ts[(ts["t_s"] >= 0.25 * last) & (ts["t_s"] < last)]
    d = w["duration_s"]
    out = {c: float((w[c] * d).sum() / d.sum()) for c in ts.columns if c.startswith("mem_")}
    out["batch_size"] = float((w["batch_size"] * w["num_steps"]).sum() / w["num_steps"].sum())
    return out


@pytest.fixture(scope="module")
def fig2():
    return {kind: steady(simulate(spec_for(kind))) for kind in SYSTEMS}


def test_breakdown_adds_up_and_orders_like_the_paper(fig2):
    for parts in fig2.values():
        total = sum(v for k, v in parts.items() if k.startswith("mem_"))
        assert total == pytest.approx(1.0, abs=1e-9)
    token = [fig2[k]["mem_token_frac"] for k in SYSTEMS]
    assert token == sorted(token)  # Max < Pow2 < Oracle < vLLM
    assert fig2["max"]["mem_internal_frag_frac"] > 0.45  # Max wastes most inside reservations
    assert fig2["oracle"]["mem_internal_frag_frac"] == 0.0  # Oracle reserves exactly
    assert fig2["pow2"]["mem_external_frag_frac"] > 0.3  # buddy rounding + blocked free space
    assert fig2["paged"]["mem_internal_frag_frac"] < 0.01  # at most the last partial blocks


_GAP = "shipped ShareGPT prompts average ~54 tokens vs the paper's 161 (module docstring)"
_UNSAT = "vLLM is not memory-saturated at 2 req/s with the analytic cost model (module docstring)"


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("max", marks=pytest.mark.xfail(strict=True, reason=_GAP)),
        pytest.param("pow2", marks=pytest.mark.xfail(strict=True, reason=_GAP)),
        "oracle",
        pytest.param("paged", marks=pytest.mark.xfail(strict=True, reason=_UNSAT)),
    ],
)
def test_fig2_token_states_within_5_points_of_the_paper(fig2, kind):
    assert 100 * fig2[kind]["mem_token_frac"] == pytest.approx(PAPER_TOKEN_PCT[kind], abs=5.0)


def test_fig13a_batch_sizes_order_and_orca_values(fig2):
    batch = {k: fig2[k]["batch_size"] for k in SYSTEMS}
    assert batch["max"] < batch["pow2"] < batch["oracle"] < batch["paged"]
    # Orca (Max) fits floor(15728 / 2048) = 7 requests, and the queue keeps it full
    assert batch["max"] == pytest.approx(7.0, abs=0.35)


@pytest.mark.xfail(strict=True, reason=_UNSAT)
def test_fig13a_vllm_ratios_within_25_percent(fig2):
    batch = {k: fig2[k]["batch_size"] for k in SYSTEMS}
    assert batch["paged"] / batch["oracle"] == pytest.approx(2.2, rel=0.25)
    assert batch["paged"] / batch["max"] == pytest.approx(4.3, rel=0.25)


SATURATED_RATE_REQ_S = 4.0


def test_fig2_vllm_token_states_when_memory_is_saturated():
    """Figure 2's vLLM bar is a memory-saturated server. Here vLLM's throughput knee on
    this trace is near 3 req/s (see the module docstring), so saturation takes a higher
    offered load than the paper's 2 req/s: at 4 req/s the waiting queue never empties
    and the steady-state breakdown is the paper's (measured 96.7 % token states,
    2.1 % reservation in the last partial blocks, 1.0 % kept free by the watermark)."""
    spec = spec_for("paged", arrivals={"process": "poisson", "rate_req_s": SATURATED_RATE_REQ_S})
    parts = steady(simulate(spec))
    assert 100 * parts["mem_token_frac"] == pytest.approx(PAPER_TOKEN_PCT["paged"], abs=5.0)
    assert parts["mem_internal_frag_frac"] < 0.005
    # everything else together ("the remaining 3.7" in the paper) stays small
    assert 1.0 - parts["mem_token_frac"] < 0.06
