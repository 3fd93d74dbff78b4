"""Intervals around the validation's predictions, and how often they hold the real value.

Scenario (``docs/intervals.md``): each run is replayed ``replicates`` times under the
headline cost model, each replicate one draw of the sources of spread
(:mod:`pagesim.simulator.costmodel.spread`: a multiplier per kernel term from its
held-out residuals, one on the serving path from its fit residuals, drawn once per run).
For each statistic (TTFT, TPOT, E2E; p50, p90, mean) the replicates' central ``nominal``
range is the *raw* interval; its centre ``c`` and half-width ``h`` define the score of a
real value ``y``, ``|y - c| / h``.

The *conformal factor* ``k`` widens the interval to ``c ± k h`` so that it holds the real
value ``nominal`` of the time: ``k`` is the ``ceil((n + 1) nominal) / n`` empirical quantile
of the scores of ``n`` calibration statistics (split conformal prediction). It is fitted
leave-one-run-out: the statistics of each run are checked with the factor fitted on all the
other runs (never on its own), so every run's coverage is a held-out figure; the factor the
page reports for future use is the one fitted on every run. Coverage (the share of real
statistics inside) and the mean width (relative to the real value) are reported per regime:
below the measured saturation rate and above it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.replay import replay
from pagesim.experiments.validation.study import Study


def replicate_table(
    study: Study,
    nominal: float,
    replicates: int,
    sources: list[str],
    seed: int,
    per_request: dict[tuple[str, str], np.ndarray] | None = None,
    *,
    progress: bool = False,
):
    """Per run x metric x stat: the raw interval (lo, hi) of the headline cost model. With
    ``per_request``, also each request's replicated values (s) into it, by (run, metric):
    an array of replicates x requests, in the records' order (:func:`request_coverage`).
    ``progress``: a bar over the replicates."""
    cost = study.headline
    lo_q, hi_q = (1 - nominal) / 2, 1 - (1 - nominal) / 2
    rows = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(study.runs) * replicates, desc="interval replicates", unit="run")
    for vrun in study.runs:
        if "seeds" in sources and vrun.redraw is None:
            raise ValueError(
                f"{vrun.name}: the intervals' source 'seeds' needs requests that can be drawn "
                "again; this run's records fix them (use 'cost' or 'serving')"
            )
        values: dict[tuple[str, str], list[float]] = {}
        for r in range(replicates):
            settings = {
                **vrun.settings,
                "seed": seed,
                "spread": {"sources": sources, "replicate": r},
            }
            trace = vrun.redraw(r) if "seeds" in sources else vrun.trace  # type: ignore[misc]
            rep = replay(replace(vrun, settings=settings, trace=trace), cost, every_step=False)
            if bar is not None:
                bar.update()
            aligned = per_request is not None and _aligned(vrun, rep.requests)
            for metric in vcsv.METRICS:
                v = rep.requests[f"{metric}_s"].to_numpy(dtype=float)
                if aligned:
                    per_request.setdefault((vrun.name, metric), []).append(v)
                for stat in vcsv.STATS:
                    values.setdefault((metric, stat), []).append(vcsv.statistic(v, stat) * 1e3)
        if per_request is not None:
            for metric in vcsv.METRICS:
                if (vrun.name, metric) in per_request:
                    per_request[(vrun.name, metric)] = np.vstack(per_request[(vrun.name, metric)])
        for (metric, stat), vs in values.items():
            arr = np.asarray(vs)
            rows.append(
                {
                    "run": vrun.name,
                    "metric": metric,
                    "stat": stat,
                    "raw_lo_ms": float(np.quantile(arr, lo_q)),
                    "raw_hi_ms": float(np.quantile(arr, hi_q)),
                }
            )
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows)


def conformal_factor(scores: np.ndarray, nominal: float) -> float:
    """The split-conformal quantile of ``scores`` at ``nominal`` (inf if too few)."""
    s = np.sort(np.asarray(scores, dtype=float))
    n = len(s)
    rank = math.ceil((n + 1) * nominal)
    return float(s[rank - 1]) if 0 < rank <= n else math.inf


def scores(table: pd.DataFrame) -> np.ndarray:
    centre = (table["raw_lo_ms"] + table["raw_hi_ms"]) / 2
    half = np.maximum((table["raw_hi_ms"] - table["raw_lo_ms"]) / 2, 1e-12)
    return (np.abs(table["measured_ms"] - centre) / half).to_numpy()


def calibrate(
    raw: pd.DataFrame,
    measured: pd.DataFrame,
    nominal: float,
    groups: dict[str, str] | None = None,
) -> tuple[pd.DataFrame, float]:
    """Each statistic's conformal interval, its factor fitted on the *other* runs (with
    ``groups``, run -> group: on the other groups' runs, a group held out whole); and the
    factor fitted on every run. ``measured``: the validation table's rows (measured_ms)."""
    t = raw.merge(
        measured[["run", "metric", "stat", "measured_ms", "rate"]], on=["run", "metric", "stat"]
    )
    t["score"] = scores(t)
    group = t["run"].map(groups) if groups else t["run"]
    out = []
    for run, sub in t.groupby("run", sort=False):
        own = groups[run] if groups else run
        k = conformal_factor(t.loc[group != own, "score"].to_numpy(), nominal)
        centre = (sub["raw_lo_ms"] + sub["raw_hi_ms"]) / 2
        half = (sub["raw_hi_ms"] - sub["raw_lo_ms"]) / 2
        out.append(
            sub.assign(
                factor=k,
                lo_ms=np.maximum(centre - k * half, 0.0),  # a latency is never negative
                hi_ms=centre + k * half,
            )
        )
    result = pd.concat(out, ignore_index=True)
    result["covered"] = (result["lo_ms"] <= result["measured_ms"]) & (
        result["measured_ms"] <= result["hi_ms"]
    )
    result["raw_covered"] = (result["raw_lo_ms"] <= result["measured_ms"]) & (
        result["measured_ms"] <= result["raw_hi_ms"]
    )
    return result, conformal_factor(t["score"].to_numpy(), nominal)


