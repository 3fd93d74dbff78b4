"""A named vLLM release's step rules (simulator/costmodel/release.py): CUDA-graph padding to
the captured sizes and the host's time, overlapped under async scheduling."""

import pytest

import pagesim
from pagesim.errors import ConfigError
from pagesim.simulator.costmodel.factory import cost_model_for
from pagesim.simulator.costmodel.release import ReleaseSteps, padded_plan
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.vllm_releases import cudagraph_capture_sizes

V1 = {"scheduler": {"kind": "vllm-v1"}, "allocator": {"kind": "paged-v1"}}


def test_capture_sizes_follow_vllms_rule():
    sizes = cudagraph_capture_sizes(256, 8192)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert 248 in sizes and 256 in sizes and 264 not in sizes and 272 in sizes
    assert cudagraph_capture_sizes(128, 8192)[-1] == 256
    assert cudagraph_capture_sizes(256, 100)[-1] == 96


def test_a_step_is_padded_to_the_next_captured_size_and_not_above_the_largest():
    sizes = cudagraph_capture_sizes(256, 8192)
    plan = BatchPlan.from_lens(decode_context_lens=(100,) * 50)
    padded = padded_plan(plan, sizes)
    assert padded.num_decode_seqs == 56 and padded.decode_context_sum == plan.decode_context_sum
    assert (
        padded_plan(BatchPlan.from_lens(decode_context_lens=(100,) * 48), sizes).num_decode_seqs
        == 48
    )
    mixed = BatchPlan.from_lens(prefill_new_lens=(30,), decode_context_lens=(9,) * 3)
    assert padded_plan(mixed, sizes).num_decode_seqs == 3 + (40 - 33)
    big = BatchPlan.from_lens(prefill_new_lens=(600,))
    assert padded_plan(big, sizes) == big


def _cost(profile="h100-sxm-vidur"):
    return cost_model_for(profile, get_model("llama-2-7b"), get_gpu("h100-sxm"), with_serving=False)


@pytest.mark.parametrize("overlap", [True, False])
def test_host_time_overlaps_under_async_and_adds_without(overlap):
    inner = _cost()
    rules = ReleaseSteps(inner, capture_sizes=(), host=None, overlap=overlap)
    plan = BatchPlan.from_lens(decode_context_lens=(500,) * 8)
    host = inner.step_overhead_time_s(8, 8)
    gpu = inner.step_time_s(plan) - host
    want = max(gpu, host) if overlap else gpu + host
    assert rules.step_time_s(plan) == pytest.approx(want, rel=1e-12)
    # the steady-decode formula agrees with the general one
    assert rules.decode_time_fn()(8, 4000, 8 * 32) == pytest.approx(want, rel=1e-12)
    slow = ReleaseSteps(inner, capture_sizes=(), host=lambda s, t: 1.0, overlap=overlap)
    assert slow.step_time_s(plan) == pytest.approx(1.0 if overlap else gpu + 1.0, rel=1e-12)


def test_a_whole_step_profile_holds_no_host_time_and_pads_its_decodes():
    inner = _cost("h100-sxm-compiled-steps")
    sizes = cudagraph_capture_sizes(256, 8192)
    rules = ReleaseSteps(inner, capture_sizes=sizes, host=None, overlap=True)
    plan = BatchPlan.from_lens(decode_context_lens=(500,) * 50)
    want = inner.step_time_s(padded_plan(plan, sizes))
    assert want > inner.step_time_s(plan)
    assert rules.step_time_s(plan) == pytest.approx(want, rel=1e-12)
    assert rules.decode_time_fn()(50, 25000, 50 * 32) == pytest.approx(want, rel=1e-12)
    assert "CUDA graphs" in rules.description and "no host time" in rules.description


def _run(server, scheduler=None):
    return pagesim.simulate(
        {
            **V1,
            "scheduler": {"kind": "vllm-v1", **(scheduler or {})},
            "workload": {"num_requests": 40},
            "arrivals": {"rate_req_s": 8.0},
            "hardware": {
                "model": "llama-2-7b",
                "gpu": "h100-sxm",
                "profile": "h100-sxm-compiled-steps",
            },
            "server": server,
        }
    )


def test_a_named_release_runs_its_step_rules_and_says_so():
    graphs = _run({"vllm_version": "0.23.0"})
    eager = _run({"vllm_version": "0.23.0", "enforce_eager": True})
    host = {"vllm_version": "0.23.0", "host_profile": "h100-sxm-vidur"}
    hidden = _run(host)  # async (0.23's default): Vidur's host time is under this GPU step
    added = _run(host, {"async_scheduling": False})
    desc = graphs.notes["cost_model_description"]
    assert "CUDA graphs" in desc and "eager" in eager.notes["cost_model_description"]
    assert "h100-sxm-vidur's step_overhead" in hidden.notes["cost_model_description"]
    tpot = [r.summary_frame["tpot_s_p50"].iloc[0] for r in (graphs, eager, hidden, added)]
    assert tpot[0] > tpot[1] and tpot[2] == tpot[0] and tpot[3] > tpot[0] * 1.2
    again = _run({"vllm_version": "0.23.0"})
    assert again.requests.equals(graphs.requests)


def test_release_settings_need_a_release():
    with pytest.raises(ConfigError, match="server.enforce_eager.*server.vllm_version"):
        pagesim.simulate({**V1, "server": {"enforce_eager": True}})
    with pytest.raises(
        ConfigError, match="server.host_profile: 'h100-sxm-compiled-steps' has no step_overhead"
    ):
        _run({"vllm_version": "0.23.0", "host_profile": "h100-sxm-compiled-steps"})
