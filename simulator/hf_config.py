"""A ModelSpec from a Hugging Face ``config.json``: any dense decoder of a known family.

Rule: the shapes are read as ``transformers`` defines each family's configuration class
(``models/<type>/configuration_<type>.py``) and ``num_params`` is counted from them, layer
by layer, exactly as the hand-written specs of ``model_gpu_specs`` count (the parser on
``meta-llama/Llama-3.1-8B``'s and ``Qwen/Qwen3-32B``'s configs gives their specs bit for bit;
tests check it). Families (:data:`FAMILIES`, one function each, one line to add one):

- ``llama``, ``mistral``: SwiGLU MLP (gate, up, down), RMSNorm, GQA (``num_key_value_heads``,
  default ``num_attention_heads``), ``head_dim`` when given (else hidden / heads), biases on
  q/k/v/o when ``attention_bias`` and on the MLP when ``mlp_bias`` (both default false);
- ``qwen2``: as llama, with biases on q, k and v (not o) always (Qwen2's attention module);
- ``qwen3``: as llama, with an RMSNorm of ``head_dim`` over each head's query and key
  (``has_qk_norm``) and q/k/v/o biases only when ``attention_bias``;
- ``opt``: learned positions (``max_position_embeddings`` + 2 rows), biases everywhere,
  LayerNorms, a two-matrix ReLU MLP of ``ffn_dim``, ``word_embed_proj_dim`` projections;
- ``gpt_neox``: a fused QKV with bias, LayerNorms with bias, a two-matrix GELU MLP of
  ``intermediate_size``; priced by the cost model as ``arch: opt`` (the same GEMM shapes).

``tie_word_embeddings`` (default true for OPT, false for the others) drops the LM head's
``vocab x hidden`` from ``num_params``. The dtype is what vLLM serves with ``--dtype auto``:
the config's ``torch_dtype`` (``dtype`` in transformers 5): bfloat16 and float16 are 2 bytes,
and a float32 checkpoint is served in half precision too (vLLM ``config/model.py``,
``_resolve_auto_dtype``: "Downcast for float32 models"); a config without a dtype is read
as float32, so also 2 bytes.

**Sliding window** (Mistral-7B-v0.1: ``sliding_window: 4096`` on every layer; Qwen2/Qwen3 set
``sliding_window`` but ``use_sliding_window: false``): kept on the spec
(``ModelSpec.sliding_window``). vLLM V1 gives every layer of a model whose layers are all
sliding-window a ``SlidingWindowSpec``, and its ``SlidingWindowManager``
(``v1/core/single_type_kv_cache_manager.py``) frees a request's blocks that fall out of the
window; when a model mixes full and sliding layers and the hybrid manager is off,
``unify_hybrid_kv_cache_specs`` (``v1/core/kv_cache_utils.py``, read at v0.19.0) turns the
sliding layers into full attention. The pool's size is the same either way (the page of a
layer does not depend on the window). pagesim's ``paged-v1`` allocator keeps every block of
a request (full attention): exact for requests up to the window, an upper bound on the
memory of longer ones; the run's notes say so.

Refused, in one line naming the key found: mixture of experts (``num_experts``,
``num_local_experts``, ``n_routed_experts``, any ``moe_*`` key with a value), multi-head
latent attention (``kv_lora_rank``, ``q_lora_rank``), encoder-decoder models
(``is_encoder_decoder``, ``encoder_layers``), vision towers (``vision_config``,
``text_config``, ``vision_tower``, ``mm_vision_tower``), and an unknown ``model_type``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pagesim.errors import ConfigError
from pagesim.simulator.model_gpu_specs import ModelSpec

#: keys whose presence (with a value that is not null, 0, false or empty) makes a config
#: something other than a dense decoder, and what that is
_REFUSED_KEYS = (
    ("num_experts", "a mixture of experts"),
    ("num_local_experts", "a mixture of experts"),
    ("n_routed_experts", "a mixture of experts"),
    ("kv_lora_rank", "multi-head latent attention (MLA)"),
    ("q_lora_rank", "multi-head latent attention (MLA)"),
    ("is_encoder_decoder", "an encoder-decoder model"),
    ("encoder_layers", "an encoder-decoder model"),
    ("vision_config", "a model with a vision tower"),
    ("text_config", "a multimodal model (text_config inside)"),
    ("vision_tower", "a model with a vision tower"),
    ("mm_vision_tower", "a model with a vision tower"),
)

#: ``torch_dtype`` -> bytes per value as vLLM serves it with ``--dtype auto`` (module doc)
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}


def refusal(doc: dict[str, Any]) -> str | None:
    """Why ``doc`` is not a dense decoder pagesim can model (None: it is)."""
    for key, what in _REFUSED_KEYS:
        if doc.get(key) not in (None, 0, False, [], {}, ""):
            return f"{what} (key {key!r} = {_short(doc[key])})"
    for key in sorted(doc):
        if key.startswith("moe_") and doc[key] not in (None, 0, False, [], {}, ""):
            return f"a mixture of experts (key {key!r} = {_short(doc[key])})"
    model_type = doc.get("model_type")
    if model_type is None:
        return "no 'model_type' key"
    if model_type not in FAMILIES:
        return f"model_type {model_type!r} is not one of {', '.join(FAMILIES)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """Typed access to a config's keys; every failure names the source and the key."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        self.doc, self.source = doc, source

    def int(self, key: str, default: int | None = None) -> int:
        value = self.doc.get(key, default)
        if value is None:
            raise ConfigError(f"{self.source}: missing key {key!r} (a dense decoder needs it)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{self.source}: key {key!r} must be a positive integer, got {value!r}"
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.doc.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.source}: key {key!r} must be true or false, got {value!r}")
        return value

    def dtype_bytes(self) -> int:
        name = self.doc.get("torch_dtype", self.doc.get("dtype", "float32"))
        if name not in _DTYPE_BYTES:
            raise ConfigError(
                f"{self.source}: key 'torch_dtype' is {name!r}; pagesim reads "
                f"{', '.join(_DTYPE_BYTES)}"
            )
        return _DTYPE_BYTES[name]

    def sliding_window(self) -> int | None:
        """The window when every layer uses it (module doc), else None."""
        window = self.doc.get("sliding_window")
        if window in (None, 0) or not self.flag("use_sliding_window", True):
            return None
        return self.int("sliding_window")


