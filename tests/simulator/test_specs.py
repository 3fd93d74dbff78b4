"""Model and GPU specs: published sizes and name look-ups."""

from __future__ import annotations

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.model_gpu_specs import GPUS, MODELS, get_gpu, get_model
from pagesim.simulator.spec import run_spec_from_dict


def test_opt_13b_kv_is_800_kib_per_token():
    assert get_model("opt-13b").kv_bytes_per_token == 819_200 == 800 * 1024


def test_llama_2_70b_uses_gqa_with_8_kv_heads():
    m = get_model("llama-2-70b")
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (64, 8, 128)
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2  # 320 KiB: 8x less than MHA


def test_llama_3_8b_config():
    m = get_model("llama-3-8b")
    assert (m.num_kv_heads, m.vocab_size, m.ffn_size) == (8, 128256, 14336)


@pytest.mark.parametrize(
    "name, published_params",
    [
        ("opt-125m", 125.2e6),
        ("opt-13b", 12.85e9),
        ("opt-66b", 65.7e9),
        ("opt-175b", 174.6e9),
        ("llama-7b", 6.74e9),
        ("llama-2-13b", 13.02e9),
        ("llama-2-70b", 68.98e9),
        ("llama-3-8b", 8.03e9),
    ],
)
def test_parameter_counts_match_the_published_sizes(name, published_params):
    assert get_model(name).num_params == pytest.approx(published_params, rel=0.005)


@pytest.mark.parametrize(
    "name, paper_weight_gb", [("opt-13b", 26), ("opt-66b", 132), ("opt-175b", 346)]
)
def test_weights_match_the_paper_table_1(name, paper_weight_gb):
    assert get_model(name).weight_bytes / 1e9 == pytest.approx(paper_weight_gb, rel=0.015)


def test_every_model_has_consistent_heads():
    """head_dim is hidden / heads unless the config sets it (Qwen3: 64 x 128 = 8,192 > 5,120)."""
    explicit_head_dim = {"qwen3-32b"}
    for m in MODELS.values():
        if m.name not in explicit_head_dim:
            assert m.num_heads * m.head_dim == m.hidden_size, m.name
        assert m.num_heads % m.num_kv_heads == 0, m.name
        assert m.arch in ("opt", "llama")
        assert m.has_qk_norm == (m.name in explicit_head_dim), m.name


def test_llama_3_1_8b_and_qwen3_32b_configs():
    """The checkpoints' config.json values (LLMServingSim's configs/model/, verbatim HF files)."""
    llama = get_model("llama-3.1-8b")
    assert (llama.num_layers, llama.hidden_size, llama.num_heads, llama.num_kv_heads) == (
        32,
        4096,
        32,
        8,
    )
    assert (llama.ffn_size, llama.vocab_size, llama.head_dim) == (14336, 128256, 128)
    assert llama.num_params == get_model("llama-3-8b").num_params
    qwen = get_model("qwen3-32b")
    assert (qwen.num_layers, qwen.hidden_size, qwen.num_heads, qwen.num_kv_heads) == (
        64,
        5120,
        64,
        8,
    )
    assert (qwen.head_dim, qwen.ffn_size, qwen.vocab_size) == (128, 25600, 151936)
    assert qwen.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2  # 256 KiB
    assert qwen.num_params == pytest.approx(32.8e9, rel=0.005)  # the model card's 32.8B
    non_embedding = qwen.num_params - 2 * qwen.vocab_size * qwen.hidden_size
    assert non_embedding == pytest.approx(31.2e9, rel=0.005)  # and its 31.2B
    assert "qwen3-30b-a3b" not in MODELS  # mixture of experts: not modelled


def test_kv_heads_per_gpu_split_replicate_or_reject():
    m = get_model("llama-2-70b")
    assert m.num_kv_heads_per_gpu(1) == 8
    assert m.num_kv_heads_per_gpu(4) == 2
    assert m.num_kv_heads_per_gpu(16) == 1  # replicated
    with pytest.raises(ConfigError, match="tensor_parallel=3"):
        m.num_kv_heads_per_gpu(3)


def test_gpu_datasheet_numbers():
    a100 = get_gpu("a100-40gb")
    assert a100.memory_bytes == 40 * 2**30
    assert a100.hbm_bw_bytes_s == 1555e9 and a100.fp16_flops == 312e12
    assert get_gpu("h100-sxm").hbm_bw_bytes_s == 3.35e12
    assert get_gpu("h200").hbm_bw_bytes_s == 4.8e12
    assert set(GPUS) == {
        "a100-40gb",
        "a100-80gb",
        "h100-sxm",
        "h200",
        "rtx-4090",
        "rtx-pro-6000-server",
    }
    rtx = get_gpu("rtx-4090")
    assert rtx.memory_bytes == 25_250_627_584  # CUDA's total in LLMServingSim's run
    assert (rtx.hbm_bw_bytes_s, rtx.fp16_flops) == (1008e9, 165.2e12)
    pro = get_gpu("rtx-pro-6000-server")
    assert (pro.hbm_bw_bytes_s, pro.fp16_flops) == (1597e9, 503.8e12)
    assert pro.memory_bytes == 97887 * 2**20


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown model 'opt-14b'.*opt-13b"):
        get_model("opt-14b")
    with pytest.raises(ConfigError, match=r"unknown GPU 'v100'.*a100-40gb"):
        get_gpu("v100")


def test_a_named_vllm_release_sets_its_scheduler_defaults_and_needs_v1():
    from pagesim.simulator.vllm_releases import parse_version, resolved_scheduler

    v1 = {"scheduler": {"kind": "vllm-v1"}, "allocator": {"kind": "paged-v1"}}
    spec = run_spec_from_dict({**v1, "server": {"vllm_version": "0.23.0"}})
    assert resolved_scheduler(spec.scheduler, "0.23.0").async_scheduling is True
    assert resolved_scheduler(spec.scheduler, "0.13.0").async_scheduling is False
    assert resolved_scheduler(spec.scheduler, None).async_scheduling is False
    assert resolved_scheduler(spec.scheduler, "0.23.0").reserve_full_prompt is True
    assert resolved_scheduler(spec.scheduler, "0.15.1").reserve_full_prompt is False
    assert resolved_scheduler(spec.scheduler, None).reserve_full_prompt is True
    told = spec.scheduler.model_copy(update={"async_scheduling": False})
    assert resolved_scheduler(told, "0.23.0").async_scheduling is False
    assert parse_version("0.15.1+cu128") == (0, 15, 1) and parse_version("v0.9") == (0, 9, 0)
    with pytest.raises(ConfigError, match="server.vllm_version.*scheduler.kind must be 'vllm-v1'"):
        run_spec_from_dict({"server": {"vllm_version": "0.23.0"}})
    with pytest.raises(ConfigError, match="not a vLLM version"):
        run_spec_from_dict({**v1, "server": {"vllm_version": "latest"}})
    with pytest.raises(ConfigError, match="older than 0.8.0"):
        run_spec_from_dict({**v1, "server": {"vllm_version": "0.4.2"}})
