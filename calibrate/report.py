"""report.md and its plots, from the measurements and the fits.

Drawn from saved results only (the measurements CSV and the run's metadata), so
``pagesim calibrate report DIR`` rebuilds them without a GPU. The report holds the run's
description, the targets, the fits, and what the timings answer (``compare``: held-out
error by term, achieved decode bandwidth against the HBM peak, the model's shapes, the
kernel variants, the GEMMs by model, the fitted profile beside the shipped and the
analytic one); the plots are the fits' predicted vs measured times and the decode
bandwidth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.calibrate.compare import (
    BANDWIDTH_PNG,
    REFERENCE_COLUMNS,
    REFERENCE_CSV,
    plot_decode_bandwidth,
    render_comparisons,
)
from pagesim.calibrate.fit import TermFit
from pagesim.calibrate.tables import read_table
from pagesim.calibrate.targets import Target
from pagesim.files import atomic_write_text, replaced_atomically

REPORT_MD = "report.md"
PLOT_PNG = "fit_predicted_vs_measured.png"


def plot_fits(fits: dict[str, TermFit], path: Path) -> Path:
    # a Figure of its own, not pyplot: drawing a report must not switch the caller's backend
    from matplotlib.figure import Figure

    num = len(fits)
    cols = min(num, 3)
    rows = -(-num // cols)
    fig = Figure(figsize=(4.2 * cols, 4.0 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (term, fit) in zip(axes.flat, fits.items(), strict=False):
        meas_us, pred_us = fit.measured_s * 1e6, fit.predicted_s * 1e6
        ax.loglog(
            meas_us[~fit.is_heldout], pred_us[~fit.is_heldout], ".", alpha=0.6, label="fitted on"
        )
        ax.loglog(meas_us[fit.is_heldout], pred_us[fit.is_heldout], "x", label="held out")
        lo, hi = min(meas_us.min(), pred_us.min()), max(meas_us.max(), pred_us.max())
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        mape = fit.heldout_mape
        ax.set_title(
            f"{term}\nheld-out MAPE {'n/a' if mape is None else f'{mape:.1%}'}", fontsize=9
        )
        ax.set_xlabel("measured (us)")
        ax.set_ylabel("predicted (us)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[num:]:
        ax.set_visible(False)
    fig.tight_layout()
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return path


def _fmt(x: float | None, unit: str = "", scale: float = 1.0, spec: str = ".3g") -> str:
    return "—" if x is None else f"{x * scale:{spec}}{unit}"


def _model(dims: dict[str, Any]) -> str:
    rest = ", ".join(f"{k} {dims[k]}" for k in sorted(dims) if k != "name")
    return f"{dims.get('name', '?')} ({rest})"


def _rates(coefficients: dict[str, float]) -> str:
    parts = []
    if coefficients.get("s_per_byte"):
        parts.append(f"{1 / coefficients['s_per_byte'] / 1e9:.0f} GB/s")
    if coefficients.get("s_per_flop"):
        parts.append(f"{1 / coefficients['s_per_flop'] / 1e12:.1f} TFLOP/s")
    return ", ".join(parts) or "—"


def _budget(meta: dict[str, Any]) -> list[str]:
    b = meta.get("budget")
    if not b:
        return []
    skipped = b["skipped_by_term"]
    not_timed = (
        "every planned shape was timed"
        if not skipped
        else "not timed for lack of time: "
        + ", ".join(f"{n} {term}" for term, n in skipped.items())
    )
    return [
        f"- budget: {b['budget_s']:.0f} s of timing, {b['spent_s']:.0f} s spent; "
        f"{b['num_timed']} of {b['num_planned']} planned shapes timed (estimated beforehand: "
        f"{b['estimated_plan_s']:.0f} s for all); {not_timed}"
    ]


def _checks(meta: dict[str, Any]) -> list[str]:
    checks = meta.get("checks")
    if not checks:
        return []
    failed = [c for c in checks if not c["passed"]]
    where = "on the host shim (CPU)" if meta.get("checked_on") == "host" else "on the device"
    if not failed:
        return [f"- kernel check {where}: all {len(checks)} checks match the numpy references"]
    why = lambda c: c["error"] or f"max abs error {c['max_abs_err']:.3g}"  # noqa: E731
    return [
        f"- kernel check {where}: **{len(failed)} of {len(checks)} failed**: "
        + "; ".join(f"{c['name']} ({why(c)})" for c in failed)
    ]


def render_report(
    meta: dict[str, Any],
    fits: dict[str, TermFit],
    targets: list[Target],
    df: pd.DataFrame,
    reference: pd.DataFrame | None = None,
) -> str:
    dev = meta["device"]
    num_report_only = int((~df["in_fit"]).sum())
    lines = [
        f"# Calibration report: {dev['name']}",
        "",
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}; model: {_model(meta['model'])}; grid: {'quick' if meta['quick'] else 'full'}, "
        f"{len(df)} measurements"
        + (f" ({num_report_only} for the report only, not fitted)" if num_report_only else "")
        + f"; fit seed {meta['fit_seed']}",
        *_budget(meta),
        *_checks(meta),
        f"- device: {dev['name']}, SM clock {_fmt(dev.get('sm_clock_mhz'), ' MHz', spec='.0f')}, "
        f"memory clock {_fmt(dev.get('memory_clock_mhz'), ' MHz', spec='.0f')}, "
        f"L2 {_fmt(dev.get('l2_bytes'), ' MiB', 1 / 2**20, '.0f')}, memory {_fmt(dev.get('memory_bytes'), ' GiB', 1 / 2**30, '.0f')}",
        f"- software: {', '.join(f'{k} {v}' for k, v in dev.get('software', {}).items()) or '—'}",
        f"- measured copy bandwidth (read + write): {meta['copy_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s",
        f"- timing: {', '.join(f'{k} {v}' for k, v in sorted(meta['timing'].items()))} (CUDA events, L2 flushed before each run)",
        "",
        "## Targets",
        "",
        "| target | threshold | measured | pass | detail |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        verdict = "—" if t.passed is None else ("yes" if t.passed else "**no**")
        lines.append(
            f"| {t.name} | {t.threshold} | {_fmt(t.measured, '%', 100, '.1f')} | {verdict} | {t.detail} |"
        )
    lines += [
        "",
        "## Fits (time_s = const_s + max(s_per_byte·bytes, s_per_flop·flops) + s_per_block·blocks + s_per_seq·seqs)",
        "",
        "| term | points | held-out MAPE | worst held-out | train MAPE | achieved rates | coefficients |",
        "|---|---|---|---|---|---|---|",
    ]
    for term, fit in fits.items():
        coefs = ", ".join(f"{k} {v:.3g}" for k, v in fit.coefficients.items())
        lines.append(
            f"| {term} | {fit.num_points} | {_fmt(fit.heldout_mape, '%', 100, '.1f')} | "
            f"{_fmt(fit.heldout_max_err, '%', 100, '.1f')} | {fit.train_mape:.1%} | {_rates(fit.coefficients)} | {coefs} |"
        )
    nonconv = meta.get("num_not_converged")
    lines += [
        "",
        f"![predicted vs measured]({PLOT_PNG})",
        "",
        "Notes: achieved rates are 1 / s_per_byte and 1 / s_per_flop of each fit. "
        f"{'' if not nonconv else f'{nonconv} measurements stopped at the maximum repeat count before their spread was tight (see is_converged in the CSV). '}"
        "Terms not measured here (step_overhead) come from the analytic profile when the simulator loads this one; "
        "the optional pointwise term (element-wise kernels) is not timed here and costs nothing without it.",
        "",
        render_comparisons(df, meta, fits, reference),
    ]
    return "\n".join(lines)


def write_report(
    out_dir: Path,
    meta: dict[str, Any],
    fits: dict[str, TermFit],
    targets: list[Target],
    df: pd.DataFrame,
) -> tuple[Path, Path]:
    """report.md, the fits' plot and (when paged decode was timed) the bandwidth plot."""
    out_dir = Path(out_dir)
    plot = plot_fits(fits, out_dir / PLOT_PNG)
    if (df["term"] == "paged_decode_attention").any():
        plot_decode_bandwidth(df, meta, out_dir / BANDWIDTH_PNG)
    ref_path = out_dir / REFERENCE_CSV
    reference = (
        read_table(ref_path, REFERENCE_COLUMNS, "benchmarks/gpu_reference.py's output")
        if ref_path.is_file()
        else None
    )
    report = atomic_write_text(
        out_dir / REPORT_MD, render_report(meta, fits, targets, df, reference)
    )
    return report, plot


def count_not_converged(is_converged: np.ndarray) -> int:
    return int((~is_converged.astype(bool)).sum())
