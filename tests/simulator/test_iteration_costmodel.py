"""Iteration-level profiles: a whole step priced by one term over the whole step's features."""

import pytest

from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.factory import make_cost_model
from pagesim.simulator.costmodel.iteration import IterationCostModel, step_features
from pagesim.simulator.costmodel.model import CostModel
from pagesim.simulator.costmodel.profile import Profile, Term
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import HardwareSpec

PREFILL = Term({"const_s": 0.01, "s_per_byte": 1e-12, "s_per_flop": 4e-15, "s_per_seq": 1e-3})
DECODE = Term({"const_s": 0.02, "s_per_byte": 5e-13, "s_per_token": 1e-4})


def _profile(tmp_path):
    profile = Profile(
        kind="synthetic",
        gpu_name="test",
        gpu_spec="a100-80gb",
        terms={"prefill_iteration": PREFILL, "decode_iteration": DECODE},
    )
    return str(profile.save(tmp_path / "iteration.yaml"))


def _cost(tmp_path, model="llama-2-70b", tp=2):
    hw = HardwareSpec(model=model, gpu="a100-80gb", tensor_parallel=tp, profile=_profile(tmp_path))
    return make_cost_model(hw, get_model(model), get_gpu("a100-80gb"))


def test_step_features_sum_the_layers_and_the_lm_head():
    model = get_model("opt-13b")
    plan = BatchPlan.from_lens(decode_context_lens=(100, 300))
    got = step_features(model, 1, plan)
    per_layer = [F.gemm(2, 5120, n) for n in (3 * 5120,)] + [
        F.gemm(2, 5120, 5120),
        F.gemm(2, 5120, 20480),
        F.gemm(2, 20480, 5120),
    ]
    attn = F.decode_attention([100, 300], 40, 40, 128, 16)
    lm = F.gemm(2, 5120, 50272)
    want_bytes = 40 * (sum(g.bytes_ for g in per_layer) + attn.bytes_) + lm.bytes_
    want_flops = 40 * (sum(g.flops for g in per_layer) + attn.flops) + lm.flops
    assert got == F.Features(bytes_=want_bytes, flops=want_flops, seqs=2.0, tokens=2.0)


def test_factory_builds_the_iteration_model_and_says_so(tmp_path):
    cost = _cost(tmp_path)
    assert isinstance(cost, IterationCostModel)
    assert "iteration-level terms" in cost.description
    assert "analytic NVLink all-reduces" not in cost.description  # they are inside the steps


def test_a_step_is_its_term_over_its_features(tmp_path):
    cost, model = _cost(tmp_path), get_model("llama-2-70b")
    decode = BatchPlan.from_lens(decode_context_lens=(600, 700, 800))
    want = DECODE.time_s(*step_features(model, 2, decode))
    assert cost.step_time_s(decode) == pytest.approx(want, rel=1e-12)
    # the engine's decode fast path gives the same value
    fast = cost.decode_time_fn(is_paged=True)
    assert fast(3, 2100, decode.decode_num_blocks) == cost.step_time_s(decode)
    mixed = BatchPlan.from_lens(prefill_new_lens=(512,), decode_context_lens=(600,))
    want = PREFILL.time_s(*step_features(model, 2, mixed))
    assert cost.step_time_s(mixed) == pytest.approx(want, rel=1e-12)
    assert cost.step_time_s(BatchPlan()) == 0.0


def test_transfers_are_added_from_the_analytic_terms(tmp_path):
    cost = _cost(tmp_path)
    plan = BatchPlan.from_lens(decode_context_lens=(600,))
    swapped = plan._replace(num_swapped_out_blocks=10)
    assert cost.step_time_s(swapped) - cost.step_time_s(plan) == pytest.approx(
        cost._transfer_time_s(swapped)
    )
    assert cost._transfer_time_s(swapped) > 0


def test_operator_profiles_still_build_the_operator_model():
    hw = HardwareSpec(model="opt-13b", gpu="a100-80gb", profile="a100-80gb-vidur")
    cost = make_cost_model(hw, get_model("opt-13b"), get_gpu("a100-80gb"))
    assert type(cost) is CostModel


def test_the_shipped_splitwise_profile_prices_a_step():
    from pagesim.simulator.costmodel.factory import resolve_profile

    profile = resolve_profile("a100-80gb-splitwise", get_gpu("a100-80gb"))
    assert profile.kind == "external" and set(profile.terms) == {
        "prefill_iteration",
        "decode_iteration",
    }
    hw = HardwareSpec(
        model="llama-2-70b", gpu="a100-80gb", tensor_parallel=4, profile="a100-80gb-splitwise"
    )
    cost = make_cost_model(hw, get_model("llama-2-70b"), get_gpu("a100-80gb"))
    # Splitwise measured a TP-4 decode of one sequence at context 576 at 45.0 ms (median)
    t = cost.step_time_s(BatchPlan.from_lens(decode_context_lens=(576,)))
    assert 0.035 < t < 0.055


def test_a_whole_run_under_an_iteration_level_profile():
    """simulate() with the shipped Splitwise profile: every request finishes, the run says
    how steps were priced, and decode steps cost what the decode term says."""
    import numpy as np

    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict
    from pagesim.workloads.assemble import assemble_trace

    trace = assemble_trace(
        prompt_len=np.array([300, 500, 200, 800]),
        output_len=np.array([20, 5, 40, 10]),
        arrival_s=np.array([0.0, 0.1, 0.2, 5.0]),
        name="tiny",
        source_note="made up",
    )
    doc = {
        "hardware": {
            "model": "llama-2-70b",
            "gpu": "a100-80gb",
            "tensor_parallel": 4,
            "profile": "a100-80gb-splitwise",
        },
        "allocator": {"kind": "paged", "block_size": 16},
        "scheduler": {"kind": "vllm"},
    }
    result = simulate(run_spec_from_dict(doc, "test"), trace=trace)
    req = result.requests
    assert (req["status"] == "finished").all()
    assert "iteration-level terms" in result.notes["cost_model_description"]
    # the last request runs alone: its TPOT is one decode step of one sequence
    last = req.sort_values("arrival_s").iloc[-1]
    cost = make_cost_model(
        HardwareSpec(
            model="llama-2-70b", gpu="a100-80gb", tensor_parallel=4, profile="a100-80gb-splitwise"
        ),
        get_model("llama-2-70b"),
        get_gpu("a100-80gb"),
    )
    steps = [
        cost.step_time_s(BatchPlan.from_lens(decode_context_lens=(800 + i,))) for i in range(1, 10)
    ]
    assert last["tpot_s"] == pytest.approx(np.mean(steps), rel=1e-6)
