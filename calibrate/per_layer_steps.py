"""One GPU's whole steps of several models, pooled per layer: a step profile for any model.

``pagesim calibrate iterations TABLE [TABLE ...] --per-layer`` reads the step tables that
``benchmarks/gpu_iterations.py`` timed on one GPU (each model at its TP: one GPU's shard,
CUDA-graph replays, no all-reduce, no host time) and fits the iteration-level terms
``prefill_iteration`` and ``decode_iteration`` on all of them at once, **per layer**: each
step's time and its bytes and FLOPs are divided by its model's layer count before the fit,
so the fitted constant, per-sequence and per-token costs are costs of one layer. The
simulator prices a model by multiplying them back by that model's layer count
(``simulator/costmodel/iteration.py``, ``iteration_scale: per_layer``). A per-step fit of
models of 32, 48 and 80 layers has no way to tell a per-layer launch or element-wise cost
from a per-step one, and prices a model of another depth wrongly; per layer it need not.

Why it transfers, checked on the tables themselves (:func:`leave_one_model_out`): each
model's steps predicted by a fit on the other models' steps; the report prints that table
beside the same check of the per-step form. On pagesim's compiled H100 steps of
Llama-2-7B (TP 1), CodeLlama-34B (TP 2) and Llama-2-70B (TP 4) the per-layer form predicts
each left-out model within 2.5% mean absolute error (``h100-sxm-compiled-steps``'s report).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.fit import TERM_EXTRAS, fit_all, fit_coefficients, predict
from pagesim.calibrate.iterations import iteration_rows, one_forward, read_steps
from pagesim.errors import ConfigError, DataError
from pagesim.simulator.costmodel.iteration import (
    ALLREDUCE_KEY,
    ITERATION_SCALE_KEY,
    ITERATION_TERMS,
    PER_LAYER,
)
from pagesim.simulator.model_gpu_specs import GPUS, get_model

#: the features a per-layer fit divides by the layer count (seqs and tokens are per layer
#: already: every layer sees every sequence and token of the step)
SCALED = ("bytes", "flops", "median_s")
#: fewest models a pooled fit needs: one model alone cannot show that a cost is per layer
MIN_MODELS = 2


def pooled_rows(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Every model's rows of every table, at the TP it was timed, with its layer count ``L``
    and the per-layer features (module docstring)."""
    frames = []
    seen: dict[tuple[str, int], int] = {}
    for i, table in enumerate(tables):
        for model in sorted(set(table["model"].astype(str))):
            rows = iteration_rows(table, model).rows
            for tp in sorted(set(rows["tensor_parallel"])):
                key = (model, int(tp))
                if key in seen:
                    raise DataError(
                        f"{model} at TP {tp} is in table {seen[key] + 1} and table {i + 1}: "
                        "give each model's steps once"
                    )
                seen[key] = i
            frames.append(rows.assign(L=get_model(model).num_layers))
    df = pd.concat(frames, ignore_index=True)
    if df["model"].nunique() < MIN_MODELS:
        raise DataError(
            f"--per-layer pools several models' steps; the tables hold {df['model'].nunique()} "
            f"({', '.join(sorted(set(df['model'])))}): give {MIN_MODELS} or more"
        )
    return per_layer(df)


