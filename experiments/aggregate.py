"""From per-run summaries to ``results.csv``: one row per point, seeds aggregated.

Columns: ``point``, ``label``, the swept paths (dotted, in swept order),
``num_seeds``, then each metric of METRIC_COLUMNS except ``sim_wall_s``, then the
vLLM-named metrics (``simulator/vllm_metrics.py``, in vLLM's order), then the
simulator's ``extra`` values (sorted by name). With several seeds each value is the
mean over seeds and is followed by ``<name>_ci95``, the half-width of a 95%
Student-t confidence interval of that mean (t quantiles tabulated for up to 30
degrees of freedom; 1.96, the normal quantile, beyond). An ``extra`` value that
is text (where the step costs came from, why requests were dropped) is not
averaged: its column holds the seeds' distinct texts, joined by `` | ``.

Wall time is not deterministic, so ``sim_wall_s`` is kept out of ``results.csv``
(which is then the same bytes for the same file and seeds, whatever the executor)
and written per run to ``wall_times.csv`` instead.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from pagesim.simulator.result import METRIC_COLUMNS
from pagesim.simulator.vllm_metrics import is_vllm_column, vllm_column_order

WALL_COLUMN = "sim_wall_s"
#: Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..30.
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
NORMAL_975 = 1.96


def ci95_half_width(values: list[float]) -> float:
    """Half-width of the 95% t-interval of the mean of ``values`` (NaN for one value)."""
    n = len(values)
    if n < 2:
        return math.nan
    t = T_975[n - 2] if n - 1 <= len(T_975) else NORMAL_975
    return float(t * np.std(values, ddof=1) / math.sqrt(n))


def _cell(value: Any) -> Any:
    """A swept value as a CSV cell: scalars as they are, sections as canonical JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def metric_names(extras: list[dict[str, float]]) -> list[str]:
    """Metric columns of results.csv: METRIC_COLUMNS (less wall time), then the
    vLLM-named metrics in vLLM's order, then the other extra keys (sorted)."""
    names = {name for extra in extras for name in extra} - set(METRIC_COLUMNS)
    vllm_names = sorted((n for n in names if is_vllm_column(n)), key=vllm_column_order)
    extra_names = sorted(names - set(vllm_names))
    return [m for m in METRIC_COLUMNS if m != WALL_COLUMN] + vllm_names + extra_names


def results_table(
    point_rows: list[dict[str, Any]],
    point_to_seed_values: list[list[dict[str, float]]],
) -> pd.DataFrame:
    """The results table: ``point_rows[i]`` holds point i's leading columns
    (point, label, swept values); ``point_to_seed_values[i]`` its per-seed metric
    dicts (summary and extra merged)."""
    names = metric_names([v for seeds in point_to_seed_values for v in seeds])
    several = max(len(seeds) for seeds in point_to_seed_values) > 1
    text_names = {
        name for seeds in point_to_seed_values for s in seeds for name, v in s.items()
        if isinstance(v, str)
    }  # fmt: skip
    rows = []
    for leading, seeds in zip(point_rows, point_to_seed_values, strict=True):
        row = {key: _cell(value) for key, value in leading.items()}
        row["num_seeds"] = len(seeds)
        for name in names:
            if name in text_names:
                texts = [str(s.get(name, "")) for s in seeds]
                row[name] = " | ".join(dict.fromkeys(texts))
                continue
            values = [float(s.get(name, math.nan)) for s in seeds]
            row[name] = float(np.mean(values))
            if several:
                row[f"{name}_ci95"] = ci95_half_width(values)
        rows.append(row)
    return pd.DataFrame(rows)


#: the statistics an interval is given for: the latency and throughput columns, which
#: lead ``METRIC_COLUMNS`` (up to ``avg_batch_size``)
INTERVAL_METRICS = METRIC_COLUMNS[: METRIC_COLUMNS.index("avg_batch_size")]


def interval_factor(run_spec, nominal: float) -> tuple[float, str]:
    """The conformal factor a run's profile records for ``nominal`` coverage, and what it
    was fitted on (1 and "raw" when the profile records none for that coverage)."""
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    hw = run_spec.hardware
    calibration = resolve_profile(hw.profile, get_gpu(hw.gpu)).intervals
    if calibration is None or abs(calibration.nominal - nominal) > 1e-9:
        return 1.0, "raw (the profile records no conformal factor for this coverage)"
    return (
        calibration.factor,
        f"conformal factor {calibration.factor:.3g} ({calibration.fitted_on})",
    )


def with_interval_columns(results, point_to_seed_values, intervals, runs) -> pd.DataFrame:
    """``results`` with ``<metric>_lo`` / ``<metric>_hi`` after each interval metric: the
    replicates' central ``nominal`` range, widened about its centre by the point's profile's
    conformal factor (``interval_factor``), and ``interval_source`` per point."""
    lo_q = (1 - intervals.nominal) / 2
    first_run_of_point = {}
    for run in runs:
        first_run_of_point.setdefault(run.point.point_id, run)
    results = results.copy()
    factors = []
    for point_id in results["point"]:
        factors.append(interval_factor(first_run_of_point[point_id].spec, intervals.nominal))
    columns: dict[str, list[float]] = {}
    for metric in INTERVAL_METRICS:
        lows, highs = [], []
        for values, (k, _) in zip(point_to_seed_values, factors, strict=True):
            v = np.array([float(s.get(metric, math.nan)) for s in values])
            v = v[np.isfinite(v)]
            if not len(v):
                lows.append(math.nan)
                highs.append(math.nan)
                continue
            lo, hi = np.quantile(v, lo_q), np.quantile(v, 1 - lo_q)
            centre, half = (lo + hi) / 2, (hi - lo) / 2
            lows.append(float(centre - k * half))
            highs.append(float(centre + k * half))
        columns[f"{metric}_lo"], columns[f"{metric}_hi"] = lows, highs
    ordered = []
    for name in results.columns:
        ordered.append(name)
        if name in INTERVAL_METRICS:
            ordered += [f"{name}_lo", f"{name}_hi"]
    for name, values in columns.items():
        results[name] = values
    results["interval_source"] = [text for _, text in factors]
    return results[[*ordered, "interval_source"]]
