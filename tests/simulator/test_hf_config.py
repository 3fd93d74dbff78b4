"""A ModelSpec from a Hugging Face config.json: each family, each refusal, the shipped configs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.hf_config import load_model_config, model_spec_from_config
from pagesim.simulator.model_catalog import CONFIG_DIR, SHIPPED_CONFIGS, get_model
from pagesim.simulator.model_gpu_specs import MODELS

# a made-up small decoder: every count below is written out matrix by matrix
H, LAYERS, HEADS, KV, D, FFN, VOCAB = 64, 3, 4, 2, 16, 96, 1000


def llama_like(**extra):
    doc = {
        "model_type": "llama",
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
        "torch_dtype": "bfloat16",
    }
    return {**doc, **extra}


def llama_params(*, head_dim=H // HEADS, tied=False, qkv_bias=0, o_bias=0, qk_norm=0):
    q, kv = HEADS * head_dim, KV * head_dim
    attn = H * q + H * kv + H * kv + q * H  # q, k, v, o
    mlp = H * FFN * 3  # gate, up, down
    norms = H + H  # input and post-attention RMSNorm
    per_layer = attn + mlp + norms + qkv_bias * (q + 2 * kv) + o_bias * H + qk_norm * 2 * head_dim
    return (1 if tied else 2) * VOCAB * H + LAYERS * per_layer + H


def test_llama_counts_gqa_and_its_lm_head():
    spec = model_spec_from_config(llama_like(), name="tiny")
    assert (spec.name, spec.arch, spec.family) == ("tiny", "llama", "llama")
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.head_dim) == (3, 4, 2, 16)
    assert spec.num_params == llama_params()
    assert spec.kv_bytes_per_token == 2 * LAYERS * KV * 16 * 2


def test_tied_embeddings_drop_the_lm_head():
    tied = model_spec_from_config(llama_like(tie_word_embeddings=True))
    untied = model_spec_from_config(llama_like(tie_word_embeddings=False))
    assert untied.num_params - tied.num_params == VOCAB * H
    assert tied.num_params == llama_params(tied=True)


def test_explicit_head_dim_and_biases():
    spec = model_spec_from_config(llama_like(head_dim=32, attention_bias=True, mlp_bias=True))
    assert spec.head_dim == 32
    expected = llama_params(head_dim=32, qkv_bias=1, o_bias=1) + LAYERS * (2 * FFN + H)
    assert spec.num_params == expected


def test_mistral_keeps_its_sliding_window():
    spec = model_spec_from_config(llama_like(model_type="mistral", sliding_window=4096))
    assert (spec.family, spec.sliding_window, spec.num_params) == ("mistral", 4096, llama_params())


def test_qwen2_has_qkv_bias_and_no_window_unless_used():
    doc = llama_like(model_type="qwen2", sliding_window=131072, use_sliding_window=False)
    spec = model_spec_from_config(doc)
    assert spec.family == "qwen2" and spec.sliding_window is None
    assert spec.num_params == llama_params(qkv_bias=1)


def test_qwen3_has_qk_norm():
    spec = model_spec_from_config(llama_like(model_type="qwen3", head_dim=32))
    assert spec.has_qk_norm and spec.family == "qwen3"
    assert spec.num_params == llama_params(head_dim=32, qk_norm=1)


def test_opt_counts_learned_positions_and_biases():
    doc = {
        "model_type": "opt",
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "ffn_dim": FFN,
        "vocab_size": VOCAB,
        "max_position_embeddings": 128,
        "torch_dtype": "float16",
    }
    spec = model_spec_from_config(doc)
    layer = 4 * (H * H + H) + (H * FFN + FFN) + (FFN * H + H) + 2 * 2 * H
    assert spec.num_params == VOCAB * H + (128 + 2) * H + LAYERS * layer + 2 * H
    assert (spec.arch, spec.num_kv_heads, spec.head_dim) == ("opt", HEADS, H // HEADS)


def test_gpt_neox_is_priced_as_a_two_matrix_mlp():
    doc = {
        "model_type": "gpt_neox",
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
    }
    spec = model_spec_from_config(doc)
    layer = (H * 3 * H + 3 * H) + (H * H + H) + (H * FFN + FFN) + (FFN * H + H) + 4 * H
    assert spec.num_params == 2 * VOCAB * H + LAYERS * layer + 2 * H
    assert (spec.arch, spec.family, spec.dtype_bytes) == ("opt", "gpt_neox", 2)


@pytest.mark.parametrize("dtype, nbytes", [("bfloat16", 2), ("float16", 2), ("float32", 2)])
def test_dtype_is_what_vllm_serves(dtype, nbytes):
    """vLLM's --dtype auto serves a float32 checkpoint in half precision."""
    assert model_spec_from_config(llama_like(torch_dtype=dtype)).dtype_bytes == nbytes
    assert model_spec_from_config({**llama_like(), "dtype": dtype}).dtype_bytes == nbytes


