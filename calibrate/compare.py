"""What a calibration's timings answer: the report's comparisons, from saved results only.

Each section is computed from the measurements, the run's metadata and the fits, so
``pagesim calibrate report DIR`` rebuilds it without a GPU:

- **held-out error by term**, against the goal of 5%;
- **paged decode bandwidth**: the K/V bytes read per second by the paged kernel, against
  the card's HBM peak (the GPU spec's datasheet figure, and the one implied by the
  memory clock and bus width the device reports) and the measured copy bandwidth, by
  block size (the grid's block-size sweep), by context mix (uniform and skewed,
  lognormal lengths: what a serving batch holds) and by kernel variant;
- **the model's shapes** (OPT-13B by default: 40 heads, no grouping): paged and
  contiguous time per batch x mean context x mix at block 16, and what the fitted, the
  shipped and the analytic profile predict for them;
- **single pass vs partitioned** at the same shapes (the grid's variant pairs);
- **GEMMs by model**: the fitted GEMM term's error on each model's shapes;
- **another run** (``pagesim calibrate report DIR --against DIR2``, not in report.md): this
  run's fitted profile on every measurement of a second run (another seed: other shapes
  and another hold-out split), term by term, beside each run's own held-out error;
- **measured vs shipped vs analytic, term by term**: coefficients (launch constant,
  bandwidth, FLOP rate, per-block, per-sequence, per-token costs) and each profile's
  error on this run's measurements. The shipped profile is ``profiles/h100-sxm-vidur``
  (fitted on Vidur's tables; its attention projected from A100 timings), the analytic
  one is the roofline of the run's GPU spec.

K/V bytes of a decode row: 2 (K and V) x context tokens x KV heads x head dim x 2 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.calibrate.cupy_ops import PARTITION_SIZE
from pagesim.calibrate.fit import TERM_EXTRAS, TermFit, fit_coefficients, predict
from pagesim.calibrate.grid import BLOCK_SIZES, CORE_BLOCK_SIZE, DTYPE_BYTES
from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.profile import TERM_NAMES, Term, load_profile
from pagesim.simulator.model_gpu_specs import GPUS

SHIPPED_PROFILE = Path(__file__).resolve().parent / "profiles" / "h100-sxm-vidur" / "profile.yaml"
BANDWIDTH_PNG = "decode_bandwidth.png"
HELDOUT_GOAL = 0.05
FEATURES = ("bytes", "flops", "blocks", "seqs", "tokens")


def _pct(x: float | None) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.1%}"


def _us(x: float | None) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x * 1e6:.1f}"


def kv_bytes_per_s(rows: pd.DataFrame) -> pd.Series:
    kv = 2.0 * rows["tokens"] * rows["num_kv_heads"] * rows["head_dim"] * DTYPE_BYTES
    return kv / rows["median_s"]


def peaks(meta: dict[str, Any]) -> dict[str, float]:
    """The bandwidths achieved rates are compared with (bytes per second), by label."""
    out = {}
    spec = GPUS.get(meta.get("gpu_spec", ""))
    if spec is not None:
        out[f"HBM peak ({spec.name} spec)"] = spec.hbm_bw_bytes_s
    dev = meta.get("device", {})
    if dev.get("memory_clock_mhz") and dev.get("memory_bus_width_bits"):
        out["HBM peak (device clock x bus)"] = (
            2.0 * dev["memory_clock_mhz"] * 1e6 * dev["memory_bus_width_bits"] / 8
        )
    out["copy, read + write (measured)"] = meta["copy_bandwidth_bytes_per_s"]
    return out


def reference_terms(meta: dict[str, Any], fits: dict[str, TermFit]) -> dict[str, dict[str, Term]]:
    """Profile label -> its terms: this run's fit, the shipped H100 profile, the analytic one."""
    out = {"measured (this run)": {t: f.to_term() for t, f in fits.items()}}
    if SHIPPED_PROFILE.is_file():
        out["shipped h100-sxm-vidur"] = dict(load_profile(SHIPPED_PROFILE).terms)
    spec = GPUS.get(meta.get("gpu_spec", ""))
    if spec is not None:
        out[f"analytic {spec.name}"] = dict(analytic_profile(spec).terms)
    return out