def coverage_table(result: pd.DataFrame, saturation_req_s: float) -> pd.DataFrame:
    """Per regime (below / above the measured saturation): statistics, raw and conformal
    coverage, mean relative widths."""
    regime = np.where(result["rate"] < saturation_req_s, "below saturation", "above saturation")
    rows = []
    for name in ("below saturation", "above saturation"):
        sub = result[regime == name]
        if sub.empty:
            continue
        rows.append(
            {
                "regime": name,
                "statistics": len(sub),
                "raw coverage": float(sub["raw_covered"].mean()),
                "raw width": float(
                    ((sub["raw_hi_ms"] - sub["raw_lo_ms"]) / sub["measured_ms"]).mean()
                ),
                "coverage": float(sub["covered"].mean()),
                "width": float(((sub["hi_ms"] - sub["lo_ms"]) / sub["measured_ms"]).mean()),
            }
        )
    return pd.DataFrame(rows)


def _aligned(vrun, requests: pd.DataFrame) -> bool:
    """Whether the replay's requests are the records' in the same order (same prompt and
    output lengths row by row): only then are per-request intervals compared."""
    table = vrun.run.table
    return len(table) == len(requests) and bool(
        np.array_equal(table["prompt_len"].to_numpy(), requests["prompt_len"].to_numpy())
        and np.array_equal(table["output_len"].to_numpy(), requests["output_len"].to_numpy())
    )


def request_coverage(
    per_request: dict[tuple[str, str], np.ndarray],
    measured: dict[tuple[str, str], np.ndarray],
    rates: dict[str, float],
    nominal: float,
    saturation_req_s: float,
) -> pd.DataFrame:
    """Per regime x metric: how many real requests lie inside their own interval. Each
    request's raw interval is the replicates' central ``nominal`` range of its value, widened
    by the conformal factor fitted on the other runs' requests (all metrics pooled), as for
    the statistics. Requests without a value on either side (a one-token output's TPOT) are
    left out. Columns: regime, metric, requests, raw coverage, coverage, median width
    (relative to the real value), factor range."""
    lo_q, hi_q = (1 - nominal) / 2, 1 - (1 - nominal) / 2
    parts = []
    for (run, metric), reps in per_request.items():
        y = measured[(run, metric)]
        lo, hi = np.quantile(reps, lo_q, axis=0), np.quantile(reps, hi_q, axis=0)
        ok = np.isfinite(y) & np.isfinite(lo) & np.isfinite(hi) & (y > 0)
        parts.append(
            pd.DataFrame({"run": run, "metric": metric, "y": y[ok], "lo": lo[ok], "hi": hi[ok]})
        )
    if not parts:
        return pd.DataFrame()
    t = pd.concat(parts, ignore_index=True)
    centre, half = (t["lo"] + t["hi"]) / 2, np.maximum((t["hi"] - t["lo"]) / 2, 1e-12)
    t["score"] = np.abs(t["y"] - centre) / half
    factors = {
        run: conformal_factor(t.loc[t["run"] != run, "score"].to_numpy(), nominal)
        for run in t["run"].unique()
    }
    t["factor"] = t["run"].map(factors)
    t["covered"] = t["score"] <= t["factor"]
    t["raw_covered"] = t["score"] <= 1.0
    t["width"] = 2 * t["factor"] * half / t["y"]
    rate = t["run"].map(rates)
    t["regime"] = np.where(rate < saturation_req_s, "below saturation", "above saturation")
    rows = []
    for (regime, metric), sub in t.groupby(["regime", "metric"], sort=False):
        finite = sub["factor"].replace(np.inf, np.nan)
        rows.append(
            {
                "regime": regime,
                "metric": metric,
                "requests": len(sub),
                "raw coverage": float(sub["raw_covered"].mean()),
                "coverage": float(sub["covered"].mean()),
                "median width": float(sub["width"].replace(np.inf, np.nan).median()),
                "factors": f"{finite.min():.2f}-{finite.max():.2f}",
            }
        )
    order = {"below saturation": 0, "above saturation": 1}
    return pd.DataFrame(rows).sort_values(
        by=["regime", "metric"], key=lambda c: c.map(order) if c.name == "regime" else c.map(
            {m: i for i, m in enumerate(vcsv.METRICS)}
        ), kind="stable"
    )  # fmt: skip
