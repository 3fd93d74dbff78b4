"""vLLM V1's KV pool under a named release: each term on a made-up model, per release."""

from __future__ import annotations

import math

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.hf_config import model_spec_from_config
from pagesim.simulator.memory import kv_pool, run_kv_pool
from pagesim.simulator.model_gpu_specs import GIB, GPUSpec, get_gpu
from pagesim.simulator.spec import HardwareSpec, run_spec_from_dict
from pagesim.simulator.vllm_pool import release_pool
from pagesim.simulator.vllm_profile import (
    LAZY_NON_TORCH_BYTES,
    NCCL_BYTES,
    Release,
    cudagraph_capture_sizes,
)

# made up: 4 layers, hidden 1024, 8 heads of 128, 2 KV heads, ffn 4096, vocab 50,000, bf16
H, L, HEADS, KV, D, F, V = 1024, 4, 8, 2, 128, 4096, 50_000
GPU = GPUSpec("made-up-gpu", 16 * GIB, 1e12, 1e14, 1e10, 1e10)


def model(model_type="llama", **extra):
    doc = {
        "model_type": model_type,
        "hidden_size": H,
        "num_hidden_layers": L,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "head_dim": D,
        "intermediate_size": F,
        "vocab_size": V,
        "torch_dtype": "bfloat16",
        **extra,
    }
    return model_spec_from_config(doc, name="made-up")


def pool(version, *, tp=1, util=0.9, tokens=2048, seqs=256, m=None, **kw):
    return release_pool(
        m or model(), GPU, version=version, tensor_parallel=tp, gpu_memory_utilization=util,
        max_num_batched_tokens=tokens, max_num_seqs=seqs, **kw,
    )  # fmt: skip


def test_every_term_of_0_15_1_by_hand():
    p = pool("0.15.1")
    assert p.total_memory_bytes == 16 * GIB  # a GPU whose CUDA total pagesim does not know
    assert p.requested_bytes == math.ceil(16 * GIB * 0.9)
    assert p.weight_bytes == model().num_params * 2
    forward = 2048 * (2 * H + 3 * F) * 2  # residual + input, gate-up + activation
    sampler = (2048 + 2 * 256) * H * 2 + 256 * V * 38  # sort path: 38 B per logit
    assert (p.torch_peak.forward_bytes, p.torch_peak.sampler_bytes) == (forward, sampler)
    assert p.torch_peak.bytes == max(forward, sampler)
    assert (p.non_torch_bytes, p.cudagraph_bytes) == (LAZY_NON_TORCH_BYTES, 0)
    page = 16 * 2 * KV * D * 2
    available = p.requested_bytes - p.weight_bytes - max(forward, sampler) - LAZY_NON_TORCH_BYTES
    assert p.available_bytes == available
    assert p.num_gpu_blocks == available // page // L
    assert [t[0] for t in p.terms()] == [
        "total memory", "requested", "weights", "torch peak", "non-torch", "CUDA graphs",
        "KV cache",
    ]  # fmt: skip


def test_the_sampler_each_release_runs():
    assert Release.of((0, 15, 1)).sampler(model(), 256) == ("sort top-k/top-p", 38.0)
    assert Release.of((0, 15, 1)).sampler(model(), 64)[1] == 50.0  # full-sort path
    assert Release.of((0, 19, 0)).sampler(model(), 256) == ("Triton top-k/top-p", 14.0)
    assert Release.of((0, 19, 0)).sampler(model(), 4)[0] == "sort top-k/top-p"
    assert Release.of((0, 21, 0)).sampler(model(), 256)[0] == "FlashInfer top-k/top-p"
    assert Release.of((0, 10, 2)).sampler(model(), 256)[0] == "FlashInfer top-k/top-p"
    assert Release.of((0, 23, 0)).sampler(model(), 256)[1] == 6.0  # V2 runner, Llama
    assert Release.of((0, 22, 0)).sampler(model(), 256)[1] == 14.0  # V2 only for Qwen3
    assert Release.of((0, 22, 0)).sampler(model("qwen3"), 256)[1] == 6.0
    assert Release.of((0, 23, 0)).sampler(model("qwen2"), 256)[1] == 14.0  # V1 runner


def test_the_triton_buffer_has_one_vocabulary_row_per_program():
    p19, p15 = pool("0.19.0"), pool("0.15.1")
    expected = (2048 + 512) * H * 2 + 256 * V * 14 + 132 * V * 4  # an unknown GPU: 132 SMs
    assert p19.torch_peak.sampler_bytes == expected
    assert p19.num_gpu_blocks > p15.num_gpu_blocks


