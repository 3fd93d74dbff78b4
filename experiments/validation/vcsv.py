"""``validation.csv``: every validation's results in one format.

One row per run x cost model x metric x statistic::

    dataset, run, rate, launch, role, cost_model, headline, metric, stat,
    predicted_ms, measured_ms, error

- ``role``: ``fit`` (something was fitted on the run), ``held_out`` (nothing was fitted or
  chosen on it), ``cross_launch`` (held out, and from another launch of the server than the
  fit runs), ``post_hoc`` (a cost model chosen after a replay of the run had been seen:
  neither fitted on it nor held out); ``headline``: true for the cost model the report
  recommends;
- ``metric``: ``ttft``, ``tpot``, ``e2e`` (the replay against the records, closed loop;
  ``itl`` where a dataset reports only the client's inter-token latency),
  ``decode_given_concurrency`` and ``ttft_given_state`` (each request's decode time and TTFT
  predicted from the measured concurrency, the scheduler taken out: the step cost's
  error alone, where the dataset allows; on a V1 server's records, each request's decode
  time priced by the cost model on the batches of the ``recorded-steps`` replay);
  ``stat``: ``p50``, ``p90``, ``mean``;
- ``cost_model`` ``recorded-steps``: not a prediction but the run replayed with every step
  lasting what the real server's steps lasted then, read off its records
  (``calibrate/step_times.py``): its errors are the scheduler's (and the pool's) alone;
- ``error`` = predicted / measured − 1;
- ``lo_ms``, ``hi_ms``, ``covered``: the interval around the prediction (the headline cost
  model's closed-loop rows, where the dataset makes intervals: ``intervals.py``; and a
  dataset's own fitted cost model where its page says how, e.g. the vLLM 0.19 runs'
  ``kernels+serving-half``) and whether it holds the measured value; empty elsewhere.

Times in ms. A user's own result is one more dataset: the same columns, the same meaning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = (
    "dataset",
    "run",
    "rate",
    "launch",
    "role",
    "cost_model",
    "headline",
    "metric",
    "stat",
    "predicted_ms",
    "measured_ms",
    "error",
    "lo_ms",
    "hi_ms",
    "covered",
)
ROLES = ("fit", "held_out", "cross_launch", "post_hoc")
#: the role of every row of a cost model chosen after a replay of its runs was seen
POST_HOC = "post_hoc"
METRICS = ("ttft", "tpot", "e2e")
OPEN_LOOP_METRICS = ("decode_given_concurrency", "ttft_given_state")
STATS = ("p50", "p90", "mean")
#: the cost model whose steps last what the real run's did (module docstring)
RECORDED_STEPS = "recorded-steps"
FILE_NAME = "validation.csv"


def statistic(values: np.ndarray, stat: str) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return float("nan")
    if stat == "mean":
        return float(v.mean())
    return float(np.percentile(v, float(stat[1:])))


def latency_rows(predicted: pd.DataFrame, measured: pd.DataFrame, **ids) -> list[dict]:
    """:func:`rows` for every metric of :data:`METRICS`, from two per-request tables with
    ``<metric>_s`` columns (a replay's ``requests``, ``MeasuredRun.latencies()``); ``ids``
    are :func:`rows`' other keywords."""
    out = []
    for metric in METRICS:
        out += rows(
            **ids,
            metric=metric,
            predicted_s=predicted[f"{metric}_s"].to_numpy(dtype=float),
            measured_s=measured[f"{metric}_s"].to_numpy(dtype=float),
        )
    return out


def rows(
    *,
    dataset: str,
    run: str,
    rate: float,
    launch: str,
    role: str,
    cost_model: str,
    headline: bool,
    metric: str,
    predicted_s: np.ndarray,
    measured_s: np.ndarray,
) -> list[dict]:
    """The rows of one run x cost model x metric: each statistic of the predicted and the
    measured per-request values (s), in ms."""
    out = []
    for stat in STATS:
        pred = statistic(predicted_s, stat) * 1e3
        meas = statistic(measured_s, stat) * 1e3
        out.append(
            {
                "dataset": dataset,
                "run": run,
                "rate": rate,
                "launch": launch,
                "role": role,
                "cost_model": cost_model,
                "headline": headline,
                "metric": metric,
                "stat": stat,
                "predicted_ms": pred,
                "measured_ms": meas,
                "error": pred / meas - 1 if meas > 0 else float("nan"),
            }
        )
    return out


def frame(all_rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(all_rows, columns=list(COLUMNS))


def write(table: pd.DataFrame, folder: Path) -> Path:
    path = Path(folder) / FILE_NAME
    table.to_csv(path, index=False, float_format="%.6g")
    return path


def read(path: str | Path) -> pd.DataFrame:
    """A validation.csv, checked for its columns."""
    from pagesim.errors import DataError

    table = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise DataError(f"{path}: not a validation.csv (no column {missing[0]!r})")
    return table
