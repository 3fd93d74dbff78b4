"""Splitwise's whole-iteration times as rows of calibrate's measurement schema.

Splitwise (Patel et al., ISCA'24; GitHub ``Mutinifni/splitwise-sim``, ``data/perf_model.csv``)
published times of whole engine iterations measured on real GPUs: per (``model``,
``hardware``, ``tensor_parallel``, ``prompt_size``, ``batch_size``, ``token_size``), with
about five repeated rows each, ``prompt_time`` (ms) of the prefill iteration of
``batch_size`` prompts of ``prompt_size`` tokens and ``token_time`` (ms), the mean decode
iteration while ``batch_size`` sequences generate ``token_size`` tokens after the prompt
(``e2e_time`` = ``prompt_time`` + (``token_size`` - 1) x ``token_time`` in the table).

Mapping onto the cost model. An iteration is every operator of every layer plus the
framework's per-step work; one time per step cannot be split into the operator terms, so
these rows go to the two *iteration-level* terms
(:mod:`pagesim.simulator.costmodel.iteration`), whose features are the whole step's on one
GPU of the TP group (:func:`~pagesim.simulator.costmodel.iteration.step_features`):

- ``prefill_iteration``: one row per (model, hardware, TP, prompt, batch): the median
  ``prompt_time`` over all repeats *and all token sizes* (the prefill does not depend on
  how many tokens follow; keeping one row per token size would put copies of a held-out
  shape into the training set); plan: ``batch`` prompts of ``prompt`` new tokens.
- ``decode_iteration``: one row per (model, hardware, TP, prompt, batch, tokens): the
  median ``token_time``; plan: ``batch`` sequences at context ``prompt + tokens / 2``, the
  mean context over the generation (the step's features are linear in the context).

Rows are kept for ``hardware`` (Splitwise's name, e.g. ``a100-80gb``) and for models
pagesim has a spec for (:data:`MODEL_TO_SPEC`); the others are counted in
:attr:`SplitwiseRows.skipped` with the reason. A prefill point measured faster than its
GPUs' FP16 peak allows (2 x parameters x tokens / (TP x peak)) cannot be a full prefill of
those tokens: it is left out of the fit and listed (``below_peak``), not corrected.
The table is read through :func:`pagesim.calibrate.tables.read_table` (empty, header-only,
text in a number column, counts out of range: one line naming file, line and column).
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
from pagesim.simulator.model_gpu_specs import get_gpu, get_model

MS = 1e-3
REQUIRED = (
    "model",
    "hardware",
    "tensor_parallel",
    "prompt_size",
    "batch_size",
    "token_size",
    "prompt_time",
    "token_time",
)
#: Splitwise's model names -> pagesim model specs.
MODEL_TO_SPEC = {"llama2-70b": "llama-2-70b"}
#: pagesim GPU spec -> Splitwise's hardware name (the uncapped configuration).
GPU_TO_HARDWARE = {"a100-80gb": "a100-80gb", "h100-sxm": "h100-80gb"}


@dataclass(frozen=True)
class SplitwiseRows:
    """The measurement rows of one GPU, and what was left out (with reasons)."""

    rows: pd.DataFrame
    skipped: tuple[str, ...]
    below_peak: pd.DataFrame
    #: the file's other hardware names and their row counts, e.g. ``h100-80gb-pcap: 420 rows``
    other_hardware: tuple[str, ...] = ()


INTEGERS = {
    "tensor_parallel": TP,
    "prompt_size": POSITIVE_TOKENS,
    "batch_size": BATCH,
    "token_size": POSITIVE_TOKENS,
}


def read_points(path: Path) -> pd.DataFrame:
    """Every row of the table, checked (``tables.read_table``; times positive)."""
    df = read_table(
        path, REQUIRED, "Splitwise's perf_model.csv", integers=INTEGERS,
        numbers=("prompt_time", "token_time"),
    )  # fmt: skip
    for col in ("prompt_time", "token_time"):
        bad = ~(np.isfinite(df[col].to_numpy(dtype=float)) & (df[col] > 0))
        if bad.any():
            raise DataError(
                f"{path}: line {int(np.flatnonzero(bad)[0]) + 2}: {col} must be a positive time"
            )
    return df


def _row(term, shape_id, params, feats, median_s, source) -> dict:
    return {
        "term": term,
        "kernel": "whole_iteration",
        "shape_id": shape_id,
        "params_json": json.dumps(params, sort_keys=True),
        "batch": params["batch"],
        "block_size": None,
        "num_heads": None,
        "num_kv_heads": None,
        "head_dim": None,
        "mean_context": params["context"],
        "max_context": params["context"],
        **feats.as_dict(),
        "median_s": float(median_s),
        "iqr_s": np.nan,
        "source_file": source,
        "model": params["model"],
        "tensor_parallel": params["tp"],
    }


def iteration_rows(path: Path, gpu: str) -> SplitwiseRows:
    """The prefill and decode iteration rows of ``gpu`` (see the module docstring)."""
    df = read_points(path)
    hardware = GPU_TO_HARDWARE.get(gpu)
    if hardware is None:
        raise DataError(
            f"{path}: --gpu {gpu!r} has no Splitwise hardware; allowed: {sorted(GPU_TO_HARDWARE)}"
        )
    sel = df[df["hardware"] == hardware]
    if sel.empty:
        raise DataError(
            f"{path}: no rows with hardware {hardware!r}; present: {sorted(df['hardware'].unique())}"
        )
    skipped = tuple(
        f"{m}: {int((sel['model'] == m).sum())} rows (no pagesim model spec)"
        for m in sorted(set(sel["model"]) - set(MODEL_TO_SPEC))
    )
    sel = sel[sel["model"].isin(list(MODEL_TO_SPEC))]
    name = Path(path).name
    peak = get_gpu(gpu).fp16_flops
    rows, below = [], []
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size"]
    for key, sub in sel.groupby(keys, sort=True):
        model_name, tp, p, b = key
        model = get_model(MODEL_TO_SPEC[model_name])
        tp, p, b = int(tp), int(p), int(b)
        base = {"model": model.name, "tp": tp, "batch": b, "prompt": p}
        median_s = float(sub["prompt_time"].median()) * MS
        floor_s = 2 * model.num_params * b * p / (tp * peak)
        row = _row(
            "prefill_iteration",
            f"prefill-{model.name}-tp{tp}-b{b}-p{p}",
            base | {"context": p},
            uniform_prefill_features(model, tp, b, p),
            median_s,
            name,
        )
        if median_s < floor_s:
            below.append(row | {"peak_floor_s": floor_s})
        else:
            rows.append(row)
        for t, tok in sub.groupby("token_size", sort=True):
            ctx = p + int(t) // 2
            rows.append(
                _row(
                    "decode_iteration",
                    f"decode-{model.name}-tp{tp}-b{b}-p{p}-t{int(t)}",
                    base | {"context": ctx, "tokens": int(t)},
                    uniform_decode_features(model, tp, b, ctx),
                    float(tok["token_time"].median()) * MS,
                    name,
                )
            )
    if not rows:
        raise DataError(f"{path}: no rows of a modelled model on {hardware!r}")
    others = tuple(
        f"{h}: {int((df['hardware'] == h).sum())} rows"
        for h in sorted(set(df["hardware"]) - {hardware})
    )
    return SplitwiseRows(pd.DataFrame(rows), skipped, pd.DataFrame(below), others)
