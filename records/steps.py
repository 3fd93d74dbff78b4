"""Per-engine-step records of a real vLLM server, from inference-sim's Parquet, into a
:class:`StepTable`.

inference-sim (GitHub ``inference-sim/inference-sim``, commit 9293b22, Apache-2.0:
``hypotheses/h-stepml/round4/idea-2-cycle-time-regression/h1-cycle-time-extraction/
output/enriched_steps.parquet``) traced vLLM 0.15.1's engine steps on H100 and joined
each with the inter-token interval it produced. One row a step, keyed by
``experiment_id``; the columns read and their names here (units in the names):

=============================  ======================  =================================
file                           here                    meaning
=============================  ======================  =================================
``experiment_id``              ``experiment``          the run the step belongs to
``step.id``                    ``step_id``             the engine's step counter
``step.ts_start_ns``, ``_end``  ``start_ns``, ``end_ns``  when the step began and ended
``queue.running_depth``        ``num_running``         requests running after scheduling
``queue.waiting_depth``        ``num_waiting``         requests waiting
``batch.num_prefill_reqs``     ``num_prefill_reqs``    requests prefilling in the step
``batch.num_decode_reqs``      ``num_decode_reqs``     requests decoding
``batch.prefill_tokens``       ``num_prefill_tokens``  prompt tokens computed
``batch.decode_tokens``        ``num_decode_tokens``   decode tokens computed
``batch.num_finished``         ``num_finished``        requests that finished
``batch.num_preempted``        ``num_preempted``       requests preempted
``kv.blocks_total_gpu``        ``kv_blocks_total``     the GPU KV pool, in blocks
``kv.blocks_free_gpu``         ``kv_blocks_free``      free blocks
``kv.usage_gpu_ratio``         ``kv_usage``            used fraction of the pool
``cycle_time_us``              ``cycle_time_us``       the matched inter-token interval
                                                       (NaN where none matched)
=============================  ======================  =================================

``step.duration_us`` is left out: it spans the scheduler's part of a step only (median
0.3-1.1 ms in the published file), not the GPU's; ``cycle_time_us`` is the step's time.
Each cell is checked (an error names the file, the row from 1 and the column as the
file names it): counts are integers from 0, a step ends after it starts,
``batch.scheduled_tokens`` is ``prefill_tokens + decode_tokens``, the free blocks are at
most the total, the usage a fraction, ``cycle_time_us`` missing exactly where
``matched_iti_count`` is 0 (where that column is there); ``model``, ``workload`` and
``tp``, one per experiment, go to ``meta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import integer_column, number_column
from pagesim.errors import DataError
from pagesim.records.run import sha256_of
from pagesim.workloads.lengthtable import MAX_TOKENS

#: file column -> this table's column, for the integer counts
COUNTS = {
    "step.id": "step_id",
    "step.ts_start_ns": "start_ns",
    "step.ts_end_ns": "end_ns",
    "queue.running_depth": "num_running",
    "queue.waiting_depth": "num_waiting",
    "batch.num_prefill_reqs": "num_prefill_reqs",
    "batch.num_decode_reqs": "num_decode_reqs",
    "batch.prefill_tokens": "num_prefill_tokens",
    "batch.decode_tokens": "num_decode_tokens",
    "batch.num_finished": "num_finished",
    "batch.num_preempted": "num_preempted",
    "kv.blocks_total_gpu": "kv_blocks_total",
    "kv.blocks_free_gpu": "kv_blocks_free",
}
REQUIRED = ("experiment_id", *COUNTS, "batch.scheduled_tokens", "kv.usage_gpu_ratio",
            "cycle_time_us")  # fmt: skip
OPTIONAL = ("matched_iti_count", "model", "workload", "tp")
#: the largest nanosecond clock reading: int64's range (292 years of nanoseconds)
MAX_NS = 2**63 - 1
#: the longest step, µs: an hour (a step takes milliseconds; anything longer is not one)
MAX_CYCLE_US = 3.6e9


@dataclass(frozen=True)
class StepTable:
    """A server's engine steps (module docstring), in the file's row order."""

    name: str
    table: pd.DataFrame
    sources: tuple[tuple[str, str], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def experiments(self) -> list[str]:
        return sorted(self.table["experiment"].unique())

    def of(self, experiment: str) -> pd.DataFrame:
        """One experiment's steps."""
        return self.table[self.table["experiment"] == experiment].reset_index(drop=True)


def recognises(path: Path) -> bool:
    """A ``.parquet`` file."""
    return path.is_file() and path.suffix == ".parquet"


