"""The validation page and chart, from ``validation.csv``'s table (any dataset)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.compare import Goal
from pagesim.experiments.validation.study import Study

CHART_NAME = "validation_{dataset}.png"


def ms(x: float) -> str:
    if not np.isfinite(x):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def pct(x: float) -> str:
    return "—" if not np.isfinite(x) else f"{x:+.1%}"


def rate_text(x: float, top: float) -> str:
    return f"> {top:g} (not within the runs)" if not np.isfinite(x) else f"{x:.2f}"


def goal_lines(goals: list[Goal]) -> list[str]:
    lines = ["| goal | met? | detail |", "|---|---|---|"]
    for g in goals:
        met = "—" if g.met is None else ("yes" if g.met else "**no**")
        lines.append(f"| {g.text} | {met} | {g.detail} |")
    return lines


def runs_table(study: Study) -> list[str]:
    lines = [
        "| run | rate (req/s) | launch | role | per-request records | evidence |",
        "|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        n = v.run.num_requests
        records = f"{n:,}" if n else "none (aggregates only)"
        lines.append(
            f"| {v.name} | {v.rate:g} | {v.launch} | {v.role} | {records} | {v.evidence or '—'} |"
        )
    return lines


def failed_lines(study: Study) -> list[str]:
    """A paragraph on the runs' failed requests, where any run has one."""
    failed = [(v.name, v.run.num_failed, v.run.num_requests) for v in study.runs]
    failed = [f for f in failed if f[1]]
    if not failed:
        return []
    each = "; ".join(f"{name}: {n:,} of {total:,}" for name, n, total in failed)
    return [
        "",
        f"Failed requests ({each}): each was sent and loaded the server, so it is replayed "
        "(its prompt, and the output tokens it got or its reader's stated assumption), and it "
        "is left out of the measured and the predicted statistics alike.",
    ]


def closed_metrics(table: pd.DataFrame) -> tuple[str, ...]:
    """The closed-loop metrics the table holds, in validation.csv's order."""
    present = set(table["metric"])
    return tuple(m for m in (*vcsv.METRICS, "itl") if m in present)


def stats_table(table: pd.DataFrame, metrics: tuple[str, ...] | None = None) -> list[str]:
    """Per run: measured and each cost model's p50 / p90 / mean of each metric (ms)."""
    metrics = metrics or closed_metrics(table)
    head = " | ".join(f"{m.upper()} {s}" for m in metrics for s in vcsv.STATS)
    lines = [f"| run | rate | source | {head} |", "|---|---|---|" + "---|" * (len(metrics) * 3)]
    closed = table[table["metric"].isin(metrics)]
    for run, sub in closed.groupby("run", sort=False):
        rate = sub["rate"].iloc[0]
        first = sub[sub["cost_model"] == sub["cost_model"].iloc[0]].set_index(["metric", "stat"])
        cells = [ms(first.loc[(m, s), "measured_ms"]) for m in metrics for s in vcsv.STATS]
        lines.append(f"| {run} | {rate:g} | measured | {' | '.join(cells)} |")
        for cost, c in sub.groupby("cost_model", sort=False):
            c = c.set_index(["metric", "stat"])
            cells = [ms(c.loc[(m, s), "predicted_ms"]) for m in metrics for s in vcsv.STATS]
            lines.append(f"| {run} | {rate:g} | {cost} | {' | '.join(cells)} |")
    return lines


def errors_table(table: pd.DataFrame, metrics: tuple[str, ...] | None = None) -> list[str]:
    metrics = metrics or closed_metrics(table)
    head = " | ".join(f"{m.upper()} {s}" for m in metrics for s in vcsv.STATS)
    lines = [
        f"| run | rate | role | cost model | {head} |",
        "|---|---|---|---|" + "---|" * (len(metrics) * 3),
    ]
    closed = table[table["metric"].isin(metrics)]
    for cost, sub in closed.groupby("cost_model", sort=False):
        for run, c in sub.groupby("run", sort=False):
            role = c["role"].iloc[0]
            c = c.set_index(["metric", "stat"])
            cells = [pct(c.loc[(m, s), "error"]) for m in metrics for s in vcsv.STATS]
            lines.append(
                f"| {run} | {c['rate'].iloc[0]:g} | {role} | {cost} | {' | '.join(cells)} |"
            )
    return lines