def predict_s(term: Term | None, rows: pd.DataFrame) -> np.ndarray:
    if term is None:
        return np.full(len(rows), np.nan)
    return np.array([term.time_s(*(r[f] for f in FEATURES)) for _, r in rows.iterrows()])


def planned_context(shape_ids: pd.Series) -> pd.Series:
    """The mean context a decode shape was planned with (``-c{n}-`` in its id; NaN if none)."""
    return shape_ids.str.extract(r"-c(\d+)-", expand=False).astype(float)


def _paged(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[df["term"] == "paged_decode_attention"].copy()
    rows["kv_bytes_per_s"] = kv_bytes_per_s(rows)
    return rows


def heldout_section(fits: dict[str, TermFit]) -> list[str]:
    lines = [
        "### Held-out error by term (goal <= 5%)",
        "",
        "| term | points | held-out MAPE | worst held-out | meets 5% |",
        "|---|---|---|---|---|",
    ]
    for term, fit in fits.items():
        mape = fit.heldout_mape
        verdict = "—" if mape is None else ("yes" if mape <= HELDOUT_GOAL else "**no**")
        lines.append(
            f"| {term} | {fit.num_points} | {_pct(mape)} | {_pct(fit.heldout_max_err)} | {verdict} |"
        )
    return lines + [""]


def bandwidth_section(df: pd.DataFrame, meta: dict[str, Any]) -> list[str]:
    paged = _paged(df[df["in_fit"]])
    refs = peaks(meta)
    ref_names = list(refs)
    head = "| {} | shapes | median K/V GB/s | " + " | ".join(f"% of {n}" for n in ref_names) + " |"
    rule = "|---|---|---|" + "---|" * len(ref_names)

    def row(label: str, sel: pd.DataFrame) -> str:
        med = float(np.median(sel["kv_bytes_per_s"]))
        cells = " | ".join(_pct(med / v) for v in refs.values())
        return f"| {label} | {len(sel)} | {med / 1e9:.0f} | {cells} |"

    lines = [
        "### Paged decode attention: achieved K/V bandwidth",
        "",
        "Peaks: "
        + "; ".join(f"{n} {v / 1e9:.0f} GB/s" for n, v in refs.items())
        + f". Plot: [{BANDWIDTH_PNG}]({BANDWIDTH_PNG}).",
        "",
    ]
    sweep = paged[paged["shape_id"].str.startswith("bsweep-")]
    if len(sweep):
        shapes = sorted(
            {sid.rsplit("-bs", 1)[0].removeprefix("bsweep-") for sid in sweep["shape_id"]}
        )
        lines += [
            f"By block size (the sweep: {', '.join(shapes)}; the model's heads):",
            "",
            head.format("block size"),
            rule,
        ]
        lines += [
            row(str(bs), sweep[sweep["block_size"] == bs])
            for bs in BLOCK_SIZES
            if (sweep["block_size"] == bs).any()
        ]
        lines.append("")
    mixed = paged[(paged["block_size"] == CORE_BLOCK_SIZE) & (paged["batch"] >= 16)]
    mixed = mixed.assign(planned=planned_context(mixed["shape_id"]))
    mixed = mixed[mixed["planned"] >= 256]
    if len(mixed):
        lines += [
            "By context mix (block 16, batch >= 16, planned mean context >= 256; skewed: "
            "lognormal lengths with that mean, clipped to 1..8192):",
            "",
            head.format("mix, mean context"),
            rule,
        ]
        for (mix, ctx), sel in mixed.groupby(["context_mix", "planned"]):
            lines.append(row(f"{mix}, {ctx:.0f}", sel))
        lines.append("")
    lines += [
        "By kernel variant (every fitted paged shape):",
        "",
        head.format("kernel"),
        rule,
    ]
    lines += [
        row(k, paged[paged["kernel"] == k]) for k in sorted(set(paged["kernel"])) if len(paged)
    ]
    return lines + [""]


def model_shapes_section(
    df: pd.DataFrame, meta: dict[str, Any], terms: dict[str, dict[str, Term]]
) -> list[str]:
    dims = meta["model"]
    paged = _paged(df[df["in_fit"]])
    core = paged[paged["shape_id"].str.startswith("core-")]
    if not len(core):
        return []
    contiguous = df[df["term"] == "contiguous_decode_attention"].set_index("shape_id")
    grouping = (
        "no grouping"
        if dims["num_heads"] == dims["num_kv_heads"]
        else f"{dims['num_heads'] // dims['num_kv_heads']} query heads per KV head"
    )
    core = core.sort_values(["batch", "mean_context", "context_mix"])
    preds = {label: predict_s(t.get("paged_decode_attention"), core) for label, t in terms.items()}
    peak = next(iter(peaks(meta).values()))
    lines = [
        f"### {dims['name']}'s shapes: {dims['num_heads']} heads, {dims['num_kv_heads']} KV heads "
        f"({grouping}), head dim {dims['head_dim']}, block 16",
        "",
        "Per layer; µs. `% peak`: K/V bandwidth over the first peak above. "
        "Predictions by each profile's paged_decode_attention term.",
        "",
        "| batch | mean context | mix | kernel | paged µs | contiguous µs | paged overhead | "
        "K/V GB/s | % peak | " + " | ".join(f"{label} µs" for label in preds) + " |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(preds),
    ]
    for i, (_, r) in enumerate(core.iterrows()):
        twin = contiguous["median_s"].get(r["shape_id"])
        over = r["median_s"] / twin - 1 if twin else None
        lines.append(
            f"| {r['batch']:.0f} | {r['mean_context']:.0f} | {r['context_mix']} | {r['kernel']} | "
            f"{_us(r['median_s'])} | {_us(twin)} | {'—' if over is None else f'{over:+.1%}'} | "
            f"{r['kv_bytes_per_s'] / 1e9:.0f} | {_pct(r['kv_bytes_per_s'] / peak)} | "
            + " | ".join(_us(p[i]) for p in preds.values())
            + " |"
        )
    return lines + [""]


def variant_section(df: pd.DataFrame) -> list[str]:
    rows = df[(df["term"] == "paged_decode_attention") & df["shape_id"].str.startswith("variant-")]
    if not len(rows):
        return []
    lines = [
        "### Single pass (v1) vs partitioned (v2), block 16, uniform contexts",
        "",
        "| batch | context | v1 µs | v2 µs | v2 / v1 | vLLM's rule runs |",
        "|---|---|---|---|---|---|",
    ]
    rows = rows.assign(pair=rows["shape_id"].str.rsplit("-", n=1).str[0])
    groups = sorted(rows.groupby("pair"), key=lambda kv: (kv[1]["batch"].iloc[0], kv[0]))
    for _, sel in groups:
        t = dict(zip(sel["kernel"], sel["median_s"], strict=True))
        rule = sel[sel["in_fit"]]["kernel"]
        ratio = t["paged_v2"] / t["paged_v1"] if {"paged_v1", "paged_v2"} <= t.keys() else None
        lines.append(
            f"| {sel['batch'].iloc[0]:.0f} | {sel['max_context'].iloc[0]:.0f} | "
            f"{_us(t.get('paged_v1'))} | {_us(t.get('paged_v2'))} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} | {rule.iloc[0] if len(rule) else '—'} |"
        )
    return lines + [""]


def gemm_section(df: pd.DataFrame, fits: dict[str, TermFit]) -> list[str]:
    fit = fits.get("gemm")
    rows = df[(df["term"] == "gemm") & df["in_fit"]]
    if fit is None or "model" not in rows or not rows["model"].notna().any():
        return []
    rel = np.abs(fit.predicted_s - fit.measured_s) / fit.measured_s
    err = pd.DataFrame({"model": rows["model"].to_numpy(), "rel": rel, "held": fit.is_heldout})
    lines = [
        "### GEMMs by model (the fitted gemm term on each model's shapes)",
        "",
        "| model | shapes | MAPE, all points | held-out MAPE | worst |",
        "|---|---|---|---|---|",
    ]
    for model, sel in err.groupby("model"):
        held = sel[sel["held"]]["rel"]
        lines.append(
            f"| {model} | {len(sel)} | {_pct(sel['rel'].mean())} | "
            f"{_pct(held.mean() if len(held) else None)} | {_pct(sel['rel'].max())} |"
        )
    return lines + [""]


def _coef_cells(term: Term | None) -> str:
    if term is None:
        return "— | — | — | — | — | —"
    c = term.coef
    rate = lambda name, scale: f"{1 / c(name) / scale:.0f}" if c(name) else "—"  # noqa: E731
    per = lambda name: f"{c(name) * 1e9:.2f}" if c(name) else "—"  # noqa: E731
    tflops = f"{1 / c('s_per_flop') / 1e12:.0f}" if c("s_per_flop") else "—"
    return (
        f"{c('const_s') * 1e6:.2f} | {rate('s_per_byte', 1e9)} | {tflops} | "
        f"{per('s_per_block')} | {per('s_per_seq')} | {per('s_per_token')}"
    )


def profiles_section(
    df: pd.DataFrame, fits: dict[str, TermFit], terms: dict[str, dict[str, Term]]
) -> list[str]:
    rows = df[df["in_fit"]]
    lines = [
        "### Measured vs shipped vs analytic, term by term",
        "",
        "Error on this run's measurements of the term (the measured fit: its held-out points; "
        "the others: every point). Ratio: median predicted / measured. — : the profile has no "
        "such term (the simulator takes it from the analytic profile).",
        "",
        "| term | profile | const µs | GB/s | TFLOP/s | ns/block | ns/seq | ns/token | "
        "MAPE | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in TERM_NAMES:
        if name not in fits:
            continue
        sel = rows[rows["term"] == name]
        for label, profile_terms in terms.items():
            term = profile_terms.get(name)
            if label.startswith("measured"):
                fit = fits[name]
                mape = fit.heldout_mape
                ratio = float(np.median(fit.predicted_s / fit.measured_s))
            elif term is None:
                mape = ratio = None
            else:
                r = predict_s(term, sel) / sel["median_s"].to_numpy()
                mape, ratio = float(np.mean(np.abs(r - 1))), float(np.median(r))
            lines.append(
                f"| {name} | {label} | {_coef_cells(term)} | {_pct(mape)} | "
                f"{'—' if ratio is None else f'{ratio:.2f}'} |"
            )
    return lines + [""]


def longest_walk(rows: pd.DataFrame) -> np.ndarray:
    """Context tokens x head dim that the longest-running thread block of a decode kernel
    walks in sequence: the longest context for the single-pass kernels (one block per
    sequence and head: paged_v1, contiguous), one partition of it for paged_v2."""
    ctx = rows["max_context"].to_numpy(dtype=float)
    ctx = np.where(rows["kernel"].to_numpy() == "paged_v2", np.minimum(ctx, PARTITION_SIZE), ctx)
    return ctx * rows["head_dim"].to_numpy(dtype=float)


def critical_path_section(df: pd.DataFrame, fits: dict[str, TermFit]) -> list[str]:
    """The decode terms refitted with the longest walk in place of FLOPs in the roofline,
    ``const + max(s_per_byte·bytes, s_per_walk·walk) + per block + per sequence``, on the
    same training points, scored on the same held-out points. A diagnostic: the simulator's
    decode features (sequences, context tokens, blocks) hold no longest context."""
    lines = [
        "### Decode attention: the longest thread block's walk (diagnostic)",
        "",
        "The fitted form sees bytes, FLOPs, blocks and sequences. The decode kernels give "
        "each (sequence, head) one thread block (paged_v2: each 512-token partition), which "
        "walks its context in sequence, so a kernel lasts at least as long as its longest "
        "walk. Refitted with that walk (longest context x head dim; one partition for "
        "paged_v2) in place of FLOPs, on the same training and held-out points. Not used "
        "by the simulator: its decode features hold no longest context.",
        "",
        "| term | held-out points | held-out MAPE, fitted form | held-out MAPE, with the walk "
        "| worst, with the walk | uniform contexts | skewed contexts |",
        "|---|---|---|---|---|---|---|",
    ]
    fitted = df[df["in_fit"]] if "in_fit" in df else df
    for name in ("paged_decode_attention", "contiguous_decode_attention"):
        fit = fits.get(name)
        rows = fitted[fitted["term"] == name]
        if fit is None or rows.empty or not fit.is_heldout.any():
            continue
        feats = {k: rows[k].to_numpy(dtype=float) for k in FEATURES}
        feats["flops"] = longest_walk(rows)
        train = {k: v[~fit.is_heldout] for k, v in feats.items()}
        coefs = fit_coefficients(train, fit.measured_s[~fit.is_heldout], TERM_EXTRAS[name])
        rel = np.abs(predict(coefs, feats) / fit.measured_s - 1.0)
        held = fit.is_heldout
        mix = rows["context_mix"].to_numpy()
        lines.append(
            f"| {name} | {int(held.sum())} | {_pct(fit.heldout_mape)} | "
            f"{_pct(rel[held].mean())} | {_pct(rel[held].max())} | "
            f"{_pct(rel[held & (mix == 'uniform')].mean())} | "
            f"{_pct(rel[held & (mix == 'skewed')].mean())} |"
        )
    return lines + [""]


#: the file ``benchmarks/gpu_reference.py`` writes, read from a calibration folder
REFERENCE_CSV = "reference.csv"
REFERENCE_COLUMNS = ("op", "shape", "backend", "batch", "tokens", "us")


def _reference_match(df: pd.DataFrame, ref: pd.Series, model: dict[str, Any]) -> pd.DataFrame:
    """The calibration rows timing the reference row's shape (the model's heads)."""
    heads = (
        (df["num_heads"] == model["num_heads"])
        & (df["num_kv_heads"] == model["num_kv_heads"])
        & (df["head_dim"] == model["head_dim"])
    )
    if ref["op"] == "decode":
        return df[
            (df["term"] == "paged_decode_attention") & heads & (df["context_mix"] == "uniform")
            & (df["block_size"] == CORE_BLOCK_SIZE) & (df["batch"] == ref["batch"])
            & (df["mean_context"] == ref["tokens"])
        ]  # fmt: skip
    if ref["op"] == "prefill":
        return df[
            (df["term"] == "prefill_attention") & heads & (df["batch"] == 1)
            & (df["tokens"] == ref["tokens"])
        ]  # fmt: skip
    if str(ref["op"]).startswith("gemm"):
        m, k, n = (int(x) for x in str(ref["shape"]).split("x"))
        gemms = df[df["term"] == "gemm"]
        params = gemms["params_json"].map(json.loads)
        keep = params.map(
            lambda p: (p["m"], p["k"], p["n"], p["model"]) == (m, k, n, model["name"])
        )
        return gemms[keep.to_numpy(dtype=bool)]
    return df.iloc[0:0]


def reference_section(df: pd.DataFrame, meta: dict[str, Any], ref: pd.DataFrame) -> list[str]:
    """pagesim's kernels beside a tuned reference timed on the same GPU at the same shapes
    (``benchmarks/gpu_reference.py``'s CSV in the folder): per shape, both times and
    their ratio; a summary line per operation."""
    model = meta["model"]
    lines = [
        "### Beside a tuned reference on the same GPU",
        "",
        f"`{REFERENCE_CSV}` in this folder (`benchmarks/gpu_reference.py`: PyTorch's "
        "FlashAttention over a contiguous K/V, `torch.matmul`), at the model's shapes; "
        "pagesim: the paged kernel at block 16, uniform contexts; the prefill path; the "
        "GEMMs. Ratio: pagesim / reference.",
        "",
        "| op | shape | reference | reference µs | pagesim µs | ratio |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for _, r in ref.iterrows():
        rows = _reference_match(df, r, model)
        if rows.empty:
            continue
        ours = float(rows["median_s"].median()) * 1e6
        op = "gemm" if str(r["op"]).startswith("gemm") else str(r["op"])
        ratios.setdefault(op, []).append(ours / r["us"])
        lines.append(
            f"| {r['op']} | {r['shape']} | {r['backend']} | {r['us']:.1f} | {ours:.1f} | "
            f"{ours / r['us']:.2f} |"
        )
    lines += ["", *(f"- {op}: {len(v)} shapes, ratio {min(v):.2f}–{max(v):.2f}, median "
                    f"{float(np.median(v)):.2f}" for op, v in ratios.items())]  # fmt: skip
    return lines + [""]


def render_comparisons(
    df: pd.DataFrame,
    meta: dict[str, Any],
    fits: dict[str, TermFit],
    reference: pd.DataFrame | None = None,
) -> str:
    terms = reference_terms(meta, fits)
    lines = [f"## What the timings answer ({meta['device']['name']})", ""]
    lines += heldout_section(fits)
    if (df["term"] == "paged_decode_attention").any():
        lines += bandwidth_section(df, meta)
        lines += model_shapes_section(df, meta, terms)
        lines += variant_section(df)
        lines += critical_path_section(df, fits)
    lines += gemm_section(df, fits)
    if reference is not None:
        lines += reference_section(df, meta, reference)
    lines += profiles_section(df, fits, terms)
    return "\n".join(lines)


def plot_decode_bandwidth(df: pd.DataFrame, meta: dict[str, Any], path: Path) -> Path:
    """Achieved K/V bandwidth by block size (the sweep) and by mean context (block 16)."""
    from matplotlib.figure import Figure

    paged = _paged(df[df["in_fit"]])
    fig = Figure(figsize=(11, 4.2))
    by_bs, by_ctx = fig.subplots(1, 2)
    sweep = paged[paged["shape_id"].str.startswith("bsweep-")]
    for shape, sel in sweep.groupby(sweep["shape_id"].str.rsplit("-bs", n=1).str[0]):
        sel = sel.sort_values("block_size")
        by_bs.plot(sel["block_size"], sel["kv_bytes_per_s"] / 1e9, "o-", ms=3, label=shape[7:])
    core = paged[(paged["block_size"] == CORE_BLOCK_SIZE) & (paged["batch"] >= 16)]
    for (mix, batch), sel in core.groupby(["context_mix", "batch"]):
        sel = sel.sort_values("mean_context")
        marker = "o-" if mix == "uniform" else "x--"
        by_ctx.plot(sel["mean_context"], sel["kv_bytes_per_s"] / 1e9, marker, ms=4,
                    label=f"batch {batch:.0f}, {mix}")  # fmt: skip
    for ax in (by_bs, by_ctx):
        for i, (label, value) in enumerate(peaks(meta).items()):
            ax.axhline(value / 1e9, color="k", lw=0.8, ls=("-", "--", ":")[i % 3], label=label)
        ax.set_xscale("log", base=2)
        ax.set_ylabel("K/V read (GB/s)")
        ax.legend(fontsize=6)
    by_bs.set_xlabel("block size (tokens)")
    by_bs.set_title("paged decode: by block size", fontsize=9)
    by_ctx.set_xlabel("mean context (tokens)")
    by_ctx.set_title("paged decode, block 16: by context and mix", fontsize=9)
    fig.suptitle(f"{meta['device']['name']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cross_run_section(run_dir: Path, other_dir: Path) -> list[str]:
    """Markdown: ``run_dir``'s profile predicting every fitted measurement of ``other_dir``.

    Both folders are ``pagesim calibrate`` outputs; the other run's points are all held out
    from this profile's fit. Per term: points, MAPE, median and worst error, the signed
    median (bias), and each run's own held-out MAPE from its profile.
    """
    from pagesim.calibrate.measure import load_measurements

    mine = load_profile(run_dir / "profile.yaml")
    theirs = load_profile(other_dir / "profile.yaml")
    df = load_measurements(other_dir / "measurements.csv")
    df = df[df["in_fit"]]
    if mine.gpu_spec != theirs.gpu_spec:
        return _cross_gpu_lines(run_dir, other_dir, mine, theirs, df)
    lines = [
        f"### {run_dir.name}'s profile on {other_dir.name}'s measurements",
        "",
        f"Every point of the second run is held out from the first run's fit "
        f"({mine.command!r} vs {theirs.command!r}).",
        "",
        "| term | points | MAPE | median abs error | worst | signed median | "
        "held-out MAPE, first run | held-out MAPE, second run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows, rel in _errors_by_term(mine, df):
        term = mine.terms[name]
        other = theirs.terms.get(name)
        lines.append(
            f"| {name} | {len(rows)} | {_pct(np.mean(np.abs(rel)))} | "
            f"{_pct(np.median(np.abs(rel)))} | {_pct(np.max(np.abs(rel)))} | "
            f"{np.median(rel) * 100:+.1f}% | {_pct(term.heldout_mape)} | "
            f"{_pct(other.heldout_mape if other else None)} |"
        )
    return lines


def _errors_by_term(profile, df: pd.DataFrame):
    """Per term of ``profile`` with points in ``df``: (name, its rows, predicted / measured
    - 1), in ``TERM_NAMES`` order."""
    for name in TERM_NAMES:
        rows = df[df["term"] == name]
        term = profile.terms.get(name)
        if not rows.empty and term is not None:
            yield name, rows, predict_s(term, rows) / rows["median_s"].to_numpy() - 1.0


def _cross_gpu_lines(run_dir: Path, other_dir: Path, mine, theirs, df: pd.DataFrame) -> list[str]:
    """``cross_run_section`` across GPUs: the first run's profile as measured and projected
    onto the second run's GPU spec (``simulator/costmodel/projection.py``: bytes by the HBM
    bandwidth ratio, FLOPs by the FP16 peak ratio, swap bytes by PCIe, constants kept)
    against every fitted point of the second run: how well the projection rule moves a
    measured profile to another GPU, checked on two real ones."""
    from pagesim.simulator.costmodel.projection import project_profile

    source, target = GPUS[mine.gpu_spec], GPUS[theirs.gpu_spec]
    projected = project_profile(mine, target, source)
    lines = [
        f"### {run_dir.name}'s profile on {other_dir.name}'s measurements (another GPU)",
        "",
        f"{mine.gpu_name} (spec {source.name}) -> {theirs.gpu_name} (spec {target.name}). "
        "Every point of the second run is held out from the first run's fit. Projected: "
        "`simulator/costmodel/projection.py` with the specs' datasheet figures, bytes x"
        f"{source.hbm_bw_bytes_s / target.hbm_bw_bytes_s:.3g}, FLOPs x"
        f"{source.fp16_flops / target.fp16_flops:.3g}, swap bytes x"
        f"{source.pcie_bw_bytes_s / target.pcie_bw_bytes_s:.3g}, constants kept. Errors are "
        "predicted / measured - 1.",
        "",
        "| term | points | MAPE as measured | signed median as measured | MAPE projected | "
        "signed median projected | held-out MAPE, second run's own fit |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows, raw in _errors_by_term(mine, df):
        moved = predict_s(projected.terms[name], rows) / rows["median_s"].to_numpy() - 1.0
        other = theirs.terms.get(name)
        lines.append(
            f"| {name} | {len(rows)} | {_pct(np.mean(np.abs(raw)))} | "
            f"{np.median(raw) * 100:+.1f}% | {_pct(np.mean(np.abs(moved)))} | "
            f"{np.median(moved) * 100:+.1f}% | {_pct(other.heldout_mape if other else None)} |"
        )
    return lines
