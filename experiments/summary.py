"""summary.md: the headline numbers, the paper's numbers beside them, the charts.

Where the experiment names a ``paper_figure`` found in ``paper_targets.yaml`` (the
paper's numbers, copied with their source), each paper value is shown beside the
simulated one and the difference (simulated − paper, in the paper's unit). A
target whose point or metric the run does not have is listed as missing, never
left out. Sections say what the numbers rest on: *Requests* (per point, how
many the workload filters dropped and why, how many the scheduler rejected and why,
and the warnings of runs that lost too many), *Workload tables* (only when a table
workload read a table that is not the shipped one: which, its rows and provenance)
and *Step costs* (the cost model kind, the profile's identity and the cost model's
full description).
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pydantic import Field

from pagesim.experiments.mdtable import fmt as _fmt
from pagesim.experiments.mdtable import table as _table
from pagesim.experiments.outputs import atomic_write_text
from pagesim.experiments.paper_checks import (
    BestCheck,
    CheckRow,
    Comparison,
    OrderCheck,
    best_rows,
    comparison_row,
    order_rows,
)
from pagesim.experiments.paper_headline import HeadlineSpec, SustainedSpec
from pagesim.experiments.spec import ExperimentSpec
from pagesim.specbase import StrictSpec

HEADLINE_COLUMNS = (
    "throughput_req_s",
    "request_goodput",
    "normalized_latency_s_per_tok",
    "avg_batch_size",
    "mem_token_frac",
    "num_preemptions",
    "num_finished",
    "num_rejected",
)


class RatioTarget(StrictSpec):
    """numerator's ``metric`` over denominator's, at the points matching ``where``; with
    ``over`` (a swept column), each side's largest ``metric`` over that column's values
    (a throughput's plateau: what the system sustains)."""

    numerator: str
    denominator: str
    metric: str
    value: float
    where: dict[str, Any] = Field(default_factory=dict)
    over: str | None = None


class PaperTarget(StrictSpec):
    """A figure's numbers (``points``, ``ratios``), its shape (``order``,
    ``comparisons``, ``best``: see ``paper_checks.py``; ``order`` may be a list of
    orders, each checked, for a figure with two variants of one system) and ``cause``:
    why pagesim's numbers differ from the paper's, as the people who ran it found
    (shown as written)."""

    source: str
    scale: float = 1.0
    points: dict[str, dict[str, float]] = Field(default_factory=dict)
    ratios: list[RatioTarget] = Field(default_factory=list)
    order: OrderCheck | list[OrderCheck] | None = None
    comparisons: list[Comparison] = Field(default_factory=list)
    best: BestCheck | None = None
    sustained: SustainedSpec | None = None
    cause: str = ""

    def check_rows(self, results: pd.DataFrame) -> list[CheckRow]:
        """Every shape check of this figure on ``results`` (see ``paper_checks.py``)."""
        rows = []
        orders = self.order if isinstance(self.order, list) else [self.order]
        for order in orders:
            if order is not None:
                rows += order_rows(order, results)
        rows += [comparison_row(c, results) for c in self.comparisons]
        if self.best is not None:
            rows += best_rows(self.best, results)
        return rows


#: Entries of paper_targets.yaml that are not a figure's numbers: the headline comparison
#: (``paper_headline.py``) and the figures the suite does not simulate, with the reason.
HEADLINE_KEY = "headline"
NOT_SIMULATED_KEY = "not_simulated"


def _targets_doc() -> dict[str, Any]:
    text = resources.files("pagesim.experiments").joinpath("paper_targets.yaml").read_text()
    return yaml.safe_load(text)


def paper_targets() -> dict[str, PaperTarget]:
    """The shipped paper numbers, by figure key."""
    return {
        key: PaperTarget.model_validate(doc)
        for key, doc in _targets_doc().items()
        if key not in (HEADLINE_KEY, NOT_SIMULATED_KEY)
    }


def paper_headline() -> HeadlineSpec:
    """The headline comparison's bounds and the paper's claims (``paper_headline.py``)."""
    return HeadlineSpec.model_validate(_targets_doc()[HEADLINE_KEY])


def not_simulated() -> dict[str, str]:
    """Figure -> why the suite does not simulate it."""
    return {str(k): " ".join(str(v).split()) for k, v in _targets_doc()[NOT_SIMULATED_KEY].items()}


def _simulated(
    results: pd.DataFrame,
    label: str,
    metric: str,
    where: dict[str, Any] | None = None,
    over: str | None = None,
) -> float | None:
    rows = results[results["label"].astype(str) == label]
    for column, value in (where or {}).items():
        if column not in rows.columns:
            return None
        rows = rows[rows[column] == value]
    columns = metric.split("+")
    if rows.empty or any(c not in results.columns for c in columns):
        return None
    if over is not None:
        if over not in rows.columns:
            return None
        return float(sum(rows[c] for c in columns).max())
    return float(sum(rows.iloc[0][c] for c in columns))


def comparison_lines(target: PaperTarget, results: pd.DataFrame) -> list[str]:
    """The paper's numbers beside the results'. A target may name its points in several
    layouts (the system alone, or the system and the rate): the labels of a layout these
    results do not use are not "missing" when another layout's labels are here."""
    rows, missing = [], []
    present = set(results["label"].astype(str)) if "label" in results.columns else set()
    any_present = any(label in present for label in target.points)
    for label, metric_to_value in target.points.items():
        if any_present and label not in present:
            continue
        for metric, paper in metric_to_value.items():
            sim = _simulated(results, label, metric)
            if sim is None:
                missing.append(f"{label} / {metric}")
                continue
            sim *= target.scale
            rows.append([label, metric, paper, sim, sim - paper])
    for ratio in target.ratios:
        num = _simulated(results, ratio.numerator, ratio.metric, ratio.where, ratio.over)
        den = _simulated(results, ratio.denominator, ratio.metric, ratio.where, ratio.over)
        if num is None or den is None or den == 0:
            missing.append(f"{ratio.numerator} / {ratio.denominator} ({ratio.metric})")
            continue
        where = ", ".join(f"{k}={v}" for k, v in ratio.where.items())
        metric = f"largest {ratio.metric} over {ratio.over}" if ratio.over else ratio.metric
        name = f"{metric} ratio vs {ratio.denominator}" + (f" at {where}" if where else "")
        rows.append([ratio.numerator, name, ratio.value, num / den, num / den - ratio.value])
    lines = [f"Source: {target.source}.", ""]
    if rows or missing:
        lines += _table(["point", "metric", "paper", "simulated", "simulated − paper"], rows)
    if missing:
        lines += ["", "Not in these results (so not compared): " + "; ".join(missing) + "."]
    checks = target.check_rows(results)
    if checks:
        lines += ["", "The paper's shape, checked on these results:", ""]
        lines += _table(
            ["check", "where", "pagesim", "holds"],
            [[c.check, c.where, c.values, c.verdict] for c in checks],
        )
    if target.cause.strip():
        lines += ["", f"Why pagesim differs: {' '.join(target.cause.split())}"]
    return lines


def _column(results: pd.DataFrame, name: str, default: Any = "") -> list[Any]:
    return results[name].tolist() if name in results.columns else [default] * len(results)


def accounting_lines(results: pd.DataFrame, warnings: list[str]) -> list[str]:
    """The Requests section: dropped (with their share of the candidates the filters
    examined) and rejected per point, with the reasons."""
    header = ["point", "label", "finished", "dropped (share)", "why dropped", "rejected",
              "why rejected"]  # fmt: skip
    rows = []
    for p, label, fin, drop, share, why_d, rej, why_r in zip(
        results["point"], results["label"], _column(results, "num_finished", math.nan),
        _column(results, "num_dropped", math.nan), _column(results, "dropped_share", math.nan),
        _column(results, "dropped_reasons"), _column(results, "num_rejected", math.nan),
        _column(results, "rejected_reasons"), strict=True,
    ):  # fmt: skip
        dropped = _fmt(drop) + ("" if math.isnan(share) else f" ({share:.1%})")
        rows.append([p, label, fin, dropped, why_d or "-", rej, why_r or "-"])
    lines = _table(header, rows)
    if warnings:
        lines += ["", *[f"- warning: {w}" for w in warnings]]
    return lines


def workload_tables(results: pd.DataFrame) -> list[str]:
    """The distinct ``workload_table`` notes: tables read that are not the shipped ones."""
    texts = [t for cell in _column(results, "workload_table") for t in str(cell).split(" | ")]
    return [t for t in dict.fromkeys(texts) if t and t != "nan"]


def step_cost_lines(results: pd.DataFrame) -> list[str]:
    """The Step costs section: cost model kind, profile identity, description."""
    if "cost_model" not in results.columns:
        return ["Not recorded: the simulate function that produced these runs gave no cost model."]
    triples = dict.fromkeys(
        zip(
            _column(results, "cost_model"), _column(results, "cost_model_profile"),
            _column(results, "cost_model_description"), strict=True,
        )
    )  # fmt: skip
    return [
        f"- **{kind}**: {profile}. {description}".rstrip() for kind, profile, description in triples
    ]


#: a knee: the first rate at which normalized latency exceeds this many times its value at
#: the lowest rate (a reading, not a property of the system: notebook 02 explains it)
KNEE_FACTOR = 2.0


def _series_of(chart, results: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    series = chart.series
    if series is None:
        for candidate in ("allocator.kind", "scheduler.kind"):
            if candidate in results.columns and results[candidate].nunique() > 1:
                series = candidate
                break
    if series is None or series not in results.columns:
        return [("all", results)]
    return [(str(k), results[results[series] == k]) for k in results[series].drop_duplicates()]


def chart_caption(chart, results: pd.DataFrame) -> str:
    """One line saying what a chart shows, read off the results (the knee per system,
    the best goodput, the memory held), or "" where there is nothing to read."""
    rate = chart.x or "arrivals.rate_req_s"
    if rate not in results.columns:
        return ""  # a caption reads the chart's own x; none to read
    unit = "req/s" if rate == "arrivals.rate_req_s" else f"({rate})"

    def at(value) -> str:
        return f"{value:g}" if isinstance(value, int | float) else str(value)

    if chart.kind == "latency_vs_rate" and "normalized_latency_s_per_tok" in results.columns:
        parts = []
        for name, part in _series_of(chart, results):
            part = part.sort_values(rate)
            y = part["normalized_latency_s_per_tok"]
            over = part[y > KNEE_FACTOR * y.iloc[0]]
            parts.append(
                f"{name} at {at(over[rate].iloc[0])} {unit}"
                if len(over)
                else f"{name} none up to {at(part[rate].max())} {unit}"
            )
        return (
            f"Knee (normalized latency over {KNEE_FACTOR:g}x its value at the lowest {'rate' if unit == 'req/s' else rate}): "
            + "; ".join(parts)
            + "."
        )
    if chart.kind == "goodput_vs_rate" and "request_goodput" in results.columns:
        parts = []
        for name, part in _series_of(chart, results):
            best = part.loc[part["request_goodput"].idxmax()]
            parts.append(f"{name} {best['request_goodput']:.3g} req/s at {at(best[rate])} {unit}")
        return "Highest goodput under the SLOs: " + "; ".join(parts) + "."
    if chart.kind == "memory_breakdown" and "mem_token_frac" in results.columns:
        parts = [
            f"{label} {100 * v:.0f}%"
            for label, v in zip(results["label"], results["mem_token_frac"], strict=True)
        ]
        return "Share of the KV pool holding token states: " + "; ".join(parts) + "."
    if chart.kind == "memory_over_time":
        return "KV memory held (solid) and holding token states (dashed), one panel per point."
    if chart.kind == "batch_size" and "avg_batch_size" in results.columns:
        parts = [
            f"{label} {v:.1f}"
            for label, v in zip(results["label"], results["avg_batch_size"], strict=True)
        ]
        return "Average batch size (requests per step): " + "; ".join(parts) + "."
    return ""


def summary_text(
    spec: ExperimentSpec,
    results: pd.DataFrame,
    chart_paths: list[Path],
    chart_problems: list[str],
    warnings: list[str] | None = None,
) -> str:
    lines = [f"# {spec.name}", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    num_points = len(results)
    if spec.intervals is None:
        lines += [f"{num_points} point(s) × {len(spec.seeds)} seed(s) {spec.seeds}.", ""]
    else:
        iv = spec.intervals
        sources = sorted(set(results.get("interval_source", pd.Series(dtype=str))))
        lines += [
            f"{num_points} point(s) × {iv.replicates} replicates. Intervals: {iv.nominal:.0%} "
            f"(`<metric>_lo` / `_hi` in results.csv, bands on the charts), sources "
            f"{', '.join(iv.sources)}; widened by: {'; '.join(sources) or 'nothing'} "
            "(docs/intervals.md).",
            "",
        ]
    if chart_paths or chart_problems:
        lines += ["## Charts", ""]
        by_stem = {(c.file or c.kind): c for c in spec.charts}
        for path in chart_paths:
            chart = by_stem.get(path.stem)
            caption = chart_caption(chart, results) if chart is not None else ""
            lines += (
                [f"![{path.stem}]({path.name})", "", caption, ""]
                if caption
                else [
                    f"![{path.stem}]({path.name})",
                    "",
                ]
            )
        lines += [f"- {problem}" for problem in chart_problems]
        if chart_problems:
            lines.append("")
    lines += ["## Results", ""]
    swept = list(spec.sweep.swept_paths)
    headline = [c for c in HEADLINE_COLUMNS if c in results.columns]
    header = ["point", "label", *swept, *headline]
    lines += _table(header, results[header].values.tolist())
    lines += ["", "## Requests", ""] + accounting_lines(results, list(warnings or []))
    tables = workload_tables(results)
    if tables:
        lines += ["", "## Workload tables", "", "Requests were drawn from tables that are not "
                  "the ones shipped with pagesim:", ""] + [f"- {t}" for t in tables]  # fmt: skip
    lines += ["", "## Step costs", ""] + step_cost_lines(results)
    if spec.paper_figure is not None:
        lines += ["", f"## Paper comparison ({spec.paper_figure})", ""]
        targets = paper_targets()
        if spec.paper_figure in targets:
            lines += comparison_lines(targets[spec.paper_figure], results)
        else:
            lines += [
                "The paper gives no numbers for this figure in paper_targets.yaml; compare the charts by eye."
            ]
    return "\n".join(lines) + "\n"


def write_summary(
    spec: ExperimentSpec,
    results: pd.DataFrame,
    out_dir: Path,
    chart_paths: list[Path],
    chart_problems: list[str],
    warnings: list[str] | None = None,
) -> None:
    atomic_write_text(
        out_dir / "summary.md", summary_text(spec, results, chart_paths, chart_problems, warnings)
    )
