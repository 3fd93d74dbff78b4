"""Run a planned grid on a backend and keep every measurement as one CSV row.

Columns: the case (term, kernel, shape_id, params as JSON, the parameters the report
selects on, and ``in_fit``: False for a row timed for the report only), every feature of
``costmodel.features`` (bytes, flops, blocks, seqs, tokens) and the timing statistics
(median_s, iqr_s, min_s, mean_s, num_repeats, is_converged; a budgeted run adds
``wall_s``, the seconds the row took to set up and time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from pagesim.calibrate.backend import Backend
from pagesim.calibrate.grid import Case
from pagesim.calibrate.tables import read_table
from pagesim.calibrate.timing import TimingPolicy
from pagesim.errors import DataError
from pagesim.files import atomic_write_text

MEASUREMENTS_CSV = "measurements.csv"
FEATURE_COLUMNS = ("bytes", "flops", "blocks", "seqs", "tokens")
SELECT_COLUMNS = (
    "batch",
    "block_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "context_mix",
    "model",
    "layer",
)
REQUIRED_COLUMNS = ("term", "kernel", "shape_id", *FEATURE_COLUMNS, "median_s", "iqr_s")


def case_row(case: Case) -> dict:
    row = {"term": case.term, "kernel": case.kernel, "shape_id": case.shape_id}
    row["in_fit"] = case.in_fit
    row["params_json"] = json.dumps(case.params, sort_keys=True)
    for key in SELECT_COLUMNS:
        row[key] = case.params.get(key)
    lens = case.params.get("context_lens")
    row["mean_context"] = sum(lens) / len(lens) if lens else None
    row["max_context"] = max(lens) if lens else None
    row.update(case.features.as_dict())
    return row


def run_plan(
    cases: Sequence[Case],
    backend: Backend,
    policy: TimingPolicy,
    on_progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    rows = []
    for i, case in enumerate(cases):
        stats = backend.time_case(case, policy)
        rows.append({**case_row(case), **stats.as_dict()})
        if on_progress is not None:
            on_progress(i + 1, len(cases))
    return pd.DataFrame(rows)


def save_measurements(df: pd.DataFrame, out_dir: Path) -> Path:
    return atomic_write_text(
        Path(out_dir) / MEASUREMENTS_CSV, df.to_csv(index=False, float_format="%.9g")
    )


def load_measurements(path: Path) -> pd.DataFrame:
    df = read_table(path, REQUIRED_COLUMNS, "the measurements `pagesim calibrate` writes")
    if (df["median_s"] <= 0).any() or df["median_s"].isna().any():
        bad = int(df.index[(df["median_s"] <= 0) | df["median_s"].isna()][0])
        raise DataError(f"{path}: row {bad + 2}: median_s must be a positive number")
    if "in_fit" not in df.columns:  # written before report-only rows existed: all fitted
        df["in_fit"] = True
    df["in_fit"] = df["in_fit"].astype(bool)
    return df