def _llama_family(
    r: _Reader, name: str, *, qkv_bias: bool, qk_norm: bool, model_type: str = ""
) -> ModelSpec:
    """LLaMA-like (module doc); the count is ``model_gpu_specs._llama``'s plus the biases."""
    h, layers, heads = (
        r.int("hidden_size"),
        r.int("num_hidden_layers"),
        r.int("num_attention_heads"),
    )
    kv_heads = r.int("num_key_value_heads", heads)
    head_dim = r.int("head_dim", h // heads)
    ffn, vocab = r.int("intermediate_size"), r.int("vocab_size")
    attn = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
    per_layer = attn + 3 * h * ffn + 2 * h + (2 * head_dim if qk_norm else 0)
    if r.flag("attention_bias", False):
        per_layer += (heads + 2 * kv_heads) * head_dim + h
    elif qkv_bias:
        per_layer += (heads + 2 * kv_heads) * head_dim
    if r.flag("mlp_bias", False):
        per_layer += 2 * ffn + h
    heads_of_vocab = 1 if r.flag("tie_word_embeddings", False) else 2
    params = heads_of_vocab * vocab * h + layers * per_layer + h
    return ModelSpec(
        name, layers, h, heads, kv_heads, head_dim, ffn, vocab, params, r.dtype_bytes(),
        "llama", qk_norm, r.sliding_window(), model_type,
    )  # fmt: skip


def _llama(r: _Reader, name: str) -> ModelSpec:
    return _llama_family(r, name, qkv_bias=False, qk_norm=False)


def _mistral(r: _Reader, name: str) -> ModelSpec:
    return _llama_family(r, name, qkv_bias=False, qk_norm=False, model_type="mistral")


def _qwen2(r: _Reader, name: str) -> ModelSpec:
    return _llama_family(r, name, qkv_bias=True, qk_norm=False, model_type="qwen2")


def _qwen3(r: _Reader, name: str) -> ModelSpec:
    return _llama_family(r, name, qkv_bias=False, qk_norm=True)


def _two_matrix_layer(h: int, ffn: int) -> int:
    """QKV and out projections with biases, two MLP matrices with biases, two LayerNorms
    with biases: ``model_gpu_specs._opt``'s per-layer count (GPT-NeoX's layer is the same)."""
    return 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h


def _opt(r: _Reader, name: str) -> ModelSpec:
    """OPT, counted as ``model_gpu_specs._opt`` counts (learned positions + 2 rows)."""
    h, layers, heads = (
        r.int("hidden_size"),
        r.int("num_hidden_layers"),
        r.int("num_attention_heads"),
    )
    ffn, vocab = r.int("ffn_dim"), r.int("vocab_size")
    positions = r.int("max_position_embeddings") + 2
    embed = r.int("word_embed_proj_dim", h)
    heads_of_vocab = 1 if r.flag("tie_word_embeddings", True) else 2
    params = heads_of_vocab * vocab * embed + positions * h + layers * _two_matrix_layer(h, ffn)
    params += 2 * h + (2 * embed * h if embed != h else 0)
    return ModelSpec(
        name, layers, h, heads, heads, h // heads, ffn, vocab, params, r.dtype_bytes(), "opt"
    )


def _gpt_neox(r: _Reader, name: str) -> ModelSpec:
    """GPT-NeoX: MHA, rotary positions (no position table), untied ``embed_out`` by default."""
    h, layers, heads = (
        r.int("hidden_size"),
        r.int("num_hidden_layers"),
        r.int("num_attention_heads"),
    )
    ffn, vocab = r.int("intermediate_size"), r.int("vocab_size")
    heads_of_vocab = 1 if r.flag("tie_word_embeddings", False) else 2
    params = heads_of_vocab * vocab * h + layers * _two_matrix_layer(h, ffn) + 2 * h
    return ModelSpec(
        name, layers, h, heads, heads, h // heads, ffn, vocab, params, r.dtype_bytes(), "opt",
        model_type="gpt_neox",
    )  # fmt: skip


#: ``model_type`` -> the function that reads that family's config (module doc)
FAMILIES: dict[str, Callable[[_Reader, str], ModelSpec]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "opt": _opt,
    "gpt_neox": _gpt_neox,
}


def model_spec_from_config(
    doc: Any, *, name: str | None = None, source: str = "config"
) -> ModelSpec:
    """The ModelSpec of a parsed ``config.json``; ``name`` (else the config's
    ``_name_or_path``, else ``source``) becomes ``ModelSpec.name``. One-line ConfigError,
    naming ``source`` and the key, when it is not a dense decoder of a known family."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: a config.json is a JSON object, got {type(doc).__name__}")
    problem = refusal(doc)
    if problem is not None:
        raise ConfigError(f"{source}: not a dense decoder pagesim can model: {problem}")
    label = name or doc.get("_name_or_path") or source
    return FAMILIES[doc["model_type"]](_Reader(doc, source), str(label))


def read_config(path: str | Path, *, key: str = "hardware.model") -> dict[str, Any]:
    """The JSON object in ``path`` (a ``config.json``, or a folder holding one)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        reason = "no such file" if not file.exists() else exc.strerror or type(exc).__name__
        raise ConfigError(f"{key}: cannot read the model config {str(file)!r}: {reason}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{key}: {file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{key}: {file} must hold a JSON object, got {type(doc).__name__}")
    return doc


def load_model_config(path: str | Path, *, key: str = "hardware.model") -> ModelSpec:
    """The ModelSpec of the ``config.json`` at ``path``, named by its ``_name_or_path``, else
    by the path as given (so a page names the model it simulated)."""
    doc = read_config(path, key=key)
    return model_spec_from_config(
        doc, name=doc.get("_name_or_path") or str(path), source=f"{key}: {path}"
    )
