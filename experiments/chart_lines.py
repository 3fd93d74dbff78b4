"""Line charts: a metric against a swept value, one line per series, a panel per facet.

latency_vs_rate (the paper's Figure 12: normalized latency vs request rate),
goodput_vs_rate (vLLM's request_goodput under the experiment's SLOs vs request rate),
latency_vs_block_size (Figure 18b), swap_vs_recompute (Figure 19: latency per
preemption mode across block sizes), sharing_savings (Figure 15: memory saved by
sharing vs n or beam width), watermark (preemptions, latency and token-state
utilisation vs the admission watermark). With several seeds the ``_ci95``
column draws error bars; with ``--intervals`` the ``_lo`` / ``_hi`` columns draw a band.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pagesim.experiments.chart_base import (
    ChartContext,
    ChartUnavailable,
    axis_label,
    groups,
    new_figure,
    quantity,
    set_title,
    title_of,
)
from pagesim.experiments.spec import ChartSpec


def _draw_lines(ax: Axes, ctx: ChartContext, frame, x: str, y: str, series: str | None) -> None:
    for key, part in groups(frame, series):
        part = part.sort_values(x)
        label = None if key is None else str(key)
        if f"{y}_lo" in part.columns:  # an interval (--intervals): a band, not error bars
            line = ax.plot(part[x], part[y], marker="o", label=label)[0]
            ax.fill_between(
                part[x], part[f"{y}_lo"].clip(lower=0), part[f"{y}_hi"], color=line.get_color(),
                alpha=0.2,
            )  # fmt: skip
            continue
        ax.errorbar(part[x], part[y], yerr=_yerr(part, y), marker="o", capsize=3, label=label)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(True, alpha=0.3)
    if series is not None:
        ax.legend(title=axis_label(series), fontsize="small")


def _yerr(part, y: str):
    """Error bars of the ``_ci95`` half-width, the lower one cut at zero (every charted
    quantity is a latency, a rate, a count or a fraction: none is negative, though a
    Student-t half-width from two seeds may reach below zero)."""
    if f"{y}_ci95" not in part.columns:
        return None
    ci = part[f"{y}_ci95"].fillna(0).to_numpy(dtype=float)
    values = part[y].to_numpy(dtype=float)
    return [np.minimum(ci, np.maximum(values, 0)), ci]


def line_chart(
    ctx: ChartContext, chart: ChartSpec, *, x: str, y: str, series: str | None, what: str
) -> Figure:
    """``y`` against ``x``, one line per configuration (``series``, else the points'
    configuration: :meth:`ChartContext.with_configuration`), a panel per facet; the title
    says ``what`` for the kind's own axes, else the quantities plotted."""
    default_axes = (x, y)
    x = ctx.column(chart.x, x, "x")
    y = ctx.column(chart.y, y, "y")
    facet = ctx.column(chart.facet, None, "facet") if chart.facet else None
    results = ctx.results
    if chart.series:
        series = ctx.column(chart.series, None, "series")
    elif series == "label" or series not in results.columns:
        results, series = ctx.with_configuration(x, facet)
    panels = groups(results, facet)
    fig = new_figure(len(panels))
    for ax, (key, frame) in zip(fig.axes, panels, strict=True):
        _draw_lines(ax, ctx, frame, x, y, series)
        if key is not None:
            ax.set_title(f"{facet} = {key}")
        if chart.log_x:
            ax.set_xscale("log", base=2)
        if chart.log_y:
            ax.set_yscale("log")
    if (x, y) != default_axes:
        what = f"{quantity(y)} vs {quantity(x)}"
    set_title(fig, title_of(ctx, chart, what))
    return fig


def latency_vs_rate(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Normalized latency vs request rate, a line per label (Figure 12; any ``x``/``y``)."""
    return line_chart(
        ctx,
        chart,
        x="arrivals.rate_req_s",
        y="normalized_latency_s_per_tok",
        series="label",
        what="normalized latency vs request rate",
    )


def goodput_vs_rate(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """vLLM's ``request_goodput`` (completed requests meeting every SLO, per second) vs
    request rate, a line per label; the dotted diagonal is the offered rate, which a
    goodput equal to it would meet in full. Needs ``slo`` in the experiment."""
    if (chart.y or "request_goodput") not in ctx.results.columns:
        raise ChartUnavailable(
            "the results have no 'request_goodput' column: give the experiment SLOs "
            "(slo: {ttft_ms, tpot_ms, e2el_ms}, any of them)"
        )
    fig = line_chart(
        ctx, chart, x="arrivals.rate_req_s", y="request_goodput", series="label",
        what="goodput (requests meeting every SLO) vs request rate",
    )  # fmt: skip
    if (chart.x or "arrivals.rate_req_s") == "arrivals.rate_req_s":
        for ax in fig.axes:
            top = max(ax.get_xlim()[1], ax.get_ylim()[1])
            ax.plot([0, top], [0, top], ls=":", color="grey", lw=1, label="offered rate")
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            ax.legend(fontsize="small")
    return fig


def latency_vs_block_size(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Normalized latency vs block size, a line per label (Figure 18b)."""
    return line_chart(
        ctx,
        chart,
        x="allocator.block_size",
        y="normalized_latency_s_per_tok",
        series="label",
        what="normalized latency vs block size",
    )


def swap_vs_recompute(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Normalized latency vs block size, a line per preemption mode (Figure 19)."""
    return line_chart(
        ctx,
        chart,
        x="allocator.block_size",
        y="normalized_latency_s_per_tok",
        series="scheduler.preemption_mode",
        what="recompute vs swap across block sizes",
    )


def sharing_savings(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Memory saved by sharing: the simulator's ``mem_sharing_saved_frac`` extra value
    (1 − physical KV slots / slots the same sequences would hold without sharing)."""
    if (chart.y or "mem_sharing_saved_frac") not in ctx.results.columns:
        raise ChartUnavailable(
            "the results have no 'mem_sharing_saved_frac' column: the simulator must report "
            "it in RunResult.extra (1 - physical KV slots / slots without sharing)"
        )
    default_x = (
        "workload.beam_width" if "workload.beam_width" in ctx.results.columns else "workload.n"
    )
    return line_chart(
        ctx,
        chart,
        x=default_x,
        y="mem_sharing_saved_frac",
        series="label",
        what="KV memory saved by sharing",
    )


def watermark(ctx: ChartContext, chart: ChartSpec) -> Figure:
    """Three panels against the watermark: preemptions, latency, token-state utilisation."""
    x = ctx.column(chart.x, "allocator.watermark", "x")
    metrics = ["num_preemptions", "normalized_latency_s_per_tok", "mem_token_frac"]
    for metric in metrics:
        ctx.column(metric, None, "y")
    series = ctx.column(chart.series, None, "series") if chart.series else None
    fig = new_figure(len(metrics), width_in=4.6)
    for ax, metric in zip(fig.axes, metrics, strict=True):
        _draw_lines(ax, ctx, ctx.results, x, metric, series)
        ax.set_title(axis_label(metric).split(" (")[0])
    set_title(fig, title_of(ctx, chart, "the admission watermark"))
    return fig
