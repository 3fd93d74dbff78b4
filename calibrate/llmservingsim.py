"""LLMServingSim's layer profiles (vLLM 0.19's own kernels) as rows of calibrate's measurement schema.

LLMServingSim 2.0 (GitHub ``casys-kaist/LLMServingSim``, commit 5daddb2, MIT) profiles a
model on a GPU with the vLLM build it validates against, and writes a bundle
``profiler/perf/<HARDWARE>/<org>/<model>/<variant>/`` (``docs/docs/profiler/output-bundle.md``):
``meta.yaml`` (vLLM, CUDA, the device's name, the engine settings) and per TP degree
``tp<N>/`` the tables read here, times in microseconds. How they were timed
(``profiler/core/hooks/``): a one-layer model (``hf_overrides: num_hidden_layers: 1``),
``enforce_eager``, synthetic batches handed straight to the model runner; one warm-up
forward, then three under vLLM's layerwise profiler, whose per-module CUDA kernel time
divided by the calls is the row (kernel time only: no launch gaps). A TP degree N is
timed on one GPU with the per-rank shard's dimensions (heads, KV heads, ffn and vocab
divided by N), so its rows are one rank's work with no all-reduce.

Mapping onto pagesim's per-layer terms (features from :mod:`pagesim.simulator.costmodel.features`,
shapes of the TP shard, as the simulator computes them):

- ``dense.csv`` (``layer, tokens, time_us``): ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
  ``down_proj`` -> ``gemm`` rows (``layer_gemm_shapes``: h -> (heads + 2 kv) d, heads d -> h,
  h -> 2 f, f -> h, per rank) at ``tokens`` tokens. Two ``layernorm`` calls (the input and
  post-attention norms; vLLM fuses the residual add into them), ``rotary_emb``, ``act_fn``
  and, for Qwen3, ``qk_norm`` are summed per token count into one ``pointwise`` row.
  ``embedding`` and ``final_layernorm`` run once a step, not per layer: pagesim charges
  neither (the embedding lookup is not charged; see :data:`UNCHARGED`).
- ``per_sequence.csv`` (``layer, sequences, time_us``): ``lm_head`` (vLLM's
  ``LogitsProcessor``: the LM head GEMM over one row per sequence) -> ``gemm`` rows of shape
  h -> vocab / TP, since the simulator prices the LM head with the ``gemm`` term;
  ``sampler`` -> ``step_overhead`` rows (features: sequences, and as many tokens, as a
  decode step has). It is the only per-step cost in these tables: they hold no host time.
- ``attention.csv`` (``prefill_chunk, kv_prefill, n_decode, kv_decode, time_us``): one
  call of vLLM's ``Attention`` layer on a batch of one prefill of ``prefill_chunk`` new
  tokens after ``kv_prefill`` cached ones and ``n_decode`` decodes of one token after
  ``kv_decode`` cached ones each (``profiler/core/hooks/batch.py``). V1 runs prefill chunks
  and decodes in one kernel call; pagesim prices them as two terms. So the rows with only a
  prefill give ``prefill_attention`` (context = kv_prefill + prefill_chunk), the rows with
  only decodes ``paged_decode_attention`` (each context kv_decode + 1, block 16), and the
  mixed rows are kept apart (:func:`attention_rows`) to check the sum of the two fitted
  terms against and to fit ``mixed_decode_attention`` on (``import_llmservingsim.fit_mixed``). The layer's call also writes the step's K/V into the cache
  (``reshape_and_cache_flash``), so these timings include the ``kv_write`` term.

Not used: ``skew_fit.csv`` (LLMServingSim's correction for decode batches of unequal
contexts, t_mean + alpha (t_max - t_mean)): pagesim's decode attention depends on the
contexts through their sum, which a batch of unequal lengths has exactly; the alpha
it would add is named in the report (``meta.yaml``'s ``alpha_default``). ``moe.csv``
(mixture-of-experts models, which pagesim does not model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.calibrate.tables import TOKENS, read_table
from pagesim.errors import ConfigError, DataError
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.model import layer_gemm_shapes, lm_head_shape
from pagesim.simulator.model_gpu_specs import ModelSpec, get_model

US = 1e-6
DTYPE_BYTES = 2
#: the block size of LLMServingSim's profiles (``engine_effective.block_size``)
BLOCK_SIZE = 16
#: the device names meta.yaml records -> pagesim GPU specs
DEVICE_TO_GPU = {
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-server",
}
#: Hugging Face model ids -> pagesim model specs
MODEL_TO_SPEC = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "Qwen/Qwen3-32B": "qwen3-32b"}
#: dense.csv's linear layers, in a layer's order
GEMM_LAYERS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
#: dense.csv's element-wise layers and how many calls a layer makes
POINTWISE_LAYERS = {"layernorm": 2, "rotary_emb": 1, "act_fn": 1, "qk_norm": 1}
#: dense.csv's once-a-step layers, which pagesim does not charge
UNCHARGED = ("embedding", "final_layernorm")
META_KEYS = ("vllm_version", "gpu", "hardware", "model", "variant", "tp_degrees")
TABLES = ("attention.csv", "dense.csv", "per_sequence.csv")


@dataclass(frozen=True)
class Bundle:
    """One model's profile bundle on one GPU, at one TP degree (module docstring)."""

    root: Path
    meta: dict[str, Any]
    tensor_parallel: int

    @property
    def gpu(self) -> str:
        return DEVICE_TO_GPU[self.meta["gpu"]]

    @property
    def model(self) -> ModelSpec:
        return get_model(MODEL_TO_SPEC[self.meta["model"]])

    @property
    def prefix(self) -> str:
        """The bundle's path under LLMServingSim's ``profiler/perf/``."""
        return f"{self.meta['hardware']}/{self.meta['model']}/{self.meta['variant']}"

    def path(self, name: str) -> Path:
        return self.root / (
            "meta.yaml" if name == "meta.yaml" else f"tp{self.tensor_parallel}/{name}"
        )

    def file_name(self, name: str) -> str:
        """``name``'s path as recorded in a profile's sources (no machine paths)."""
        if name == "meta.yaml":
            return f"{self.prefix}/meta.yaml"
        return f"{self.prefix}/tp{self.tensor_parallel}/{name}"

    @property
    def files(self) -> tuple[str, ...]:
        return ("meta.yaml", *TABLES)


