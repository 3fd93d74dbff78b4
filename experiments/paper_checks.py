"""The paper's qualitative claims about a figure, checked on an experiment's results.

Most of the paper's figures are curves, not numbers: latency against request rate per
system, latency against block size. What a reproduction must show there is the
paper's *shape*. ``paper_targets.yaml`` states it beside each figure's numbers, and
this module checks it on ``results.csv`` (columns: ``label``, the swept paths, the
metrics):

- ``order``: the paper's order of systems. At every value of ``x`` that two systems
  both ran (within each group of the ``within`` columns), the system earlier in
  ``better_first`` has a ``metric`` no higher than a later one's; a later system's
  value up to ``tolerance`` (relative) below counts as a tie, which holds. Pairs with
  no common ``x`` are listed as not compared, never as holding.
- ``comparisons``: a sentence of the paper, as point ``lower`` having a lower
  ``metric`` than point ``higher`` (points by label).
- ``best``: the ``x`` with the lowest ``metric`` lies in [``low``, ``high``] (per
  ``within`` group, among the rows whose columns equal ``where``'s values).

There is no check of growth with load: a queue's latency grows with its load whatever
the memory manager, so such a row could not fail and would show nothing.

Every check gives a row (what, where, pagesim's values, holds: yes / no / not
compared); the rules are fixed here and in the YAML before any result is seen.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import Field

from pagesim.specbase import StrictSpec

LATENCY = "normalized_latency_s_per_tok"
RATE = "arrivals.rate_req_s"


class OrderCheck(StrictSpec):
    by: str
    better_first: list[str] = Field(min_length=2)
    x: str = RATE
    metric: str = LATENCY
    within: list[str] = Field(default_factory=list)
    tolerance: float = Field(default=0.0, ge=0)


class Comparison(StrictSpec):
    claim: str
    lower: str
    higher: str
    metric: str = LATENCY


class BestCheck(StrictSpec):
    claim: str
    x: str
    low: float
    high: float
    metric: str = LATENCY
    within: list[str] = Field(default_factory=list)
    where: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class CheckRow:
    """One checked statement: ``holds`` is None when the results cannot decide it."""

    check: str
    where: str
    values: str
    holds: bool | None

    @property
    def verdict(self) -> str:
        return "not compared" if self.holds is None else ("yes" if self.holds else "no")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _groups(results: pd.DataFrame, within: list[str]) -> list[tuple[str, pd.DataFrame]]:
    missing = [c for c in within if c not in results.columns]
    if missing:
        return [(f"column {', '.join(missing)} not in the results", results.iloc[0:0])]
    if not within:
        return [("", results)]
    out = []
    for key, part in results.groupby(within, sort=True):
        values = key if isinstance(key, tuple) else (key,)
        out.append((", ".join(f"{c}={_fmt(v)}" for c, v in zip(within, values, strict=True)), part))
    return out


def _has(results: pd.DataFrame, *columns: str) -> bool:
    return all(c in results.columns for c in columns)


def order_rows(check: OrderCheck, results: pd.DataFrame) -> list[CheckRow]:
    name = f"order ({' < '.join(check.better_first)} in {check.metric})"
    if not _has(results, check.by, check.x, check.metric):
        return [
            CheckRow(name, "", f"columns {check.by}, {check.x} or {check.metric} missing", None)
        ]
    rows = []
    for where, part in _groups(results, check.within):
        for better, worse in itertools.combinations(check.better_first, 2):
            a = part[part[check.by] == better].set_index(check.x)[check.metric]
            b = part[part[check.by] == worse].set_index(check.x)[check.metric]
            common = sorted(set(a.index) & set(b.index))
            prefix = f"{where}; " if where else ""
            if not common:
                rows.append(
                    CheckRow(f"{better} ≤ {worse}", f"{prefix}no common {check.x}", "-", None)
                )
                continue
            for x in common:
                va, vb = float(a[x]), float(b[x])
                holds = va <= vb * (1 + check.tolerance)
                rows.append(
                    CheckRow(
                        f"{better} ≤ {worse}", f"{prefix}{check.x}={_fmt(x)}",
                        f"{_fmt(va)} vs {_fmt(vb)}", holds,
                    )
                )  # fmt: skip
    return rows


def comparison_row(check: Comparison, results: pd.DataFrame) -> CheckRow:
    labels = results["label"].astype(str) if "label" in results.columns else pd.Series([])
    lower = results[labels == check.lower]
    higher = results[labels == check.higher]
    if lower.empty or higher.empty or check.metric not in results.columns:
        return CheckRow(check.claim, f"{check.lower} < {check.higher}", "point missing", None)
    a, b = float(lower.iloc[0][check.metric]), float(higher.iloc[0][check.metric])
    return CheckRow(
        check.claim, f"{check.lower} < {check.higher} ({check.metric})",
        f"{_fmt(a)} vs {_fmt(b)}", a < b,
    )  # fmt: skip


def best_rows(check: BestCheck, results: pd.DataFrame) -> list[CheckRow]:
    if not _has(results, check.x, check.metric, *check.where):
        return [CheckRow(check.claim, "", "columns missing", None)]
    for column, value in check.where.items():
        results = results[results[column] == value]
    rows = []
    for where, part in _groups(results, check.within):
        if part.empty:
            rows.append(CheckRow(check.claim, where, "no results", None))
            continue
        best = part.loc[part[check.metric].idxmin()]
        x = float(best[check.x])
        scope = ", ".join(
            [f"{c}={_fmt(v)}" for c, v in check.where.items()] + ([where] if where else [])
        )
        rows.append(
            CheckRow(
                check.claim,
                (f"{scope}; " if scope else "")
                + f"{check.x} in [{_fmt(check.low)}, {_fmt(check.high)}]",
                f"lowest {check.metric} {_fmt(float(best[check.metric]))} at {check.x}={_fmt(x)}",
                check.low <= x <= check.high,
            )
        )  # fmt: skip
    return rows
