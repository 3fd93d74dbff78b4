"""Comparing replays with the records: the rows of ``validation.csv``, saturation rates, goals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.replay import Replay
from pagesim.experiments.validation.study import Study, ValidationRun


def run_ids(study: Study, vrun: ValidationRun, cost_name: str | None = None) -> dict:
    """The columns of a validation.csv row that name the run (vcsv.rows' keywords); with
    ``cost_name``, the role that cost model's rows take (``post_hoc`` for one so chosen)."""
    cost = next((c for c in study.cost_models if c.name == cost_name), None)
    return {
        "dataset": study.dataset,
        "run": vrun.name,
        "rate": vrun.rate,
        "launch": vrun.launch,
        "role": cost.role(vrun) if cost is not None else vrun.role,
    }


def served_predictions(vrun: ValidationRun, requests: pd.DataFrame) -> pd.DataFrame:
    """The replay's requests that the real run served: a request that failed there is
    replayed (it loaded the server) but has no measured latency to compare with
    (``pagesim.records.run``: the rule for failed requests), so neither side counts it."""
    served = vrun.run.served
    if served.all():
        return requests
    keep = np.flatnonzero(served)
    return requests.set_index("request_id").loc[keep].reset_index()


def closed_loop_rows(study: Study, vrun: ValidationRun, cost_name: str, rep: Replay) -> list[dict]:
    """The replay's TTFT, TPOT, E2E statistics against the run's (served requests only)."""
    return vcsv.latency_rows(
        served_predictions(vrun, rep.requests),
        vrun.run.served_latencies(),
        **run_ids(study, vrun, cost_name),
        cost_model=cost_name,
        headline=cost_name == study.headline.name,
    )


def saturation_rate(rates: np.ndarray, ttft_p50_s: np.ndarray, threshold_s: float) -> float:
    """Where TTFT p50 first crosses ``threshold_s``, linearly interpolated between the
    runs' rates (runs at one rate averaged first); inf if it never does, the lowest rate
    if it already does there."""
    per_rate = pd.Series(np.asarray(ttft_p50_s, dtype=float)).groupby(np.asarray(rates)).mean()
    r, t = per_rate.index.to_numpy(dtype=float), per_rate.to_numpy()
    above = np.flatnonzero(t >= threshold_s)
    if len(above) == 0:
        return float("inf")
    i = above[0]
    if i == 0:
        return float(r[0])
    frac = (threshold_s - t[i - 1]) / (t[i] - t[i - 1])
    return float(r[i - 1] + frac * (r[i] - r[i - 1]))


def saturation_rates(table: pd.DataFrame, launch: str, threshold_s: float) -> dict[str, float]:
    """Per source (``measured`` and each cost model), the saturation rate of ``launch``'s runs."""
    rows = table[
        (table["launch"] == launch) & (table["metric"] == "ttft") & (table["stat"] == "p50")
    ]
    out: dict[str, float] = {}
    first = rows[rows["cost_model"] == rows["cost_model"].iloc[0]]
    out["measured"] = saturation_rate(
        first["rate"].to_numpy(), first["measured_ms"].to_numpy() / 1e3, threshold_s
    )
    for cost, sub in rows.groupby("cost_model", sort=False):
        out[str(cost)] = saturation_rate(
            sub["rate"].to_numpy(), sub["predicted_ms"].to_numpy() / 1e3, threshold_s
        )
    return out


@dataclass(frozen=True)
class Goal:
    """One target of a validation, and whether it is met."""

    text: str
    #: None: nothing to score (no run in the goal's regime or role)
    met: bool | None
    detail: str


def worst(errors: pd.Series) -> float:
    """The error of largest magnitude (signed)."""
    e = errors.dropna()
    return float(e.iloc[int(np.argmax(np.abs(e.to_numpy())))]) if len(e) else float("nan")


def within_goal(table: pd.DataFrame, text: str, bound: float, *, label: str = "run") -> Goal:
    """All errors of ``table``'s rows within ``bound``; the detail lists them."""
    if table.empty:
        return Goal(text, None, "not scored: no run to check")
    w = worst(table["error"])
    detail = ", ".join(f"{r[label]} {r['error']:+.1%}" for r in table.to_dict("records"))
    return Goal(text, bool(np.all(np.abs(table["error"]) <= bound)), f"worst {w:+.1%} ({detail})")
