"""How low could each term's held-out error go? Bounds from the tables themselves.

Scenario: an imported profile misses the 5% held-out target; before inventing term forms,
measure what the data allow. On exactly the split the import uses (:func:`fit_all`, seed
given, 20% held out per term), for each operator term:

- ``shipped form``: the profile's fit (one set of coefficients for every shape);
- ``same form per shape``: the same roofline-plus-linear form fitted separately on each
  shape group (GEMM: (in, out) features; decode attention: batch; prefill attention:
  (batch, cached tokens); pointwise: (hidden, ffn, TP)), held-out points of that group
  predicted by its own coefficients: what a per-shape regime could reach;
- ``interpolation per shape``: held-out points predicted by linear interpolation between
  the training points of their group along the remaining axis (tokens, context, new
  tokens): a model-free floor, near the measurements' own spread (Vidur's published
  std / median is about 1%);
- two forms tried on the shipped features: GEMM with the token count padded to 128-row
  tiles (``pad128``, a tile quantisation), pointwise as ``max(floor, s_per_byte x bytes)``
  (a launch floor; grid search of both on the training points).

``python -m pagesim.calibrate.floors --vidur DIR`` prints the table (markdown); nothing of
the tables is written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.external import EXTRAS, Source, VidurTables, measurement_rows
from pagesim.calibrate.fit import TERM_EXTRAS, fit_all, fit_coefficients, predict

#: term -> (shape-group keys, the axis interpolated along), read from each row's params
GROUPS = {
    "gemm": (("in_features", "out_features"), "tokens"),
    "paged_decode_attention": (("batch",), "context"),
    "prefill_attention": (("batch", "cached_tokens"), "new_tokens"),
    "pointwise": (("hidden", "ffn_per_gpu", "tp"), "tokens"),
}
FEATURES = ("bytes", "flops", "blocks", "seqs", "tokens")


def _feats(df: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: df[c].to_numpy(dtype=float) for c in FEATURES}


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / y - 1.0)))


def _per_group(df, is_heldout, keys, axis, extras) -> tuple[float, float]:
    errs_form, errs_interp = [], []
    for _, sub in df.groupby(list(keys)):
        idx = sub.index.to_numpy()
        held = is_heldout[idx]
        if not held.any() or (~held).sum() < 4:
            continue
        y = sub["median_s"].to_numpy()
        feats = _feats(sub)
        coefs = fit_coefficients({k: v[~held] for k, v in feats.items()}, y[~held], extras)
        errs_form += list(np.abs(predict(coefs, feats)[held] / y[held] - 1))
        train = sub[~held].sort_values(axis)
        test = sub[held]
        interp = np.interp(test[axis], train[axis], train["median_s"])
        errs_interp += list(np.abs(interp / test["median_s"].to_numpy() - 1))
    return float(np.mean(errs_form)), float(np.mean(errs_interp))


def _pad128(df, is_heldout) -> float:
    p = df["params_json"].map(json.loads)
    k, n = p.map(lambda d: d["in_features"]), p.map(lambda d: d["out_features"])
    m = df["tokens"].to_numpy()
    feats = _feats(df) | {"flops": (2.0 * np.ceil(m / 128) * 128 * k * n).to_numpy(dtype=float)}
    y = df["median_s"].to_numpy()
    coefs = fit_coefficients({a: v[~is_heldout] for a, v in feats.items()}, y[~is_heldout], ())
    return _mape(predict(coefs, feats)[is_heldout], y[is_heldout])


def _launch_floor(df, is_heldout) -> float:
    y, b = df["median_s"].to_numpy(), df["bytes"].to_numpy(dtype=float)
    best = (np.inf, 0.0, 0.0)
    for floor in np.quantile(y[~is_heldout], np.linspace(0, 0.6, 61)):
        for s_per_byte in np.geomspace(1e-13, 1e-11, 200):
            err = _mape(np.maximum(floor, s_per_byte * b)[~is_heldout], y[~is_heldout])
            if err < best[0]:
                best = (err, floor, s_per_byte)
    _, floor, s_per_byte = best
    return _mape(np.maximum(floor, s_per_byte * b)[is_heldout], y[is_heldout])


def floors(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per operator term: held-out MAPE of each model (module docstring)."""
    fits = fit_all(df, np.random.default_rng(seed), EXTRAS)
    rows = []
    for term, (keys, axis) in GROUPS.items():
        if term not in fits:
            continue
        sub = df[df["term"] == term].reset_index(drop=True)
        params = sub["params_json"].map(json.loads)
        for key in (*keys, axis):
            if key != "tokens":
                sub[key] = params.map(lambda d, key=key: d[key])
        held = fits[term].is_heldout
        extras = EXTRAS.get(term, TERM_EXTRAS[term])
        form, interp = _per_group(sub, held, keys, axis, extras)
        row = {
            "term": term,
            "points": len(sub),
            "shipped_form": fits[term].heldout_mape,
            "same_form_per_shape": form,
            "interpolation_per_shape": interp,
            "shape_groups": sub.groupby(list(keys)).ngroups,
        }
        if term == "gemm":
            row["tried"] = f"pad128 {_pad128(sub, held):.1%}"
        elif term == "pointwise":
            row["tried"] = f"launch floor {_launch_floor(sub, held):.1%}"
        else:
            row["tried"] = ""
        rows.append(row)
    return pd.DataFrame(rows)


def render(table: pd.DataFrame) -> str:
    lines = [
        "| term | points | shape groups | shipped form | same form per shape | "
        "interpolation per shape | other form tried |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['term']} | {r['points']:,} | {r['shape_groups']} | {r['shipped_form']:.1%} | "
            f"{r['same_form_per_shape']:.1%} | {r['interpolation_per_shape']:.1%} | "
            f"{r['tried'] or '—'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vidur", required=True, help="folder of Vidur's A100 tables")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    d = Path(args.vidur)
    tables = VidurTables(
        gpu="a100-80gb",
        attention=(Source(d / "a100_llama2_70b_tp2_attention.csv", "", ""),),
        mlp=(
            Source(d / "a100_llama2_7b_mlp.csv", "", ""),
            Source(d / "a100_llama2_70b_mlp.csv", "", ""),
        ),
        cpu_overheads=(Source(d / "a100_cpu_overheads.csv", "", ""),),  # same split as the import
    )
    print(render(floors(measurement_rows(tables), args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