@pytest.mark.parametrize(
    "extra, key",
    [
        ({"num_experts": 128}, "num_experts"),
        ({"num_local_experts": 8}, "num_local_experts"),
        ({"n_routed_experts": 256}, "n_routed_experts"),
        ({"moe_intermediate_size": 768}, "moe_intermediate_size"),
        ({"kv_lora_rank": 512}, "kv_lora_rank"),
        ({"q_lora_rank": 1536}, "q_lora_rank"),
        ({"is_encoder_decoder": True}, "is_encoder_decoder"),
        ({"vision_config": {"hidden_size": 8}}, "vision_config"),
        ({"text_config": {"hidden_size": 8}}, "text_config"),
        ({"model_type": "deepseek_v3"}, "deepseek_v3"),
        ({"torch_dtype": "int8"}, "torch_dtype"),
    ],
)
def test_what_is_not_a_dense_decoder_is_refused_naming_the_key(extra, key):
    with pytest.raises(ConfigError, match=key) as info:
        model_spec_from_config(llama_like(**extra), source="cfg.json")
    assert str(info.value).startswith("cfg.json: ") and "\n" not in str(info.value)


def test_a_dense_config_with_empty_moe_keys_is_not_refused():
    assert model_spec_from_config(llama_like(num_experts=0, moe_layer_freq=None)).num_params


def test_missing_keys_are_named():
    doc = llama_like()
    del doc["hidden_size"]
    with pytest.raises(ConfigError, match="missing key 'hidden_size'"):
        model_spec_from_config(doc, source="cfg.json")
    with pytest.raises(ConfigError, match="no 'model_type' key"):
        model_spec_from_config({"hidden_size": 8}, source="cfg.json")


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-32b"])
def test_shipped_configs_parse_to_the_hand_written_specs(name):
    doc = json.loads((CONFIG_DIR / f"{name}.json").read_text())
    parsed = model_spec_from_config(doc, name=name)
    assert parsed == MODELS[name]
    assert parsed.num_params == MODELS[name].num_params
    assert get_model(name) is MODELS[name]


def test_every_shipped_config_names_its_checkpoint_and_source():
    for name, hf_id in SHIPPED_CONFIGS.items():
        doc = json.loads((CONFIG_DIR / f"{name}.json").read_text())
        assert doc["_name_or_path"] == hf_id and doc["_pagesim_source"]
        assert get_model(name).name == name


def test_shipped_configs_match_their_model_cards():
    """Parameter counts the model cards print (Qwen3-8B 8.2B, Qwen3-14B 14.8B, Llama-3.1-70B
    70.6B, Mistral-7B 7.24B); Mistral-7B-v0.1 slides a 4,096-token window on every layer."""
    counts = {"qwen3-8b": 8.2e9, "qwen3-14b": 14.8e9, "llama-3.1-70b": 70.6e9}
    for name, count in counts.items():
        assert get_model(name).num_params == pytest.approx(count, rel=0.01), name
    mistral = get_model("mistral-7b-v0.1")
    assert mistral.num_params == pytest.approx(7.24e9, rel=0.01)
    assert mistral.sliding_window == 4096 and mistral.family == "mistral"


def test_a_config_path_names_the_model_it_holds(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama_like(_name_or_path="org/tiny-1b")))
    assert load_model_config(path).name == "org/tiny-1b"
    assert load_model_config(tmp_path).name == "org/tiny-1b"  # a folder holding config.json
    path.write_text(json.dumps(llama_like()))
    assert load_model_config(path).name == str(path)


def test_unreadable_configs_are_one_line_errors_naming_key_and_path(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=r"hardware.model: cannot read .*nope.json.*no such file"):
        load_model_config(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"hardware.model: .*bad.json is not valid JSON"):
        load_model_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_model_config(bad)


def test_parsed_specs_are_plain_frozen_values():
    spec = model_spec_from_config(llama_like(), name="a")
    assert dataclasses.replace(spec, name="a") == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.num_layers = 1  # type: ignore[misc]