def read_bundle(root: str | Path, tensor_parallel: int = 1, gpu: str | None = None) -> Bundle:
    """The bundle at ``root`` (the variant folder holding ``meta.yaml``), checked: its
    device is a GPU pagesim has a spec for (and ``gpu`` when given), its model has a
    spec, ``tensor_parallel`` was profiled, and the shard dimensions it was timed with
    (``engine_effective.hf_overrides`` of its last TP degree) are the spec's."""
    from pagesim import yamlio

    root = Path(root)
    meta_path = root / "meta.yaml"
    if not meta_path.is_file():
        raise DataError(
            f"{root}: no meta.yaml (give LLMServingSim's profile folder "
            "profiler/perf/<HARDWARE>/<org>/<model>/<variant>/)"
        )
    meta = yamlio.read(meta_path, "LLMServingSim's meta.yaml")
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a mapping")
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise DataError(f"{meta_path}: no key {missing[0]!r}; required: {list(META_KEYS)}")
    if meta["gpu"] not in DEVICE_TO_GPU:
        raise DataError(
            f"{meta_path}: GPU {meta['gpu']!r} has no pagesim spec; known: {sorted(DEVICE_TO_GPU)}"
        )
    if gpu is not None and DEVICE_TO_GPU[meta["gpu"]] != gpu:
        raise ConfigError(
            f"--gpu {gpu}: {meta_path} says the tables were timed on {meta['gpu']} "
            f"(--gpu {DEVICE_TO_GPU[meta['gpu']]})"
        )
    if meta["model"] not in MODEL_TO_SPEC:
        raise DataError(
            f"{meta_path}: model {meta['model']!r} has no pagesim spec; known: "
            f"{sorted(MODEL_TO_SPEC)} (mixture-of-experts models are not modelled)"
        )
    degrees = [int(t) for t in meta["tp_degrees"]]
    if tensor_parallel not in degrees:
        raise ConfigError(
            f"--tensor-parallel {tensor_parallel}: {meta_path} was profiled at TP {degrees}"
        )
    bundle = Bundle(root, meta, tensor_parallel)
    overrides = (meta.get("engine_effective") or {}).get("hf_overrides") or {}
    _check_shard(bundle.model, max(degrees), overrides, meta_path)
    for name in TABLES:
        if not bundle.path(name).is_file():
            raise DataError(f"{bundle.path(name)}: file not found")
    return bundle


