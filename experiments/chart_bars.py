"""Bar charts: the memory breakdown (the paper's Figure 2) and grouped bars of one
metric per point (Figure 13's average batch size, Figure 16's shared-prefix
throughput)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from pagesim.experiments.chart_base import (
    ChartContext,
    axis_label,
    groups,
    new_figure,
    title_of,
)
from pagesim.experiments.spec import ChartSpec

#: The five memory categories (DESIGN.md "Memory accounting") and their legend names.
MEMORY_COLUMN_TO_NAME = {
    "mem_token_frac": "token states",
    "mem_reserved_frac": "reservation",
    "mem_internal_frag_frac": "internal fragmentation",
    "mem_external_frag_frac": "external fragmentation",
    "mem_unused_frac": "unused",
}
MEMORY_COLORS = ("#2b8cbe", "#a6bddb", "#fdae6b", "#e6550d", "#d9d9d9")


def memory_breakdown(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """One stacked bar per point: the five categories in % of KV capacity (sum 100)."""
    x = ctx.column(chart.x, "label", "x")
    for column in MEMORY_COLUMN_TO_NAME:
        ctx.column(column, None, "memory category")
    names = ctx.point_names(x)
    fig = new_figure(width_in=max(5.0, 1.3 * len(names) + 2.5))
    ax = fig.axes[0]
    bottom = np.zeros(len(names))
    for (column, name), color in zip(MEMORY_COLUMN_TO_NAME.items(), MEMORY_COLORS, strict=True):
        pct = 100.0 * ctx.results[column].to_numpy(dtype=float)
        ax.bar(range(len(names)), pct, bottom=bottom, label=name, color=color, edgecolor="white")
        for i, value in enumerate(pct):
            if value >= 4.0:
                ax.text(
                    i, bottom[i] + value / 2, f"{value:.1f}", ha="center", va="center", fontsize=8
                )
        bottom += pct
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("KV cache capacity (%)")
    ax.set_xlabel(axis_label(x))
    ax.set_ylim(0, 100)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.suptitle(title_of(ctx, chart, "KV cache memory breakdown"))
    return fig


def grouped_bars(ctx: ChartContext, chart: ChartSpec, *, y: str, what: str) -> Figure:
    """Bars of ``y``: one group per ``x`` value, one bar per ``series`` value."""
    x = ctx.column(chart.x, "label", "x")
    y = ctx.column(chart.y, y, "y")
    series = ctx.column(chart.series, None, "series") if chart.series else None
    x_values = list(ctx.results[x].drop_duplicates())
    parts = groups(ctx.results, series)
    width = 0.8 / len(parts)
    fig = new_figure(width_in=max(5.0, 1.1 * len(x_values) * len(parts) + 2.0))
    ax = fig.axes[0]
    for k, (key, part) in enumerate(parts):
        positions = [x_values.index(v) + (k - (len(parts) - 1) / 2) * width for v in part[x]]
        ci = part[f"{y}_ci95"] if f"{y}_ci95" in part.columns else None
        bars = ax.bar(
            positions, part[y], width, yerr=ci, capsize=3, label=None if key is None else str(key)
        )
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_xticks(range(len(x_values)), [str(v) for v in x_values])
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(True, axis="y", alpha=0.3)
    if series is not None:
        ax.legend(title=axis_label(series), fontsize="small")
    fig.suptitle(title_of(ctx, chart, what))
    return fig


def batch_size(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Average batch size per point, grouped bars (Figure 13)."""
    return grouped_bars(ctx, chart, y="avg_batch_size", what="average batch size")


def throughput(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Throughput (req/s) per point, grouped bars (Figure 16's shared prefixes)."""
    return grouped_bars(ctx, chart, y="throughput_req_s", what="throughput")
