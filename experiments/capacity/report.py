"""A capacity search's outputs: the page, two CSVs and one chart.

- ``capacity.md``: the answer per configuration (the highest rate that passed and the
  lowest that failed above it, at the precision stated; a point the search could not
  bracket says where it stopped, never a rate), the statistics at capacity with their
  spread across seeds, GPUs and cost where ``--gpu-cost`` prices them (the cheapest point
  that meets the SLO named), the run's measured point, the rule by which a rate passes;
- ``capacity.csv``: one row per point, rate and statistic, in ``validation.csv``'s shape
  where it fits (``rate``, ``cost_model``, ``metric``, ``stat``, ``predicted`` with
  ``lo``/``hi`` the seeds' spread, ``measured`` for the run's own point), plus ``bound``,
  ``passed``, ``unit`` (``ms``, or ``fraction`` for goodput), the seeds and requests;
- ``capacities.csv``: one row per point, the search's answer;
- ``capacity.png``: each SLO statistic against the rate, one line per configuration, the
  SLO's bound as a line, each capacity marked, the measured point of a real run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.experiments.capacity.runner import Outcome
from pagesim.experiments.capacity.setup import MIX_NAME, Source, point_gpu
from pagesim.experiments.capacity.slo import bound_of

PAGE = "capacity.md"
ROWS = "capacity.csv"
SUMMARY = "capacities.csv"
CHART = "capacity.png"
RULE = (
    "a rate passes when every statistic, computed once on the requests of all seeds pooled, "
    "meets its bound (a request not served counts as infinitely late; ITL, which a run keeps "
    "pooled, passes when every seed's does)"
)


def planned_files(source: Source) -> list[str]:
    return [PAGE, ROWS, SUMMARY, CHART] + ([MIX_NAME] if source.mix is not None else [])


def _unit(name: str) -> str:
    return "fraction" if name == "goodput" else "ms"


def _label(name: str) -> str:
    if name == "goodput":
        return "goodput (fraction of requests meeting every bound)"
    metric, _, stat = name.partition("_")
    return f"{metric.upper()} {stat} (ms)"


def _fmt(value: float, name: str) -> str:
    if not np.isfinite(value):
        return "not served" if value == np.inf else "-"
    return f"{value:.1%}" if name == "goodput" else f"{value:,.4g}"


def rows_table(outcome: Outcome) -> pd.DataFrame:
    """``capacity.csv`` (module docstring)."""
    rows = []
    keys = list(outcome.points[0].values) if outcome.points else []
    for e in sorted(outcome.evaluations, key=lambda e: (e.point, e.rate)):
        point = outcome.points[e.point]
        for name, value in e.stats.items():
            seeds = np.asarray(e.per_seed[name], dtype=float)
            rows.append({"point": point.label, **point.values, "rate": e.rate,
                         "cost_model": outcome.cost_models[e.point], "metric": name.split("_")[0],
                         "stat": name.partition("_")[2] or "fraction", "unit": _unit(name),
                         "predicted": value, "bound": bound_of(outcome.slo, name),
                         "passed": e.passed, "lo": seeds.min(), "hi": seeds.max(),
                         "measured": np.nan, "seeds": len(outcome.seeds),
                         "requests": e.num_requests, "unserved": e.num_unserved})  # fmt: skip
    source = outcome.source
    if source.measured is not None:
        from pagesim.experiments.capacity.slo import statistic

        for name in outcome.slo.statistics:
            rows.append({"point": "measured", **dict.fromkeys(keys), "rate": source.measured_rate,
                         "cost_model": "", "metric": name.split("_")[0],
                         "stat": name.partition("_")[2] or "fraction", "unit": _unit(name),
                         "predicted": np.nan, "bound": bound_of(outcome.slo, name),
                         "passed": None, "lo": np.nan, "hi": np.nan,
                         "measured": statistic(outcome.slo, name, [source.measured]),
                         "seeds": 0, "requests": len(source.measured.requests),
                         "unserved": 0})  # fmt: skip
    return pd.DataFrame(rows)


def summary_table(outcome: Outcome, prices: dict[str, float]) -> pd.DataFrame:
    """``capacities.csv``: one row per point."""
    rows = []
    for point, search, gpus in zip(outcome.points, outcome.searches, outcome.gpus, strict=True):
        low, high = search.passing, search.failing
        bracketed = search.is_bracketed
        capacity = low if bracketed else np.nan
        row: dict[str, Any] = {"point": point.label, **point.values,
                               "capacity_req_s": capacity, "fails_req_s": high,
                               "bracketed": bracketed, "answer": search.answer(),
                               "precision": outcome.precision.text(), "monotone": search.is_monotone,
                               "rates_tried": len(search.tried), "gpus": gpus}  # fmt: skip
        gpu = point_gpu(outcome.source.base_doc, point)
        if prices:
            per_hour = gpus * prices[gpu] if gpu in prices else np.nan
            row["usd_per_hour"] = per_hour
            row["usd_per_hour_per_req_s"] = per_hour / capacity if capacity else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _cheapest(summary: pd.DataFrame) -> str:
    if "usd_per_hour_per_req_s" not in summary.columns:
        return ""
    priced = summary[np.isfinite(summary["usd_per_hour_per_req_s"].astype(float))]
    if priced.empty:
        return "No configuration both meets the SLO at a bracketed rate and has a price."
    best = priced.loc[priced["usd_per_hour_per_req_s"].astype(float).idxmin()]
    return (
        f"Cheapest configuration that meets the SLO: **{best['point']}**, "
        f"{best['usd_per_hour_per_req_s']:.3g} USD per hour per req/s of capacity "
        f"({best['gpus']} GPU(s) at {best['usd_per_hour']:.3g} USD/h holding "
        f"{best['capacity_req_s']:.4g} req/s)."
    )


def page_lines(outcome: Outcome, summary: pd.DataFrame) -> list[str]:
    """``capacity.md`` (module docstring)."""
    slo, source = outcome.slo, outcome.source
    names = slo.statistics
    lines = [
        f"# Capacity: {source.label}",
        "",
        f"SLO: {slo.text()}. Precision: {outcome.precision.text()} (the search stops when the "
        f"highest passing and lowest failing rates are that close). Seeds: {len(outcome.seeds)} "
        f"({', '.join(map(str, outcome.seeds))}); {RULE}.",
        *source.lines,
        "",
        "| configuration | capacity (req/s) | fails at (req/s) | rates tried | "
        + " | ".join(f"{_label(n)} at capacity [seeds]" for n in names)
        + " | GPUs |"
        + (" USD/h | USD/h per req/s |" if "usd_per_hour" in summary.columns else ""),
        "|---|---|---|---|"
        + "---|" * len(names)
        + "---|"
        + ("---|---|" if "usd_per_hour" in summary.columns else ""),
    ]
    for (i, search), row in zip(
        enumerate(outcome.searches), summary.to_dict("records"), strict=True
    ):
        at = outcome.at(i, search.passing) if search.is_bracketed else None
        cells = [
            f"{_fmt(at.stats[n], n)} [{_fmt(min(at.per_seed[n]), n)}-{_fmt(max(at.per_seed[n]), n)}]"
            if at is not None else "-"
            for n in names
        ]  # fmt: skip
        capacity = f"**{search.passing:.4g}**" if search.is_bracketed else search.answer()
        high = f"{search.failing:.4g}" if search.failing is not None else "-"
        cost = (
            f" {row['usd_per_hour']:.3g} | {row['usd_per_hour_per_req_s']:.3g} |"
            if "usd_per_hour" in row
            else ""
        )
        lines.append(
            f"| {row['point']} | {capacity} | {high} | {len(search.tried)} | "
            + " | ".join(cells)
            + f" | {row['gpus']} |"
            + cost
        )
    cheapest = _cheapest(summary)
    if cheapest:
        lines += ["", cheapest]
    lines += _measured_lines(outcome)
    odd = [
        p.label for p, s in zip(outcome.points, outcome.searches, strict=True) if not s.is_monotone
    ]
    if odd:
        lines += ["", f"Not monotone (a rate passed above one that failed; the capacity is the "
                  f"highest passing rate below the lowest failing one): {', '.join(odd)}."]  # fmt: skip
    lines += ["", f"![SLO statistics against the rate]({CHART})", "",
              f"Every rate simulated: `{ROWS}`; the answers: `{SUMMARY}`.", ""]  # fmt: skip
    return lines


def _measured_lines(outcome: Outcome) -> list[str]:
    source = outcome.source
    if source.measured is None:
        return []
    from pagesim.experiments.capacity.slo import passes, statistic

    parts, ok = [], True
    for name in outcome.slo.statistics:
        value = statistic(outcome.slo, name, [source.measured])
        ok &= passes(outcome.slo, name, value)
        parts.append(f"{_label(name).split(' (')[0]} {_fmt(value, name)}")
    return [
        "",
        f"The run as measured: {source.measured_rate:g} req/s, {', '.join(parts)}: "
        f"{'meets' if ok else 'does not meet'} the SLO.",
    ]


def draw_chart(outcome: Outcome, path: Path) -> Path:
    """``capacity.png`` (module docstring)."""
    from matplotlib.figure import Figure

    names = outcome.slo.statistics
    fig = Figure(figsize=(5.6 * len(names), 4.2), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    source = outcome.source
    for ax, name in zip(axes, names, strict=True):
        for i, (point, search) in enumerate(zip(outcome.points, outcome.searches, strict=True)):
            evals = sorted((e for e in outcome.evaluations if e.point == i), key=lambda e: e.rate)
            x = [e.rate for e in evals]
            y = [e.stats[name] for e in evals]
            line = ax.plot(x, y, marker="o", ms=4, label=point.label)[0]
            at = outcome.at(i, search.passing) if search.is_bracketed else None
            if at is not None:
                ax.plot([at.rate], [at.stats[name]], marker="*", ms=14, color=line.get_color(),
                        markeredgecolor="k", ls="none")  # fmt: skip
                ax.axvline(at.rate, color=line.get_color(), ls=":", lw=1)
        ax.axhline(bound_of(outcome.slo, name), color="tab:red", ls="--", lw=1.2, label="SLO")
        if source.measured is not None:
            from pagesim.experiments.capacity.slo import statistic

            value = statistic(outcome.slo, name, [source.measured])
            ax.plot([source.measured_rate], [value], marker="X", ms=10, color="k", ls="none",
                    label="measured run")  # fmt: skip
        if name != "goodput":
            ax.set_yscale("log")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(_label(name))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"Capacity: {source.label} (stars: each configuration's capacity)", fontsize=10)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def write_report(
    outcome: Outcome, out_dir: Path, prices: dict[str, float] | None = None
) -> list[str]:
    """Every output file (module docstring); their names."""
    from pagesim.experiments.outputs import atomic_write_text, write_csv

    summary = summary_table(outcome, prices or {})
    write_csv(rows_table(outcome), out_dir / ROWS)
    write_csv(summary, out_dir / SUMMARY)
    atomic_write_text(out_dir / PAGE, "\n".join(page_lines(outcome, summary)))
    draw_chart(outcome, out_dir / CHART)
    return planned_files(outcome.source)
