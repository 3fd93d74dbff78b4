"""hardware.model: shipped names, Hugging Face ids, config paths (relative to the experiment)."""

from __future__ import annotations

import json

import pytest
import yaml

from pagesim.errors import ConfigError
from pagesim.simulator.model_catalog import (
    HF_IDS,
    get_model,
    model_reference_problem,
    resolve_model,
    shipped_names,
)
from pagesim.simulator.model_gpu_specs import MODELS

TINY = {
    "_name_or_path": "acme/tiny-decoder",
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "text, name",
    [
        ("qwen3-14b", "qwen3-14b"),
        ("Qwen/Qwen3-14B", "qwen3-14b"),
        ("QWEN3-8B", "qwen3-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("meta-llama/Llama-2-70b-chat-hf", "llama-2-70b"),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),
        ("facebook/opt-13b", "opt-13b"),
        ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b-v0.1"),
        ("mistralai/Mistral-7B", "mistral-7b-v0.1"),  # a unique prefix
    ],
)
def test_lenient_lookup(text, name):
    assert resolve_model(text) == name


def test_every_alias_names_a_shipped_model():
    assert set(HF_IDS.values()) <= set(shipped_names())
    assert set(MODELS) <= set(shipped_names())
    for hf_id, name in HF_IDS.items():
        assert resolve_model(hf_id) == name


def test_ambiguous_and_unknown_names_list_close_matches():
    with pytest.raises(
        ConfigError, match=r"ambiguous model 'llama-3\.1'.*llama-3\.1-70b, llama-3\.1-8b"
    ):
        resolve_model("llama-3.1")
    with pytest.raises(ConfigError, match=r"unknown model 'qwen3-15b'; close matches: .*qwen3-14b"):
        resolve_model("qwen3-15b")
    with pytest.raises(ConfigError, match=r"^hardware.model: unknown model 'gpt-4'; shipped: "):
        get_model("gpt-4")


def test_a_hugging_face_id_gets_the_shipped_spec():
    assert get_model("meta-llama/Llama-3.1-8B-Instruct") is MODELS["llama-3.1-8b"]
    assert get_model("Qwen/Qwen3-14B") == get_model("qwen3-14b")


def test_a_path_is_read_and_names_the_model(tmp_path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(TINY))
    assert get_model(str(tmp_path / "tiny" / "config.json")).name == "acme/tiny-decoder"
    assert get_model(str(tmp_path / "tiny")).num_layers == 2
    problem = model_reference_problem(str(tmp_path / "missing.json"))
    assert problem is not None and "hardware.model" in problem and "missing.json" in problem


def _experiment(tmp_path, model: str) -> object:
    doc = {
        "name": "m",
        "description": "a model from its config.json",
        "base": {
            "hardware": {"model": model, "gpu": "h100-sxm", "kv_slots": 4096},
            "workload": {"name": "sharegpt", "num_requests": 6},
            "arrivals": {"process": "poisson", "rate_req_s": 4.0},
            "scheduler": {"kind": "vllm-v1"},
            "allocator": {"kind": "paged-v1"},
        },
        "seeds": [0],
    }
    path = tmp_path / "exp" / "run.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_experiment_reads_a_config_beside_it_wherever_it_runs(tmp_path, monkeypatch):
    from pagesim.experiments.validate import load_experiment_points

    (tmp_path / "exp" / "models").mkdir(parents=True)
    (tmp_path / "exp" / "models" / "tiny.json").write_text(json.dumps(TINY))
    path = _experiment(tmp_path, "models/tiny.json")
    monkeypatch.chdir(tmp_path)  # not the experiment's folder
    _, points = load_experiment_points(path)
    model = points[0][1].hardware.model
    assert get_model(model).name == "acme/tiny-decoder"


def test_a_missing_config_is_one_line_naming_the_key_and_path(tmp_path):
    from pagesim.experiments.validate import load_experiment_points

    path = _experiment(tmp_path, "models/none.json")
    with pytest.raises(ConfigError) as info:
        load_experiment_points(path)
    message = str(info.value)
    assert "base.hardware.model" in message and "none.json" in message and "\n" not in message


def test_a_refused_config_says_why_at_validation(tmp_path):
    from pagesim.experiments.validate import load_experiment_points

    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "moe.json").write_text(json.dumps({**TINY, "num_experts": 64}))
    with pytest.raises(
        ConfigError, match=r"base.hardware.model: .*a mixture of experts \(key 'num_experts'"
    ):
        load_experiment_points(_experiment(tmp_path, "./moe.json"))


def test_a_run_names_the_model_it_simulated(tmp_path):
    from pagesim.simulator.run import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "sliding_window": 64}))
    doc = {
        "hardware": {"model": str(path), "gpu": "h100-sxm", "kv_slots": 2048},
        "workload": {"name": "sharegpt", "num_requests": 4},
        "scheduler": {"kind": "vllm-v1"},
        "allocator": {"kind": "paged-v1"},
    }
    notes = simulate(run_spec_from_dict(doc)).notes
    assert notes["model"].startswith(f"acme/tiny-decoder (hardware.model '{path}')")
    assert "sliding window 64 tokens" in notes["model"]
    shipped = simulate(run_spec_from_dict({**doc, "hardware": {"kv_slots": 2048}})).notes
    assert "model" not in shipped and "kv_pool" not in shipped
