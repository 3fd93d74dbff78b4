"""Charts over time and over two sweep axes: memory in use over time (per point,
from its time series) and a heatmap of a metric over any 2-D sweep."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from pagesim.experiments.chart_base import (
    ChartContext,
    ChartUnavailable,
    axis_label,
    new_figure,
    title_of,
)
from pagesim.experiments.spec import ChartSpec

USED_COLUMNS = ("mem_token_frac", "mem_reserved_frac", "mem_internal_frag_frac")


def memory_over_time(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """KV memory held by requests over time, as small multiples: one panel per point
    (first seed), on shared axes, so that ten points are ten readable panels rather than
    ten overlapping lines. Solid = held (token states + reservation + internal
    fragmentation), dashed = token states. ``y`` picks one time-series column instead."""
    names = [name.replace("\n", ", ") for name in ctx.point_names()]
    points = list(zip(ctx.results["point"], names, strict=True))
    cols = min(len(points), 4)
    rows = -(-len(points) // cols)
    fig = Figure(figsize=(3.4 * cols, 2.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True).ravel()
    for ax, (point_id, label) in zip(axes, points, strict=False):
        series = ctx.timeseries(point_id)
        if chart.y is not None:
            if chart.y not in series.columns:
                raise ChartUnavailable(f"y {chart.y!r} is not a time-series column")
            ax.plot(series["t_s"], series[chart.y])
        else:
            missing = [c for c in ("t_s", *USED_COLUMNS) if c not in series.columns]
            if missing:
                raise ChartUnavailable(f"time series lacks columns {missing}")
            held = 100.0 * series[list(USED_COLUMNS)].sum(axis=1)
            (line,) = ax.plot(series["t_s"], held, label="held")
            ax.plot(
                series["t_s"],
                100.0 * series["mem_token_frac"],
                linestyle="--",
                color=line.get_color(),
                label="token states",
            )
        ax.set_title(str(label), fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(points) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(axis_label(chart.y) if chart.y else "KV capacity (%)", fontsize=8)
    for ax in axes[(rows - 1) * cols :]:
        ax.set_xlabel("simulated time (s)", fontsize=8)
    if chart.y is None:
        axes[0].legend(fontsize="x-small", loc="upper left")
    fig.suptitle(title_of(ctx, chart, "KV memory over time"))
    return fig


def heatmap(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """``metric`` (default normalized latency) over the ``x`` × ``y`` sweep axes
    (default: the first two swept paths)."""
    swept = ctx.spec.sweep.swept_paths
    x = ctx.column(chart.x, swept[0] if swept else None, "x")
    y = ctx.column(chart.y, swept[1] if len(swept) > 1 else None, "y")
    metric = ctx.column(chart.metric, "normalized_latency_s_per_tok", "metric")
    table = ctx.results.pivot_table(index=y, columns=x, values=metric, aggfunc="mean", sort=False)
    fig = new_figure(width_in=7.0, height_in=5.0)
    ax = fig.axes[0]
    image = ax.imshow(table.to_numpy(dtype=float), aspect="auto", origin="lower", cmap="viridis")
    ax.set_xticks(range(len(table.columns)), [str(c) for c in table.columns])
    ax.set_yticks(range(len(table.index)), [str(i) for i in table.index])
    values = table.to_numpy(dtype=float)
    for (row, col), value in np.ndenumerate(values):
        ax.text(col, row, f"{value:.3g}", ha="center", va="center", color="white", fontsize=8)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    fig.colorbar(image, ax=ax, label=axis_label(metric))
    fig.suptitle(title_of(ctx, chart, f"{metric} over {x} × {y}"))
    return fig
