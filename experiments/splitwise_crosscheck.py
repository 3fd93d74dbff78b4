"""Cross-check (not fitted): predict Splitwise's measured iteration times from the profiles.

Splitwise (ISCA'24; GitHub ``Mutinifni/splitwise-sim``, ``data/perf_model.csv``) published
whole-iteration times of Llama-2-70B (TP 2/4/8) and BLOOM-176B (TP 8) on A100-80GB and
H100-80GB (also power-capped): ``prompt_time`` (ms) of a prefill iteration over
``batch_size`` prompts of ``prompt_size`` tokens, ``token_time`` (ms) of a decode iteration
over ``batch_size`` sequences generating ``token_size`` tokens after their prompt.

Each measured point (the median over its repeated rows) is predicted by pagesim's cost
model, nothing fitted on it:

- prefill: a plan of ``batch_size`` prompts of ``prompt_size`` new tokens;
- decode: ``batch_size`` sequences at context ``prompt_size + token_size / 2`` (the mean
  context over the generation, to which the decode step time is linear);

under the profile fitted on Vidur's operator tables for that GPU (A100: ``a100-80gb-vidur``;
H100 and power-capped H100: ``h100-sxm-vidur``, whose attention is projected from A100
timings) and under the analytic profile, at the row's tensor parallelism (analytic NVLink
all-reduces). Models pagesim has no spec for (BLOOM-176B) are listed as skipped.

A prefill point measured faster than its GPUs' FP16 peak allows (2 x parameters x
tokens / (TP x peak FLOP/s)) cannot be a full prefill of those tokens; such points are
listed on the page and left out of the error statistics (not corrected, not hidden).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.splitwise import read_points
from pagesim.errors import DataError

MODEL_TO_SPEC = {"llama2-70b": "llama-2-70b"}
#: Splitwise's hardware name -> (pagesim GPU spec, fitted profile)
HARDWARE = {
    "a100-80gb": ("a100-80gb", "a100-80gb-vidur"),
    "h100-80gb": ("h100-sxm", "h100-sxm-vidur"),
    "h100-80gb-pcap": ("h100-sxm", "h100-sxm-vidur"),
}
CSV_NAME = "crosscheck_splitwise.csv"
PAGE_NAME = "crosscheck_splitwise.md"
COMMAND = (
    "pagesim crosscheck-splitwise --data DATA/splitwise/perf_model.csv --out OUT "
    "--docs docs/crosscheck_splitwise.md"
)


def load_points(path: str | Path) -> pd.DataFrame:
    """The measured points (checked as ``calibrate import`` checks them): medians of
    prompt_time and token_time over repeated rows."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"--data {path}: file not found (Splitwise's perf_model.csv)")
    df = read_points(path)
    keys = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    return df.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()


def predict(points: pd.DataFrame) -> pd.DataFrame:
    """Add predicted_{prompt,token}_ms_{fitted,analytic} to the points pagesim can model."""
    from pagesim.simulator.costmodel.factory import make_cost_model
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model
    from pagesim.simulator.plan import BatchPlan
    from pagesim.simulator.spec import HardwareSpec

    rows = []
    models: dict[tuple, object] = {}
    for r in points.to_dict("records"):
        spec_name = MODEL_TO_SPEC.get(r["model"])
        hw = HARDWARE.get(r["hardware"])
        if spec_name is None or hw is None:
            continue
        gpu, fitted = hw
        out = dict(r)
        b, p, t = int(r["batch_size"]), int(r["prompt_size"]), int(r["token_size"])
        peak_ms = (
            2
            * get_model(spec_name).num_params
            * b
            * p
            / (int(r["tensor_parallel"]) * get_gpu(gpu).fp16_flops)
            * 1e3
        )
        out["prefill_floor_ms"] = peak_ms
        out["is_below_peak"] = bool(r["prompt_time"] < peak_ms)
        prefill = BatchPlan.from_lens(prefill_new_lens=(p,) * b, prefill_context_lens=(p,) * b)
        decode = BatchPlan.from_lens(decode_context_lens=(p + t // 2,) * b)
        for label, profile in (("fitted", fitted), ("analytic", None)):
            key = (spec_name, gpu, profile, int(r["tensor_parallel"]))
            if key not in models:
                spec = HardwareSpec(
                    model=spec_name,
                    gpu=gpu,
                    tensor_parallel=int(r["tensor_parallel"]),
                    profile=profile,
                )
                models[key] = make_cost_model(spec, get_model(spec_name), get_gpu(gpu))
            cost = models[key]
            out[f"prompt_ms_{label}"] = cost.step_time_s(prefill) * 1e3
            out[f"token_ms_{label}"] = cost.step_time_s(decode) * 1e3
        rows.append(out)
    return pd.DataFrame(rows)


def summarize(pred: pd.DataFrame) -> pd.DataFrame:
    """Per model, hardware and TP: MAPE and median signed error of each prediction."""
    rows = []
    keys = ["model", "hardware", "tensor_parallel"]
    for key, sub in pred.groupby(keys, sort=True):
        row = dict(zip(keys, key, strict=True)) | {"points": len(sub)}
        for what in ("prompt", "token"):
            use = sub[~sub["is_below_peak"]] if what == "prompt" else sub
            measured = use[f"{what}_time"].to_numpy()
            for label in ("fitted", "analytic"):
                rel = use[f"{what}_ms_{label}"].to_numpy() / measured - 1.0
                row[f"{what}_mape_{label}"] = float(np.mean(np.abs(rel)))
                row[f"{what}_median_err_{label}"] = float(np.median(rel))
        rows.append(row)
    return pd.DataFrame(rows)


def render_page(points: pd.DataFrame, pred: pd.DataFrame, summary: pd.DataFrame) -> str:
    skipped = sorted(set(points["model"]) - set(MODEL_TO_SPEC))
    overall = {}
    pred_cols = [c for c in summary.columns if "_mape_" in c]
    for c in pred_cols:
        overall[c] = float(np.average(summary[c], weights=summary["points"]))
    lines = [
        "# Cross-check: Splitwise's measured iteration times vs the Vidur-fitted profiles",
        "",
        f"<!-- Generated by `{COMMAND}`; do not edit by hand. -->",
        "",
        "Not fitted: the profiles were fitted on Vidur's operator tables "
        "([calibration.md](calibration.md#profiles-from-external-measurements)) and predict",
        "Splitwise's whole-iteration times (GitHub `Mutinifni/splitwise-sim`, `data/perf_model.csv`,",
        "commit 8f99e7d; not copied here: read from `--data`). A prefill iteration is a plan of",
        "`batch_size` prompts of `prompt_size` tokens; a decode iteration is `batch_size` sequences",
        "at context `prompt_size + token_size / 2`. H100 rows (also the power-capped ones) use",
        "`h100-sxm-vidur`, **whose attention is projected from A100 timings**; the fitted",
        "step overhead is Vidur's TP-1 CPU time, while these rows run at TP 2-8 (Vidur's TP-2/4",
        "rows add ~6 ms of Ray communication per step that the TP-1 profile does not carry).",
        f"Skipped (no pagesim model spec): {', '.join(skipped) or 'none'}.",
        "",
        "MAPE = mean |predicted / measured − 1|; median error = median of predicted / measured − 1.",
        "",
        "| model | hardware | TP | points | prefill MAPE fitted | analytic | prefill median err fitted | analytic | decode MAPE fitted | analytic | decode median err fitted | analytic |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary.to_dict("records"):
        lines.append(
            f"| {r['model']} | {r['hardware']} | {r['tensor_parallel']} | {r['points']} | "
            f"{r['prompt_mape_fitted']:.1%} | {r['prompt_mape_analytic']:.1%} | "
            f"{r['prompt_median_err_fitted']:+.1%} | {r['prompt_median_err_analytic']:+.1%} | "
            f"{r['token_mape_fitted']:.1%} | {r['token_mape_analytic']:.1%} | "
            f"{r['token_median_err_fitted']:+.1%} | {r['token_median_err_analytic']:+.1%} |"
        )
    lines += [
        "",
        "Over all points (weighted by points): prefill MAPE "
        f"{overall['prompt_mape_fitted']:.1%} fitted, {overall['prompt_mape_analytic']:.1%} analytic; "
        f"decode MAPE {overall['token_mape_fitted']:.1%} fitted, "
        f"{overall['token_mape_analytic']:.1%} analytic.",
        "",
        "Prefill points measured faster than the FP16 peak allows (left out of the prefill "
        "statistics above):",
        "",
        "| model | hardware | TP | batch x prompt | measured (ms) | peak-FLOP floor (ms) |",
        "|---|---|---|---|---|---|",
    ]
    bad = pred[pred["is_below_peak"]]
    lines += [
        f"| {r['model']} | {r['hardware']} | {r['tensor_parallel']} | {r['batch_size']} x "
        f"{r['prompt_size']} | {r['prompt_time']:,.0f} | {r['prefill_floor_ms']:,.0f} |"
        for r in bad.to_dict("records")
    ] or ["| — | | | | | |"]
    lines.append("")
    return "\n".join(lines)


def write_crosscheck(
    data: str | Path, out_dir: str | Path, docs_page: str | Path | None = None
) -> dict[str, Path]:
    points = load_points(data)
    pred = predict(points)
    summary = summarize(pred)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"csv": out_dir / CSV_NAME, "page": out_dir / PAGE_NAME}
    summary.to_csv(written["csv"], index=False, float_format="%.6g")
    page = render_page(points, pred, summary)
    written["page"].write_text(page)
    if docs_page is not None:
        Path(docs_page).write_text(page)
        written["docs_page"] = Path(docs_page)
    return written
