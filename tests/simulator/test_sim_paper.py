"""The paper's Figure 2 and Figure 13a setup, end to end with the real trace, allocators
and cost model: OPT-13B, 15,728 KV slots (12 GiB), ShareGPT, Poisson 2 req/s.

The memory breakdown and batch size are measured over the steady part of the run:
from a quarter of the arrival span (the ramp-up, while the pool is still filling) to
the last arrival (after it the server drains). Bands are the paper's numbers ± 5
percentage points (Fig. 2) and ± 25 % on the ratios (Fig. 13a), tests/bands.py.

No band holds what arithmetic fixes: Orca (Max)'s batch of 7 (floor(15,728 / 2,048)
reservations in a saturated pool) and vLLM's token states once its pool is saturated
(every slot holds a token but the last partial block of each request: ~97 % whatever the
workload) could not fail, so neither is tested; the paper-settings suite holds Figures 2
and 13a on the artifact's exact workload (tests/experiments/test_paper_fig2.py,
test_paper_fig13.py).

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
from bands import band

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

SYSTEMS = ("max", "pow2", "oracle", "paged")
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
    band("sim_fig2", kind).check(100 * fig2[kind]["mem_token_frac"], kind)


def test_fig13a_batch_sizes_order_like_the_paper(fig2):
    batch = {k: fig2[k]["batch_size"] for k in SYSTEMS}
    assert batch["max"] < batch["pow2"] < batch["oracle"] < batch["paged"]


@pytest.mark.xfail(strict=True, reason=_UNSAT)
@pytest.mark.parametrize("ratio", ["paged/oracle", "paged/max"])
def test_fig13a_vllm_ratios_within_25_percent(fig2, ratio):
    numerator, denominator = ratio.split("/")
    band("sim_fig13a", ratio).check(fig2[numerator]["batch_size"] / fig2[denominator]["batch_size"])
