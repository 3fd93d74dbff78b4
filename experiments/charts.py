"""Chart kinds (one function each, found in a plain dict) and drawing them all.

A chart kind is ``(ChartContext, ChartSpec) -> Figure``; adding one is one function
and one line in :data:`CHART_KINDS`. Drawing happens after the runs, from
``results.csv`` and the per-run tables, never inside the simulator.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pandas as pd
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pagesim.experiments import chart_bars, chart_lines, chart_maps
from pagesim.experiments.chart_base import ChartContext, ChartUnavailable
from pagesim.experiments.spec import ExperimentSpec

CHART_KINDS = {
    "memory_breakdown": chart_bars.memory_breakdown,
    "memory_over_time": chart_maps.memory_over_time,
    "latency_vs_rate": chart_lines.latency_vs_rate,
    "goodput_vs_rate": chart_lines.goodput_vs_rate,
    "batch_size": chart_bars.batch_size,
    "sharing_savings": chart_lines.sharing_savings,
    "throughput": chart_bars.throughput,
    "latency_vs_block_size": chart_lines.latency_vs_block_size,
    "swap_vs_recompute": chart_lines.swap_vs_recompute,
    "watermark": chart_lines.watermark,
    "heatmap": chart_maps.heatmap,
}


def draw_charts(
    spec: ExperimentSpec, results: pd.DataFrame, out_dir: Path
) -> tuple[list[Path], list[str]]:
    """Draw every chart of ``spec`` into ``out_dir``, as PNG and SVG: (PNG paths, why-not
    messages)."""
    ctx = ChartContext(spec, results, out_dir)
    paths, problems = [], []
    for index, chart in enumerate(spec.charts):
        stem = chart.file or chart.kind
        try:
            fig = CHART_KINDS[chart.kind](ctx, chart)
        except ChartUnavailable as exc:
            problems.append(f"charts[{index}] ({chart.kind}): not drawn: {exc}")
            continue
        note = step_cost_note(results)
        if note:
            engine = fig.get_layout_engine()
            if engine is not None and hasattr(engine, "set"):
                engine.set(rect=(0, 0.05, 1, 0.95))
            fig.text(0.005, 0.005, note, fontsize=6.5, ha="left", va="bottom", color="0.35")
        FigureCanvasAgg(fig)
        for fmt, metadata in (
            ("png", {"Software": None}),
            ("svg", {"Date": None, "Creator": None}),
        ):
            path = out_dir / f"{stem}.{fmt}"
            tmp = out_dir / f".tmp-{stem}.{fmt}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                with rc_context({"svg.hashsalt": stem}):  # the same bytes for the same results
                    fig.savefig(tmp, dpi=110, format=fmt, metadata=metadata)
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
        paths.append(out_dir / f"{stem}.png")
    return paths, problems


def step_cost_note(results: pd.DataFrame) -> str:
    """The charts' footnote: where the step costs came from (cost model and profile)."""
    if "cost_model" not in results.columns:
        return ""
    pairs = dict.fromkeys(
        f"{kind} ({profile})"
        for kind, profile in zip(
            results["cost_model"].astype(str),
            results.get("cost_model_profile", pd.Series([""] * len(results))).astype(str),
            strict=True,
        )
    )
    return "step costs: " + "; ".join(pairs)
