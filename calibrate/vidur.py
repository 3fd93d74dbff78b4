"""Vidur's operator tables as rows of calibrate's measurement schema (``measure.py``).

Vidur (Agrawal et al., MLSys'24; GitHub ``microsoft/vidur``, ``data/profiling/``) times
each operator of a decoder layer on real GPUs with PyTorch's Kineto profiler and
publishes the statistics per shape, times in milliseconds. Three kinds of table are read:

- attention (``*_attention.csv``): FlashAttention over a paged cache (``block_size``).
  Decode rows (``is_prefill`` False): ``batch_size`` sequences of ``kv_cache_size``
  tokens each, one query token each -> term ``paged_decode_attention``. Prefill rows:
  ``batch_size`` prompts of ``prefill_chunk_size`` new tokens after ``kv_cache_size``
  cached ones -> term ``prefill_attention``. Heads per GPU are ``n_q_head`` and
  ``n_kv_head`` over ``num_tensor_parallel_workers``; head dim ``n_embd / n_q_head``.
- MLP (``*_mlp.csv``): the four linear layers of a (LLaMA-style) layer at
  ``num_tokens`` tokens, TP-sharded as vLLM shards them -> term ``gemm``, one row per
  layer and shape: ``attn_pre_proj`` h -> (q + 2 kv) d / TP, ``attn_post_proj``
  q d / TP -> h, ``mlp_up_proj`` h -> 2 f / TP (gate and up fused; f / TP without a
  gated MLP), ``mlp_down_proj`` f / TP -> h. The element-wise operators of the same
  table (``input_layernorm``, ``attn_rope``, ``post_attention_layernorm``, ``mlp_act``,
  ``add``) are summed per shape into one row of term ``pointwise``, whose features are
  the bytes they move (``features.pointwise_elems_per_token``, LLaMA layout).
- CPU overheads (``*_cpu_overheads.csv``): per engine step, the Python-side work of the
  vLLM v0 engine of early 2024 that Vidur profiled (its instrumented fork, Ray workers): ``schedule``,
  ``sampler_e2e``, ``prepare_inputs_e2e``, ``process_model_outputs`` (medians) plus
  ``ray_comm_time`` (only its mean is published) vs ``batch_size`` -> term
  ``step_overhead`` (features: sequences and tokens = batch size, as in a decode step).

Attention rows also carry the table's ``attention_backend`` (e.g. ``FLASH_ATTENTION``) as
``backend``. Every row keeps the table's median as ``median_s`` (Vidur gives no quartiles: ``iqr_s``
is the published standard deviation's 1.349-fold, the IQR of a normal distribution, and
NaN where there is none) and the source file in ``source_file``.

Every table is read through :func:`pagesim.calibrate.tables.read_table`: an empty file, a
header without rows, text in a number column or a count outside its range (a batch of
more than ``tables.MAX_BATCH`` sequences, a context above ``MAX_TOKENS``) is one line naming the
file, the line and the column, before any row is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.tables import BATCH, POSITIVE_TOKENS, TOKENS, TP, WIDTH, read_table
from pagesim.errors import DataError
from pagesim.simulator.costmodel import features as F

MS = 1e-3
DTYPE_BYTES = 2
NORMAL_IQR_PER_STD = 1.349

#: The MLP table's linear layers, in a layer's order.
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: The MLP table's element-wise operators of one layer, summed into a ``pointwise`` row.
POINTWISE_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
#: The CPU-overhead table's per-step parts (medians) and the Ray call (mean only).
CPU_PARTS = (
    "schedule_median",
    "sampler_e2e_median",
    "prepare_inputs_e2e_median",
    "process_model_outputs_median",
)
RAY_PART = "ray_comm_time_mean"


def _stat(df: pd.DataFrame, op: str, stat: str) -> np.ndarray:
    return df[f"time_stats.{op}.{stat}"].to_numpy(dtype=float)


def _row(term, kernel, shape_id, params, feats: F.Features, median_s, std_s, source) -> dict:
    iqr = std_s * NORMAL_IQR_PER_STD if std_s is not None and np.isfinite(std_s) else np.nan
    return {
        "term": term,
        "kernel": kernel,
        "shape_id": shape_id,
        "params_json": json.dumps(params, sort_keys=True),
        **{k: params.get(k) for k in ("batch", "block_size", "num_heads", "num_kv_heads")},
        "head_dim": params.get("head_dim"),
        "mean_context": params.get("context"),
        "max_context": params.get("context"),
        **feats.as_dict(),
        "median_s": float(median_s),
        "iqr_s": float(iqr),
        "source_file": source,
    }


ATTENTION_COLUMNS = (
    "n_embd",
    "n_q_head",
    "n_kv_head",
    "block_size",
    "num_tensor_parallel_workers",
    "batch_size",
    "prefill_chunk_size",
    "kv_cache_size",
    "is_prefill",
    "time_stats.attn_decode.median",
    "time_stats.attn_prefill.median",
)


ATTENTION_INTEGERS = {
    "n_embd": WIDTH,
    "n_q_head": WIDTH,
    "n_kv_head": WIDTH,
    "block_size": POSITIVE_TOKENS,
    "num_tensor_parallel_workers": TP,
    "batch_size": BATCH,
    "prefill_chunk_size": TOKENS,
    "kv_cache_size": TOKENS,
}


def attention_rows(path: Path) -> list[dict]:
    """Decode and prefill attention rows (see the module docstring)."""
    times = [f"time_stats.{op}.{stat}" for op in ("attn_decode", "attn_prefill")
             for stat in ("median", "std")]  # fmt: skip
    df = read_table(path, ATTENTION_COLUMNS, integers=ATTENTION_INTEGERS, numbers=times)
    name = Path(path).name
    out = []
    for i, r in enumerate(df.to_dict("records")):
        tp = int(r["num_tensor_parallel_workers"])
        heads, kv_heads = int(r["n_q_head"]) // tp, int(r["n_kv_head"]) // tp
        head_dim = int(r["n_embd"]) // int(r["n_q_head"])
        batch, cached, block = int(r["batch_size"]), int(r["kv_cache_size"]), int(r["block_size"])
        params = {
            "batch": batch,
            "block_size": block,
            "num_heads": heads,
            "num_kv_heads": kv_heads,
            "head_dim": head_dim,
        }
        if r["is_prefill"] in (True, "True", "true", 1):
            chunk = int(r["prefill_chunk_size"])
            feats = F.prefill_attention(
                [chunk] * batch, [cached + chunk] * batch, heads, kv_heads, head_dim, DTYPE_BYTES
            )
            params |= {"new_tokens": chunk, "cached_tokens": cached, "context": cached + chunk}
            term, op = "prefill_attention", "attn_prefill"
            shape_id = f"{op}-b{batch}-n{chunk}-c{cached}"
        else:
            feats = F.decode_attention(
                [cached] * batch, heads, kv_heads, head_dim, block, DTYPE_BYTES
            )
            params |= {"context": cached}
            term, op = "paged_decode_attention", "attn_decode"
            shape_id = f"{op}-b{batch}-c{cached}"
        median = r[f"time_stats.{op}.median"]
        if not np.isfinite(median) or median <= 0:
            raise DataError(f"{path}: line {i + 2}: {op} median {median!r} is not a positive time")
        std = r.get(f"time_stats.{op}.std", np.nan)
        row = _row(term, op, shape_id, params, feats, median * MS, std * MS, name)
        row["backend"] = str(r.get("attention_backend", "unknown")).rsplit(".", 1)[-1]
        out.append(row)
    return out


MLP_COLUMNS = (
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
    *(f"time_stats.{op}.median" for op in GEMM_OPS + POINTWISE_OPS),
)


def gemm_shapes(
    hidden: int, heads: int, kv_heads: int, ffn: int, is_gated: bool, tp: int
) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer on one GPU of a TP group."""
    d = hidden // heads
    return {
        "attn_pre_proj": (hidden, (heads + 2 * kv_heads) * d // tp),
        "attn_post_proj": (heads * d // tp, hidden),
        "mlp_up_proj": (hidden, (2 if is_gated else 1) * ffn // tp),
        "mlp_down_proj": (ffn // tp, hidden),
    }


MLP_INTEGERS = {
    "n_head": WIDTH,
    "n_kv_head": WIDTH,
    "n_embd": WIDTH,
    "n_expanded_embd": WIDTH,
    "num_tokens": POSITIVE_TOKENS,
    "num_tensor_parallel_workers": TP,
}
MLP_TIMES = [
    f"time_stats.{op}.{stat}" for op in GEMM_OPS + POINTWISE_OPS for stat in ("median", "std")
]


def _mlp_table(path: Path) -> pd.DataFrame:
    return read_table(path, MLP_COLUMNS, integers=MLP_INTEGERS, numbers=MLP_TIMES)


def mlp_rows(path: Path) -> list[dict]:
    """GEMM rows, four per shape (see the module docstring)."""
    df = _mlp_table(path)
    name = Path(path).name
    out = []
    for i, r in enumerate(df.to_dict("records")):
        tp = int(r["num_tensor_parallel_workers"])
        m = int(r["num_tokens"])
        is_gated = r["use_gated_mlp"] in (True, "True", "true", 1)
        shapes = gemm_shapes(
            int(r["n_embd"]),
            int(r["n_head"]),
            int(r["n_kv_head"]),
            int(r["n_expanded_embd"]),
            is_gated,
            tp,
        )
        model = f"h{r['n_embd']}-f{r['n_expanded_embd']}-tp{tp}"
        for op, (k, n) in shapes.items():
            median = r[f"time_stats.{op}.median"]
            if not np.isfinite(median) or median <= 0:
                raise DataError(
                    f"{path}: line {i + 2}: {op} median {median!r} is not a positive time"
                )
            params = {"op": op, "tokens": m, "in_features": k, "out_features": n, "tp": tp}
            std = r.get(f"time_stats.{op}.std", np.nan)
            out.append(
                _row(
                    "gemm",
                    op,
                    f"{op}-{model}-t{m}",
                    params,
                    F.gemm(m, k, n, DTYPE_BYTES),
                    median * MS,
                    std * MS,
                    name,
                )
            )
    return out


def pointwise_rows(path: Path) -> list[dict]:
    """One ``pointwise`` row per MLP-table shape: the sum of its element-wise operators."""
    df = _mlp_table(path)
    name = Path(path).name
    out = []
    for i, r in enumerate(df.to_dict("records")):
        tp, m = int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
        hidden, heads, kv_heads = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
        d = hidden // heads
        is_gated = r["use_gated_mlp"] in (True, "True", "true", 1)
        if not is_gated:
            raise DataError(f"{path}: line {i + 2}: pointwise rows need a gated (LLaMA) MLP")
        ffn = int(r["n_expanded_embd"]) // tp
        elems = F.pointwise_elems_per_token(
            "llama", hidden, ffn, heads * d // tp, kv_heads * d // tp
        )
        total = sum(r[f"time_stats.{op}.median"] for op in POINTWISE_OPS)
        if not np.isfinite(total) or total <= 0:
            raise DataError(f"{path}: line {i + 2}: element-wise medians sum to {total!r}")
        params = {"tokens": m, "hidden": hidden, "ffn_per_gpu": ffn, "tp": tp}
        out.append(
            _row(
                "pointwise",
                "+".join(POINTWISE_OPS),
                f"pointwise-h{hidden}-f{ffn}-tp{tp}-t{m}",
                params,
                F.pointwise(m, elems, DTYPE_BYTES),
                total * MS,
                np.nan,
                name,
            )
        )
    return out


CPU_COLUMNS = ("model_name", "batch_size", "tensor_parallel_degree", *CPU_PARTS, RAY_PART)


def cpu_overhead_rows(path: Path, tensor_parallel: int = 1) -> list[dict]:
    """Step-overhead rows of the models profiled at ``tensor_parallel`` (module docstring)."""
    df = read_table(
        path, CPU_COLUMNS, integers={"batch_size": BATCH, "tensor_parallel_degree": TP},
        numbers=[*CPU_PARTS, RAY_PART],
    )  # fmt: skip
    parts = df[[*CPU_PARTS, RAY_PART]]
    bad = parts.isna().any(axis=1) | (parts < 0).any(axis=1)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        column = next(c for c in parts.columns if not parts[c].iloc[i] >= 0)
        raise DataError(
            f"{path}: line {i + 2}: {column} must be a time >= 0 ms, got {parts[column].iloc[i]!r}"
        )
    sel = df[df["tensor_parallel_degree"] == tensor_parallel]
    if sel.empty:
        raise DataError(
            f"{path}: no rows with tensor_parallel_degree {tensor_parallel}; present: "
            f"{sorted(df['tensor_parallel_degree'].unique().tolist())}"
        )
    name = Path(path).name
    out = []
    for r in sel.to_dict("records"):
        batch = int(r["batch_size"])
        total_ms = sum(r[c] for c in CPU_PARTS) + r[RAY_PART]
        params = {"batch": batch, "model": r["model_name"], "tp": tensor_parallel}
        out.append(
            _row(
                "step_overhead",
                "cpu_overhead",
                f"cpu-{r['model_name']}-b{batch}",
                params,
                F.step_overhead(batch, batch),
                total_ms * MS,
                np.nan,
                name,
            )
        )
    return out