def _frame(path: Path) -> pd.DataFrame:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`)") from None
    if not path.is_file():
        raise DataError(f"{path}: file not found (per-step records)")
    try:
        schema = pq.read_schema(path)
        names = list(schema.names)
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise DataError(f"{path}: column {repeated[0]!r} appears twice")
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise DataError(
                f"{path}: no column {missing[0]!r}; per-step records need {list(REQUIRED)}"
            )
        wanted = [c for c in (*REQUIRED, *OPTIONAL) if c in names]
        return pq.read_table(path, columns=wanted).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(
            f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:120]})"
        ) from None


def _ints(cells: pd.Series, column: str, where, high: int) -> np.ndarray:
    """Integers from 0 to ``high``: an integer column exactly (nanosecond clocks pass
    2**53), any other through :func:`~pagesim.columns.integer_column`."""
    if cells.dtype.kind in "iu":
        values = cells.to_numpy(dtype=np.int64)
        bad = values < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"{where(i)}: {column} must be an integer from 0, got {values[i]}")
        too_big = values > high
        if too_big.any():
            i = int(np.flatnonzero(too_big)[0])
            raise DataError(f"{where(i)}: {column} must be at most {high:,}, got {values[i]}")
        return values
    return integer_column(cells, column, where, low=0, high=high)


def _check(df: pd.DataFrame, out: dict[str, Any], path: Path) -> None:
    """The checks across columns (module docstring)."""

    def refuse(mask: np.ndarray, column: str, rule: str) -> None:
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise DataError(f"{path}: row {i + 1}: {column}: {rule}")

    refuse(out["end_ns"] < out["start_ns"], "step.ts_end_ns", "before step.ts_start_ns")
    scheduled = integer_column(df["batch.scheduled_tokens"], "batch.scheduled_tokens",
                               lambda i: f"{path}: row {i + 1}", low=0, high=MAX_TOKENS)  # fmt: skip
    refuse(scheduled != out["num_prefill_tokens"] + out["num_decode_tokens"],
           "batch.scheduled_tokens", "is not batch.prefill_tokens + batch.decode_tokens")  # fmt: skip
    refuse(out["kv_blocks_total"] < 1, "kv.blocks_total_gpu", "must be at least 1")
    refuse(out["kv_blocks_free"] > out["kv_blocks_total"], "kv.blocks_free_gpu",
           "more than kv.blocks_total_gpu")  # fmt: skip
    refuse((out["kv_usage"] < 0) | (out["kv_usage"] > 1), "kv.usage_gpu_ratio",
           "must be a fraction from 0 to 1")  # fmt: skip
    cycle = out["cycle_time_us"]
    refuse(np.isfinite(cycle) & ((cycle < 0) | (cycle > MAX_CYCLE_US)), "cycle_time_us",
           f"must be from 0 to {MAX_CYCLE_US:.0e} µs")  # fmt: skip
    if "matched_iti_count" in df.columns:
        matched = integer_column(df["matched_iti_count"], "matched_iti_count",
                                 lambda i: f"{path}: row {i + 1}", low=0, high=2**31)  # fmt: skip
        refuse(np.isnan(cycle) != (matched == 0), "cycle_time_us",
               "missing where matched_iti_count is not 0, or the reverse")  # fmt: skip
    keys = pd.DataFrame({"e": out["experiment"], "s": out["step_id"]})
    refuse(keys.duplicated().to_numpy(), "step.id", "repeats a step of its experiment")


def _experiments(df: pd.DataFrame, experiment: np.ndarray, path: Path) -> dict[str, dict]:
    """Per experiment: its model, workload and tp, where the file has them (one each)."""
    out: dict[str, dict] = {}
    columns = [c for c in ("model", "workload", "tp") if c in df.columns]
    for key in sorted(set(experiment.tolist())):
        rows = df[experiment == key]
        info = {}
        for col in columns:
            values = rows[col].unique()
            if len(values) != 1:
                raise DataError(f"{path}: experiment {key!r} has {len(values)} values of {col!r}")
            value = values[0]
            info[col] = value.item() if hasattr(value, "item") else value
        out[key] = info
    return out


def read_step_parquet(path: str | Path) -> StepTable:
    """inference-sim's per-step Parquet (module docstring) as a :class:`StepTable`."""
    path = Path(path)
    df = _frame(path)
    where = lambda i: f"{path}: row {i + 1}"  # noqa: E731
    if len(df) == 0:
        raise DataError(f"{path}: no steps")
    experiment = df["experiment_id"]
    bad = ~experiment.map(lambda v: isinstance(v, str) and bool(v.strip())).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where(i)}: experiment_id must be a name, got {experiment.iloc[i]!r}")
    numeric = [*COUNTS, "batch.scheduled_tokens", "kv.usage_gpu_ratio", "cycle_time_us"]
    for col in numeric:
        if df[col].dtype.kind not in "iuf":
            raise DataError(
                f"{where(0)}: {col} holds {df[col].dtype} cells (e.g. {df[col].iloc[0]!r}), "
                "not numbers"
            )
    out: dict[str, Any] = {"experiment": experiment.to_numpy(dtype=object)}
    for col, name in COUNTS.items():
        high = MAX_NS if col.startswith("step.ts") or col == "step.id" else MAX_TOKENS
        out[name] = _ints(df[col], col, where, high)
    out["kv_usage"] = number_column(df["kv.usage_gpu_ratio"], "kv.usage_gpu_ratio", where)
    out["cycle_time_us"] = number_column(
        df["cycle_time_us"], "cycle_time_us", where, allow_missing=True
    )
    _check(df, out, path)
    return StepTable(
        name=path.stem,
        table=pd.DataFrame(out),
        sources=((str(path), sha256_of(path)),),
        meta={"experiments": _experiments(df, out["experiment"], path)},
    )
