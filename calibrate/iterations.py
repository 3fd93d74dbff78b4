"""Whole engine steps timed on a GPU: the plan, the table, and the rows an iteration-level
profile is fitted on.

``benchmarks/gpu_iterations.py`` runs on a GPU machine with PyTorch: it builds one GPU's
shard of a model (random fp16 weights, every layer its own), and times whole forward
passes, as a serving engine's step runs them: every layer's RMSNorm, QKV, rotary, K/V
write, attention (PyTorch's ``scaled_dot_product_attention``, FlashAttention where it
takes the shape), output projection, gated MLP, the final norm, the LM head over each
sequence's last token and a greedy pick. Each step is captured once as a CUDA graph and
replayed (vLLM V1 replays captured graphs; so the host's launch time is not in the times,
as it is hidden there). What it writes, one row per step shape (:data:`COLUMNS`):

- ``phase`` ``decode``: ``batch`` sequences each at ``context`` tokens, the last of them
  new (its K/V written in the step, the attention over all ``context``);
- ``phase`` ``prefill``: ``batch`` prompts of ``new_tokens`` tokens each, no cached
  prefix (``context`` = ``new_tokens``), causal attention;
- ``median_s``, ``iqr_s``, ``repeats``: the replays' CUDA-event times;
- ``attention``: the SDPA backend that ran (``flash_attention`` unless it refused);
- ``tensor_parallel``: the shard's TP degree. One GPU holds one shard and does **no
  all-reduce**: a row with ``tensor_parallel`` > 1 is the step's compute on one GPU of
  the group, without the communication. Such rows are never fitted
  (:func:`iteration_rows`), only compared.

:func:`plan_steps` is the grid (shared by the GPU script and the tests);
:func:`read_steps` reads the table back with every cell checked; :func:`iteration_rows`
turns the TP-1 rows into ``prefill_iteration`` / ``decode_iteration`` measurement rows
over the simulator's own step features (``costmodel.iteration``), as Splitwise's
whole-iteration times are (``splitwise.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.tables import BATCH, POSITIVE_TOKENS, TP, read_table
from pagesim.errors import DataError
from pagesim.simulator.costmodel.iteration import uniform_decode_features, uniform_prefill_features
from pagesim.simulator.model_gpu_specs import ModelSpec, get_model

COLUMNS = (
    "model",
    "tensor_parallel",
    "phase",
    "batch",
    "new_tokens",
    "context",
    "median_s",
    "iqr_s",
    "repeats",
    "attention",
)
PHASES = ("prefill", "decode")
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (128, 512, 1024, 2048, 4096)
PREFILL_BATCHES = (1, 2, 4)
PREFILL_LENGTHS = (16, 64, 256, 512, 1024, 2048, 4096)
#: the most tokens one step shape holds in its K/V cache (decode) or prefills at once:
#: keeps every shape inside an 80 GB GPU beside the weights of a 7B model or a 70B shard
MAX_KV_TOKENS = 65_536
MAX_PREFILL_TOKENS = 8_192
#: the models timed by default: the dense models of the H100 validation runs
#: (``pagesim validate-vllm --data inference_sim_h100_v0151``), each at its runs' TP
DEFAULT_MODELS = ("llama-2-7b@tp1", "codellama-34b@tp2", "llama-2-70b@tp4")


@dataclass(frozen=True)
class StepShape:
    phase: str
    batch: int
    new_tokens: int
    context: int

    @property
    def kv_tokens(self) -> int:
        return self.batch * self.context


def parse_model(entry: str) -> tuple[ModelSpec, int]:
    """``NAME`` or ``NAME@tpN`` -> (model spec, N); unknown names raise with the allowed ones."""
    name, sep, tp = entry.partition("@tp")
    if sep and not tp.isdigit():
        raise DataError(f"model entry {entry!r}: expected NAME or NAME@tpN")
    model = get_model(name)
    degree = int(tp) if sep else 1
    if model.num_heads % degree or model.num_kv_heads_per_gpu(degree) < 1:
        raise DataError(f"model entry {entry!r}: {model.num_heads} heads do not split {degree} ways")
    return model, degree


def plan_steps(
    decode_batches=DECODE_BATCHES,
    decode_contexts=DECODE_CONTEXTS,
    prefill_batches=PREFILL_BATCHES,
    prefill_lengths=PREFILL_LENGTHS,
    max_kv_tokens: int = MAX_KV_TOKENS,
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
) -> list[StepShape]:
    """The step shapes, decode first (what serving steps mostly are), each phase in
    increasing size, the shapes over the token limits left out."""
    shapes = [
        StepShape("decode", b, 1, c)
        for b in decode_batches
        for c in decode_contexts
        if b * c <= max_kv_tokens
    ]
    shapes += [
        StepShape("prefill", b, p, p)
        for b in prefill_batches
        for p in prefill_lengths
        if b * p <= max_prefill_tokens
    ]
    return shapes


def read_steps(path: Path) -> pd.DataFrame:
    """The table ``benchmarks/gpu_iterations.py`` wrote, every cell checked."""
    df = read_table(
        path,
        COLUMNS,
        "benchmarks/gpu_iterations.py's output",
        integers={
            "tensor_parallel": TP,
            "batch": BATCH,
            "new_tokens": POSITIVE_TOKENS,
            "context": POSITIVE_TOKENS,
            "repeats": BATCH,
        },
        numbers=("median_s", "iqr_s"),
    )
    line = lambda i: f"{path}: line {int(i) + 2}"  # noqa: E731 - line 1 is the header
    bad = ~df["phase"].isin(PHASES)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        raise DataError(f"{line(i)}: phase {df['phase'].iloc[i]!r} is not one of {list(PHASES)}")
    times = df["median_s"].to_numpy(dtype=float)
    bad = ~(np.isfinite(times) & (times > 0))
    if bad.any():
        raise DataError(f"{line(np.flatnonzero(bad)[0])}: median_s must be a positive time")
    for i, name in enumerate(df["model"]):
        try:
            get_model(str(name))
        except Exception as exc:  # noqa: BLE001 - the catalogue's own message names the known ones
            raise DataError(f"{line(i)}: model {name!r}: {exc}") from None
    return df


@dataclass(frozen=True)
class StepRows:
    """Measurement rows to fit (TP 1) and the rows left out, each with its reason."""

    rows: pd.DataFrame
    left_out: tuple[str, ...]


def _row(term: str, r, feats) -> dict:
    shape_id = f"{r.phase}-{r.model}-tp{r.tensor_parallel}-b{r.batch}-c{r.context}"
    params = {
        "model": r.model,
        "tp": int(r.tensor_parallel),
        "batch": int(r.batch),
        "new_tokens": int(r.new_tokens),
        "context": int(r.context),
    }
    return {
        "term": term,
        "kernel": "whole_iteration",
        "shape_id": shape_id,
        "params_json": json.dumps(params, sort_keys=True),
        "batch": int(r.batch),
        "block_size": None,
        "num_heads": None,
        "num_kv_heads": None,
        "head_dim": None,
        "mean_context": int(r.context),
        "max_context": int(r.context),
        **feats.as_dict(),
        "median_s": float(r.median_s),
        "iqr_s": float(r.iqr_s),
        "model": r.model,
        "tensor_parallel": int(r.tensor_parallel),
    }


def step_features(r):
    """The simulator's features of one table row's step (one GPU of its TP group)."""
    model = get_model(str(r.model))
    tp = int(r.tensor_parallel)
    if r.phase == "prefill":
        return uniform_prefill_features(model, tp, int(r.batch), int(r.new_tokens))
    return uniform_decode_features(model, tp, int(r.batch), int(r.context))


def iteration_rows(df: pd.DataFrame) -> StepRows:
    """``prefill_iteration`` and ``decode_iteration`` rows of the TP-1 steps (module doc)."""
    rows, left_out = [], []
    for r in df.itertuples(index=False):
        if int(r.tensor_parallel) > 1:
            continue
        term = "prefill_iteration" if r.phase == "prefill" else "decode_iteration"
        rows.append(_row(term, r, step_features(r)))
    sharded = df[df["tensor_parallel"] > 1]
    for (model, tp), sub in sharded.groupby(["model", "tensor_parallel"], sort=True):
        left_out.append(
            f"{model} TP {tp}: {len(sub)} steps of one GPU's shard without the all-reduce "
            "(compared, not fitted)"
        )
    if not rows:
        raise DataError(
            "no TP-1 step in the table: an iteration-level profile needs whole steps of one "
            "GPU with nothing left out (sharded steps lack their all-reduce)"
        )
    return StepRows(pd.DataFrame(rows), tuple(left_out))
