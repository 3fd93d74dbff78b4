"""A profile's serving path: its schema, what it adds to each step, the front-end delay,
and vLLM v0.2's KV pool model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.costmodel.factory import cost_model_for
from pagesim.simulator.costmodel.profile import load_profile, profile_from_dict
from pagesim.simulator.memory import vllm_v02_pool
from pagesim.simulator.model_gpu_specs import GIB, get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import run_spec_from_dict

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_profile.yaml"
SERVING = {
    "form": "seq_ctx",
    "coefficients": {
        "const_s": 2e-3,
        "s_per_seq": 3e-4,
        "s_per_context_token": 1e-7,
        "s_per_prefill_token": 2e-6,
    },
    "frontend_delay_s": 0.015,
    "fitted_on": "made-up.csv",
}


def with_serving(tmp_path, serving=SERVING) -> Path:
    doc = yaml.safe_load(FIXTURE.read_text())
    doc["serving"] = serving
    path = tmp_path / "serving.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def models(tmp_path):
    path = with_serving(tmp_path)
    args = (get_model("opt-13b"), get_gpu("a100-40gb"))
    return cost_model_for(str(FIXTURE), *args), cost_model_for(str(path), *args)


def test_each_step_costs_the_kernels_plus_the_serving_path(tmp_path):
    kernels, serving = models(tmp_path)
    c = SERVING["coefficients"]
    decode = BatchPlan.from_lens(decode_context_lens=(100, 300, 600))
    assert serving.step_time_s(decode) == pytest.approx(
        kernels.step_time_s(decode)
        + c["const_s"]
        + 3 * c["s_per_seq"]
        + 1000 * c["s_per_context_token"]
    )
    prefill = BatchPlan.from_lens(prefill_new_lens=(50, 70))
    assert serving.step_time_s(prefill) == pytest.approx(
        kernels.step_time_s(prefill)
        + c["const_s"]
        + 2 * c["s_per_seq"]
        + 120 * c["s_per_context_token"]
        + 120 * c["s_per_prefill_token"]
    )
    assert serving.step_time_s(BatchPlan()) == 0.0
    # the engine's decode formula agrees with the plan's
    fn = serving.decode_time_fn(is_paged=True)
    assert fn(3, 1000, decode.decode_num_blocks) == pytest.approx(serving.step_time_s(decode))
    assert "front-end delay 15 ms" in serving.description


def test_requests_reach_the_scheduler_after_the_front_end_delay(tmp_path):
    path = with_serving(tmp_path)
    doc = {
        "workload": {"name": "synthetic", "num_requests": 1},
        "arrivals": {"process": "poisson", "rate_req_s": 1.0},
        "hardware": {"gpu": "a100-40gb", "profile": str(FIXTURE)},
    }
    plain = simulate(run_spec_from_dict(doc)).requests.iloc[0]
    doc["hardware"]["profile"] = str(path)
    served = simulate(run_spec_from_dict(doc)).requests.iloc[0]
    # one request alone: its first step starts after the delay and costs the serving path more
    kernels, serving = models(tmp_path)
    prompt = int(plain["prompt_len"])
    extra_prefill = serving.step_time_s(
        BatchPlan.from_lens(prefill_new_lens=(prompt,))
    ) - kernels.step_time_s(BatchPlan.from_lens(prefill_new_lens=(prompt,)))
    assert served["arrival_s"] == plain["arrival_s"]
    assert served["ttft_s"] == pytest.approx(plain["ttft_s"] + 0.015 + extra_prefill)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"form": "quadratic"}, "serving.form: 'quadratic' is not one of"),
        ({"coefficients": {"s_per_byte": 1.0}}, "serving.coefficients.s_per_byte: unknown"),
        ({"coefficients": {"const_s": -1.0}}, "serving.coefficients.const_s: must be >= 0"),
        ({"frontend_delay_s": float("nan")}, "serving.frontend_delay_s: must be a finite number"),
        ({"colour": "blue"}, "serving: unknown key 'colour'"),
        (
            {"residual_quantiles": {"ttft": [0.1]}},
            "serving.residual_quantiles.ttft: must be a list of 7",
        ),
    ],
)
def test_bad_serving_sections_are_refused_by_key(tmp_path, change, fragment):
    path = with_serving(tmp_path, {**SERVING, **change})
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        load_profile(path)


def test_a_serving_section_round_trips(tmp_path):
    profile = load_profile(with_serving(tmp_path))
    again = profile_from_dict(profile.to_dict())
    assert again.serving == profile.serving
    assert profile.serving.step_time_s(2, 100, 10) == pytest.approx(2e-3 + 6e-4 + 1e-5 + 2e-5)


def test_vllm_v02_pool_is_its_formula_with_each_term():
    pool = vllm_v02_pool(
        get_model("opt-13b"),
        get_gpu("a100-80gb"),
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=16384,
        max_num_seqs=1024,
        block_size=16,
        swap_space_gib=16,
    )
    assert pool.total_memory_bytes == 84_987_740_160  # CUDA's, not the datasheet's 80 GiB
    assert pool.layer_transient_bytes == 16384 * (5120 + 2 * 20480) * 2
    assert pool.sampler_transient_bytes == 1024 * 50272 * 50 + 16384 * 5120 * 2
    assert pool.peak_bytes == get_model("opt-13b").weight_bytes + pool.sampler_transient_bytes
    assert pool.block_bytes == 16 * 2 * 40 * 5120 * 2
    assert pool.num_gpu_blocks == int((0.95 * 84_987_740_160 - pool.peak_bytes) // pool.block_bytes)
    assert pool.num_cpu_blocks == 16 * GIB // pool.block_bytes == 1310
    # a larger profiling batch makes the layer the larger transient, and the pool smaller
    big = vllm_v02_pool(
        get_model("opt-13b"),
        get_gpu("a100-80gb"),
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=65536,
        max_num_seqs=1024,
        block_size=16,
        swap_space_gib=16,
    )
    assert big.peak_bytes == get_model("opt-13b").weight_bytes + big.layer_transient_bytes
    assert big.num_gpu_blocks < pool.num_gpu_blocks
    with pytest.raises(ConfigError, match="modelled for OPT"):
        vllm_v02_pool(
            get_model("llama-2-7b"),
            get_gpu("a100-80gb"),
            gpu_memory_utilization=0.9,
            max_num_batched_tokens=4096,
            max_num_seqs=256,
            block_size=16,
            swap_space_gib=4,
        )


def test_vllm_v1_pool_is_its_formula_and_an_upper_bound_of_the_engines():
    from pagesim.simulator.memory import vllm_v1_pool

    model, gpu = get_model("llama-3.1-8b"), get_gpu("rtx-4090")
    pool = vllm_v1_pool(
        model, gpu, tensor_parallel=1, gpu_memory_utilization=0.9, max_num_batched_tokens=2048,
        max_num_seqs=256, block_size=16, total_memory_bytes=25_250_627_584,
    )  # fmt: skip
    per_block = 16 * 2 * 8 * 128 * 2 * 32  # block x K,V x KV heads x head dim x bf16 x layers
    assert pool.block_bytes == per_block
    available = pool.requested_bytes - pool.weight_bytes - pool.activation_bytes
    assert pool.num_gpu_blocks == available // per_block
    # the engine reported 2,588 on this GPU: the model leaves out the non-torch memory
    assert pool.num_gpu_blocks >= 2588