def test_from_0_21_the_default_utilisation_is_0_92_and_cuda_graphs_count():
    old, new = pool("0.19.0", util=None), pool("0.21.0", util=None)
    assert (old.gpu_memory_utilization, new.gpu_memory_utilization) == (0.9, 0.92)
    assert old.cudagraph_bytes == 0
    sizes = cudagraph_capture_sizes(256, 2048)
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512 and len(sizes) == 51
    full = [s for s in sizes if s <= 256]
    first = 512 * (2 * H + 3 * F) * 2
    assert new.cudagraph_bytes == first + (len(sizes) - 1 + len(full) - 1) * 2**20
    assert pool("0.23.0").cudagraph_bytes == 0  # the V2 runner estimates none


def test_which_non_torch_memory_counts_changes_with_the_release():
    assert pool("0.8.5").non_torch_bytes > pool("0.10.2").non_torch_bytes  # CUDA context
    assert pool("0.15.1", tp=2).non_torch_bytes == LAZY_NON_TORCH_BYTES + NCCL_BYTES[2]
    assert pool("0.15.1").non_torch_bytes == LAZY_NON_TORCH_BYTES
    rounded, floored = pool("0.14.0", util=0.333), pool("0.12.0", util=0.333)
    assert rounded.requested_bytes == math.ceil(16 * GIB * 0.333)
    assert floored.requested_bytes == int(16 * GIB * 0.333)


def test_tp_splits_weights_and_kv_heads_per_gpu():
    one, two = pool("0.15.1"), pool("0.15.1", tp=2)
    assert two.weight_bytes == one.weight_bytes // 2
    assert two.page_bytes == one.page_bytes // 2
    assert two.torch_peak.forward_bytes < one.torch_peak.forward_bytes


def test_a_model_the_gpu_cannot_hold_is_one_line_with_the_arithmetic():
    big = model(num_hidden_layers=800)
    with pytest.raises(ConfigError) as info:
        pool("0.19.0", m=big)
    message = str(info.value)
    assert message.startswith("hardware: made-up does not fit on 1 x made-up-gpu under vLLM 0.19.0")
    assert "weights" in message and "GiB of KV cache" in message and "\n" not in message


def test_a_max_model_len_the_pool_cannot_hold_is_refused():
    p = pool("0.19.0")
    tokens = p.num_gpu_blocks * 16
    assert pool("0.19.0", max_model_len=tokens).num_gpu_blocks == p.num_gpu_blocks
    with pytest.raises(ConfigError, match=r"^max_model_len: one request of .* tokens needs"):
        pool("0.19.0", max_model_len=tokens + 64)


def test_without_a_release_the_pool_is_pagesims_own():
    hw = HardwareSpec(model="llama-3.1-8b", gpu="h100-sxm")
    legacy = kv_pool(hw, swap_space_gib=0)
    assert legacy.release is None
    assert (
        kv_pool(hw.model_copy(update={"gpu_memory_utilization": 0.9}), swap_space_gib=0) == legacy
    )
    named = kv_pool(hw, swap_space_gib=0, vllm_version="0.19.0", max_num_batched_tokens=2048)
    assert named.release is not None
    assert named.capacity_slots == named.release.num_gpu_blocks * 16
    assert named.capacity_slots != legacy.capacity_slots


def test_a_budget_given_overrides_the_release():
    hw = HardwareSpec(model="llama-3.1-8b", gpu="h100-sxm", kv_slots=4096)
    pool_ = kv_pool(hw, swap_space_gib=0, vllm_version="0.23.0")
    assert pool_.capacity_slots == 4096 and pool_.release is None


def _v1_doc(**server):
    return {
        "hardware": {"model": "qwen3-14b", "gpu": "h100-sxm"},
        "workload": {"name": "sharegpt", "num_requests": 12},
        "arrivals": {"process": "poisson", "rate_req_s": 8.0},
        "scheduler": {"kind": "vllm-v1", "max_num_batched_tokens": 8192},
        "allocator": {"kind": "paged-v1"},
        "max_model_len": 4096,
        "server": server,
    }


def test_a_run_naming_its_release_gets_that_pool_and_says_so():
    from pagesim.simulator.run import simulate

    spec = run_spec_from_dict(_v1_doc(vllm_version="0.23.0"))
    pool_ = run_kv_pool(spec)
    assert pool_.release is not None and pool_.release.gpu_memory_utilization == 0.92
    result = simulate(spec)
    assert result.extra["kv_capacity_slots"] == pool_.capacity_slots
    note = result.notes["kv_pool"]
    assert note.startswith(
        f"vLLM 0.23.0 pool of qwen3-14b on 1 x h100-sxm: {pool_.release.num_gpu_blocks:,} blocks"
    )
    assert "torch peak" in note and "non-torch" in note
    again = simulate(spec)  # determinism: same spec, same numbers and texts
    timeless = {k: v for k, v in result.summary.items() if k != "sim_wall_s"}
    assert {k: v for k, v in again.summary.items() if k != "sim_wall_s"} == timeless
    assert again.notes == result.notes
    assert again.requests.equals(result.requests)
    assert get_gpu("h100-sxm").name == pool_.gpu.name