def per_layer(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with :data:`SCALED` divided by each row's layer count ``L``."""
    out = df.copy()
    for col in SCALED:
        out[col] = out[col] / out["L"]
    return out


def _features(df: pd.DataFrame) -> dict[str, np.ndarray]:
    return {k: df[k].to_numpy(dtype=float) for k in ("bytes", "flops", "blocks", "seqs", "tokens")}


def leave_one_model_out(df: pd.DataFrame) -> pd.DataFrame:
    """Per term and left-out model: the signed mean, mean absolute and worst relative error
    of its steps predicted by a fit on the other models' steps (``df`` per layer or not:
    the relative errors are the same either way for the rows given)."""
    out = []
    for term in ITERATION_TERMS:
        sub = df[df["term"] == term]
        for model in sorted(set(sub["model"])):
            train, test = sub[sub["model"] != model], sub[sub["model"] == model]
            coefs = fit_coefficients(
                _features(train), train["median_s"].to_numpy(dtype=float), TERM_EXTRAS[term]
            )
            err = predict(coefs, _features(test)) / test["median_s"].to_numpy(dtype=float) - 1
            out.append(
                {
                    "term": term,
                    "model": model,
                    "steps": len(test),
                    "mean": float(err.mean()),
                    "mape": float(np.abs(err).mean()),
                    "max": float(np.abs(err).max()),
                }
            )
    return pd.DataFrame(out)


def transfer_section(pooled: pd.DataFrame) -> list[str]:
    """The report's evidence: leave-one-model-out, per layer and per step."""
    whole = pooled.copy()
    for col in SCALED:
        whole[col] = whole[col] * whole["L"]
    lines = [
        "## Does it transfer to another model?",
        "",
        "Each model's steps predicted by the same form fitted on the other models' steps "
        "(leave one model out), per layer (this profile's form) and per step (the form of a "
        "one-model profile). Errors are predicted / measured - 1 over the left-out model's "
        "steps.",
        "",
        "| term | left-out model | steps | per layer: mean | MAPE | worst | per step: mean | MAPE | worst |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    a, b = leave_one_model_out(pooled), leave_one_model_out(whole)
    for r, s in zip(a.to_dict("records"), b.to_dict("records"), strict=True):
        lines.append(
            f"| {r['term']} | {r['model']} | {r['steps']} | {r['mean']:+.1%} | {r['mape']:.1%} "
            f"| {r['max']:.1%} | {s['mean']:+.1%} | {s['mape']:.1%} | {s['max']:.1%} |"
        )
    return lines + [""]


def fit_per_layer(
    paths: list[Path],
    gpu: str,
    out_dir: Path,
    *,
    seed: int = 0,
    command: str = "",
    date: str | None = None,
    gpu_name: str | None = None,
    forward: str | None = None,
) -> tuple[Path, Path]:
    """Fit and write a per-layer pooled profile (module docstring) from ``paths``."""
    from pagesim.calibrate.external import render_report, write_profile_folder
    from pagesim.simulator.costmodel.profile import Profile

    if gpu not in GPUS:
        raise ConfigError(f"--gpu: {gpu!r} is not a known GPU; known: {sorted(GPUS)}")
    tables = [one_forward(read_steps(Path(p)), forward, Path(p)) for p in paths]
    df = pooled_rows(tables)
    fits = fit_all(df, np.random.default_rng(seed))
    shards = ", ".join(
        f"{m} (TP {tp}, {n} layers)"
        for (m, tp, n), _ in df.groupby(["model", "tensor_parallel", "L"], sort=True)
    )
    names = ", ".join(Path(p).parent.name + "/" + Path(p).name for p in paths)
    compiled = all(set(t["attention"].astype(str)) == {"compiled"} for t in tables)
    what = (
        f"whole steps of {shards} timed by benchmarks/gpu_iterations.py on this GPU "
        f"(CUDA-graph replays of a PyTorch forward{' through torch.compile' if compiled else ''}"
        " of one GPU's shard: every layer, LM head, greedy pick; no host time, no all-reduce), "
        "pooled per layer"
    )
    terms = {name: fit.to_term(f"fitted on {names}: {what}") for name, fit in fits.items()}
    profile = Profile(
        kind="measured",
        gpu_name=gpu_name or GPUS[gpu].name,
        gpu_spec=gpu,
        terms=terms,
        date=date or datetime.date.today().isoformat(),
        command=command,
        software={
            "source": "benchmarks/gpu_iterations.py whole-step times of several models",
            "timer": "CUDA events around CUDA-graph replays (median)",
            "attention": "compiled" if compiled else "eager",
            ALLREDUCE_KEY: "no",
            ITERATION_SCALE_KEY: PER_LAYER,
        },
        notes=(
            f"Fitted by `pagesim calibrate iterations --per-layer` on {len(df)} whole steps "
            f"({what}). Each term's constant, per-sequence and per-token coefficients are per "
            "layer: the simulator multiplies them by the priced model's layer count; bytes and "
            "FLOPs are the whole step's. For any dense model on this GPU; the host's per-step "
            "work is not in these times."
        ),
    )
    text = render_report(
        profile,
        fits,
        seed,
        title="Per-layer whole-step calibration report",
        kind_line=f"whole steps of several models timed by pagesim's "
        f"`benchmarks/gpu_iterations.py` on {profile.gpu_name} ({names}), pooled per layer.",
    )
    text += "\n".join(transfer_section(df)) + "\n"
    return write_profile_folder(out_dir, profile, fits, text)