def _check_shard(model: ModelSpec, tp: int, overrides: dict[str, Any], where: Path) -> None:
    want = {
        "num_attention_heads": model.num_heads // tp,
        "num_key_value_heads": model.num_kv_heads_per_gpu(tp),
        "intermediate_size": model.ffn_size // tp,
    }
    for key, value in want.items():
        if key in overrides and int(overrides[key]) != value:
            raise DataError(
                f"{where}: engine_effective.hf_overrides.{key} is {overrides[key]}, but "
                f"{model.name} at TP {tp} has {value}: the tables are not of this model"
            )


def _read(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A table of the bundle (``tables.read_table``): its counts integers, its times positive."""
    counts = {c: TOKENS for c in columns if c not in ("layer", "time_us")}
    df = read_table(path, columns, integers=counts, numbers=("time_us",))
    times = df["time_us"].to_numpy(dtype=float)
    bad = np.flatnonzero(~(np.isfinite(times) & (times > 0)))
    if len(bad):
        raise DataError(f"{path}: line {bad[0] + 2}: time_us must be a positive time")
    return df


def _row(
    term: str,
    kernel: str,
    shape_id: str,
    params: dict,
    feats: F.Features,
    time_us: float,
    source: str,
) -> dict:
    return {
        "term": term,
        "kernel": kernel,
        "shape_id": shape_id,
        "params_json": json.dumps(params, sort_keys=True),
        **{
            k: params.get(k)
            for k in ("batch", "block_size", "num_heads", "num_kv_heads", "head_dim")
        },
        "mean_context": params.get("context"),
        "max_context": params.get("context"),
        **feats.as_dict(),
        "median_s": float(time_us) * US,
        "iqr_s": np.nan,
        "source_file": source,
    }


def _heads(bundle: Bundle) -> tuple[int, int, int]:
    m, tp = bundle.model, bundle.tensor_parallel
    return m.num_heads // tp, m.num_kv_heads_per_gpu(tp), m.head_dim


def attention_rows(bundle: Bundle) -> tuple[list[dict], pd.DataFrame]:
    """Prefill-only and decode-only rows, and the mixed rows for the check (module
    docstring): their prefill and decode features, the measured time, and the sum of the
    measured prefill-only and decode-only rows of the same shapes (NaN where the table
    lacks one)."""
    df = _read(
        bundle.path("attention.csv"),
        ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"),
    )
    heads, kv_heads, d = _heads(bundle)
    source = bundle.file_name("attention.csv")
    base = {"block_size": BLOCK_SIZE, "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": d}
    rows, mixed = [], []
    pure_prefill = {
        (int(r.prefill_chunk), int(r.kv_prefill)): r.time_us
        for r in df[df["n_decode"] == 0].itertuples()
    }
    pure_decode = {
        (int(r.n_decode), int(r.kv_decode)): r.time_us
        for r in df[df["prefill_chunk"] == 0].itertuples()
    }
    for r in df.itertuples(index=False):
        chunk, cached, n, kv = (
            int(r.prefill_chunk),
            int(r.kv_prefill),
            int(r.n_decode),
            int(r.kv_decode),
        )
        if chunk == 0 and n == 0:
            raise DataError(f"{source}: a row with neither a prefill chunk nor a decode")
        pre = F.prefill_attention([chunk], [cached + chunk], heads, kv_heads, d, DTYPE_BYTES)
        dec = F.decode_attention([kv + 1] * n, heads, kv_heads, d, BLOCK_SIZE, DTYPE_BYTES)
        if n == 0:
            params = base | {
                "batch": 1,
                "new_tokens": chunk,
                "cached_tokens": cached,
                "context": cached + chunk,
            }
            rows.append(
                _row(
                    "prefill_attention",
                    "attention",
                    f"prefill-n{chunk}-c{cached}",
                    params,
                    pre,
                    r.time_us,
                    source,
                )
            )
        elif chunk == 0:
            params = base | {"batch": n, "context": kv + 1}
            rows.append(
                _row(
                    "paged_decode_attention",
                    "attention",
                    f"decode-b{n}-c{kv + 1}",
                    params,
                    dec,
                    r.time_us,
                    source,
                )
            )
        else:
            pure = pure_prefill.get((chunk, cached), np.nan) + pure_decode.get((n, kv), np.nan)
            mixed.append(
                {"prefill": pre, "decode": dec, "median_s": r.time_us * US, "pure_sum_s": pure * US}
            )
    return rows, pd.DataFrame(mixed)


def dense_rows(bundle: Bundle) -> tuple[list[dict], dict[str, float]]:
    """``gemm`` and ``pointwise`` rows, and the largest time of each uncharged layer."""
    path = bundle.path("dense.csv")
    df = _read(path, ("layer", "tokens", "time_us"))
    source = bundle.file_name("dense.csv")
    wide = df.pivot_table(index="tokens", columns="layer", values="time_us", aggfunc="first")
    m, tp = bundle.model, bundle.tensor_parallel
    heads, kv_heads, d = _heads(bundle)
    needed = (
        *GEMM_LAYERS,
        "layernorm",
        "rotary_emb",
        "act_fn",
        *(("qk_norm",) if m.has_qk_norm else ()),
    )
    missing = [name for name in needed if name not in wide.columns]
    if missing:
        raise DataError(f"{path}: no rows of layer {missing[0]!r}")
    if wide[list(needed)].isna().any().any():
        raise DataError(
            f"{path}: the layers {list(needed)} are not all timed at the same token counts"
        )
    elems = F.pointwise_elems_per_token(
        "llama", m.hidden_size, m.ffn_size // tp, heads * d, kv_heads * d, m.has_qk_norm
    )
    shapes = dict(zip(GEMM_LAYERS, layer_gemm_shapes(m, tp), strict=True))
    rows = []
    for tokens, r in wide.iterrows():
        t = int(tokens)
        for op, (k, n) in shapes.items():
            params = {"op": op, "tokens": t, "in_features": k, "out_features": n, "tp": tp}
            rows.append(
                _row("gemm", op, f"{op}-t{t}", params, F.gemm(t, k, n, DTYPE_BYTES), r[op], source)
            )
        layers = [name for name in POINTWISE_LAYERS if name in needed]
        total = sum(POINTWISE_LAYERS[name] * r[name] for name in layers)
        params = {"tokens": t, "layers": layers, "tp": tp}
        kernel = "+".join(f"{POINTWISE_LAYERS[name]}x{name}" for name in layers)
        rows.append(
            _row(
                "pointwise",
                kernel,
                f"pointwise-t{t}",
                params,
                F.pointwise(t, elems, DTYPE_BYTES),
                total,
                source,
            )
        )
    uncharged = {name: float(wide[name].max()) for name in UNCHARGED if name in wide.columns}
    return rows, uncharged


def per_sequence_rows(bundle: Bundle) -> list[dict]:
    """``lm_head`` as ``gemm`` rows, ``sampler`` as ``step_overhead`` rows (module docstring)."""
    path = bundle.path("per_sequence.csv")
    df = _read(path, ("layer", "sequences", "time_us"))
    source = bundle.file_name("per_sequence.csv")
    k, n = lm_head_shape(bundle.model, bundle.tensor_parallel)
    rows = []
    for r in df.itertuples(index=False):
        s = int(r.sequences)
        if r.layer == "lm_head":
            params = {
                "op": "lm_head",
                "tokens": s,
                "in_features": k,
                "out_features": n,
                "tp": bundle.tensor_parallel,
            }
            rows.append(
                _row(
                    "gemm",
                    "lm_head",
                    f"lm_head-t{s}",
                    params,
                    F.gemm(s, k, n, DTYPE_BYTES),
                    r.time_us,
                    source,
                )
            )
        elif r.layer == "sampler":
            params = {"batch": s}
            rows.append(
                _row(
                    "step_overhead",
                    "sampler",
                    f"sampler-s{s}",
                    params,
                    F.step_overhead(s, s),
                    r.time_us,
                    source,
                )
            )
    kinds = {row["kernel"] for row in rows}
    if kinds != {"lm_head", "sampler"}:
        raise DataError(f"{path}: needs rows of both lm_head and sampler, found {sorted(kinds)}")
    return rows


@dataclass(frozen=True)
class BundleRows:
    """The measurement rows of a bundle, its mixed attention rows, and what goes uncharged."""

    rows: pd.DataFrame
    mixed: pd.DataFrame
    uncharged_us: dict[str, float]


def measurement_rows(bundle: Bundle) -> BundleRows:
    attention, mixed = attention_rows(bundle)
    dense, uncharged = dense_rows(bundle)
    return BundleRows(pd.DataFrame(attention + dense + per_sequence_rows(bundle)), mixed, uncharged)