def _of_study(study: Study, table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the study's own cost models (a dataset's section may add others: a
    serving path fitted on part of each run), which the charts show."""
    return table[table["cost_model"].isin([c.name for c in study.cost_models])]


def draw_chart(study: Study, table: pd.DataFrame, path: Path) -> Path:
    """Predicted vs measured per rate: TTFT, TPOT, E2E p50 (solid) and p90 (dashed), one
    panel per metric and one row of panels per launch (runs of different servers or
    models are never averaged into one curve), the real points in black; one line per
    cost model. Runs all at one rate: :func:`draw_parity_chart` instead."""
    from matplotlib.figure import Figure

    metrics = closed_metrics(table)
    table = _of_study(study, table)
    if table[table["metric"].isin(metrics)]["rate"].nunique() < 2:
        return draw_parity_chart(study, table, path)
    closed = table[table["metric"].isin(metrics)]
    launches = list(dict.fromkeys(closed["launch"]))
    height = 0.4 + 3.8 * len(launches)
    fig = Figure(figsize=(4.4 * len(metrics), height))
    grid = fig.subplots(len(launches), len(metrics), squeeze=False)
    colors = [f"C{i}" for i in range(10)]  # one color per cost model throughout
    order = list(dict.fromkeys(closed["cost_model"]))
    for row, launch in zip(grid, launches, strict=True):
        of_launch = closed[closed["launch"] == launch]
        for ax, metric in zip(row, metrics, strict=True):
            _rate_panel(ax, of_launch[of_launch["metric"] == metric], order, colors)
            ax.set_ylabel(f"{metric.upper()} (ms)")
            ax.set_title(metric.upper() if len(launches) == 1 else f"{metric.upper()}: {launch}",
                         fontsize=9)  # fmt: skip
    for ax in grid[-1]:
        ax.set_xlabel("request rate (req/s)")
    fig.suptitle(textwrap.fill(study.title, 150), fontsize=9)
    if len(order) > 3:  # beside the panels, where it hides no curve
        fig.legend(*grid[0][0].get_legend_handles_labels(), loc="center right", fontsize=7)
        right = 1 - 2.0 / fig.get_figwidth()
    else:
        grid[0][0].legend(fontsize=6)
        right = 1.0
    fig.tight_layout(rect=(0, 0, right, 1 - 0.3 / height))  # room for the title
    fig.savefig(path, dpi=110)
    return path


def _rate_panel(ax, sub: pd.DataFrame, order: list[str], colors: list[str]) -> None:
    """One launch's one metric: the measured p50/p90 and each cost model's, per rate."""
    first = sub[sub["cost_model"] == sub["cost_model"].iloc[0]]
    for stat, style in (("p50", "o"), ("p90", "s")):
        pts = first[first["stat"] == stat]
        ax.scatter(pts["rate"], pts["measured_ms"], color="k", marker=style, zorder=3,
                   label=f"measured {stat}", s=22)  # fmt: skip
    for cost, c in sub.groupby("cost_model", sort=False):
        color = colors[order.index(cost) % len(colors)]
        for stat, ls in (("p50", "-"), ("p90", "--")):
            pts = c[c["stat"] == stat].groupby("rate")["predicted_ms"].mean()
            ax.plot(pts.index, pts.to_numpy(), ls, color=color,
                    alpha=1.0 if stat == "p50" else 0.6, label=f"{cost} {stat}")  # fmt: skip
        band = c[(c["stat"] == "p50") & c["lo_ms"].notna()]
        if not band.empty:  # the headline's interval around its p50
            per_rate = band.groupby("rate")[["lo_ms", "hi_ms"]].mean()
            # on the log axis, an interval reaching 0 is drawn to the panel's floor (a
            # tenth of its smallest value), not to a floor that squeezes every curve flat
            values = pd.concat([sub["measured_ms"], sub["predicted_ms"]])
            floor = 0.1 * float(values[values > 0].min())
            ax.fill_between(per_rate.index, per_rate["lo_ms"].clip(lower=floor),
                            per_rate["hi_ms"], color=color, alpha=0.15,
                            label=f"{cost} p50 interval")  # fmt: skip
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def draw_parity_chart(study: Study, table: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured, one panel per metric: each run's p50 (filled) and p90
    (hollow) under each cost model (a color each, a marker per run), the diagonal and a
    ±10% band; the headline's interval as a vertical bar where the table has one."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    metrics = closed_metrics(table)
    table = _of_study(study, table)
    closed = table[table["metric"].isin(metrics) & table["stat"].isin(["p50", "p90"])]
    fig = Figure(figsize=(4.2 * len(metrics), 4.6))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    costs = list(dict.fromkeys(closed["cost_model"]))
    runs = list(dict.fromkeys(closed["run"]))
    for ax, metric in zip(axes, metrics, strict=True):
        sub = closed[closed["metric"] == metric]
        for ci, cost in enumerate(costs):
            for ri, run in enumerate(runs):
                pts = sub[(sub["cost_model"] == cost) & (sub["run"] == run)]
                for stat, face in (("p50", colors[ci % len(colors)]), ("p90", "none")):
                    p = pts[pts["stat"] == stat]
                    if p.empty:
                        continue
                    x, y = p["measured_ms"].to_numpy(), p["predicted_ms"].to_numpy()
                    if p["lo_ms"].notna().any():
                        lo, hi = p["lo_ms"].to_numpy(dtype=float), p["hi_ms"].to_numpy(dtype=float)
                        ax.vlines(x, lo, hi, color=colors[ci % len(colors)], alpha=0.35, lw=3)
                    ax.scatter(
                        x,
                        y,
                        marker=markers[ri % len(markers)],
                        facecolors=face,
                        edgecolors=colors[ci % len(colors)],
                        s=36,
                        zorder=3,
                    )
        vals = sub[["measured_ms", "predicted_ms"]].to_numpy(dtype=float)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        lo, hi = vals.min() / 1.3, vals.max() * 1.3
        line = np.array([lo, hi])
        ax.plot(line, line, color="k", lw=0.8)
        ax.fill_between(line, line * 0.9, line * 1.1, color="k", alpha=0.08)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {metric.upper()} (ms)")
        ax.set_ylabel(f"predicted {metric.upper()} (ms)")
        ax.set_title(f"{metric.upper()} (p50 filled, p90 hollow)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    handles = [
        Line2D([], [], color=colors[i % len(colors)], marker="o", ls="", label=c)
        for i, c in enumerate(costs)
    ] + [
        Line2D([], [], color="gray", marker=markers[i % len(markers)], ls="", label=r)
        for i, r in enumerate(runs)
    ]
    handles.append(Line2D([], [], color="k", lw=6, alpha=0.08, label="±10% of measured"))
    axes[0].legend(handles=handles, fontsize=6, loc="upper left")
    fig.suptitle(study.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def page(
    study: Study,
    table: pd.DataFrame,
    goals: list[Goal],
    descriptions: dict[str, str],
    chart_name: str,
) -> str:
    lines = [
        f"# Validation: {study.title}",
        "",
        f"<!-- Generated by `{study.command}`; do not edit by hand. -->",
        "",
        "Each run's exact requests (arrival times, prompt and output lengths) are replayed "
        "through pagesim with the settings its server ran with, under each cost model below; "
        "every statistic is also in `validation.csv` (one row per run × cost model × metric × "
        "statistic, the run's role beside it). Error = predicted / measured − 1. Roles: *fit* "
        "(something was fitted on the run), *held_out* (nothing was fitted or chosen on it), "
        "*cross_launch* (held out, from another launch of the server)"
        + (
            ", *post_hoc* (a cost model chosen after a replay of the run had been seen: "
            "neither fitted on it nor held out)."
            if any(c.post_hoc for c in study.cost_models)
            else "."
        ),
        "",
        "Cost models:",
        "",
    ]
    for c in study.cost_models:
        mark = " (headline)" if c.headline else ""
        lines.append(
            f"- **{c.name}**{mark}: {descriptions.get(c.name, '')}{'. ' + c.note if c.note else ''}"
        )
    lines += [
        "",
        f"![predicted vs measured]({chart_name})",
        "",
        "## Goals (headline cost model)",
        "",
        *goal_lines(goals),
        "",
        "## Runs",
        "",
        *runs_table(study),
        *failed_lines(study),
        "",
        *study.sections,
        "",
        "## Per run (ms)",
        "",
        *stats_table(table),
        "",
        "## Errors (predicted / measured − 1)",
        "",
        *errors_table(table),
        "",
    ]
    return "\n".join(lines)
