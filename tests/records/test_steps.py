"""inference-sim's per-step Parquet: a made-up file with the real schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import DataError
from pagesim.records.steps import read_step_parquet

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _steps(**changes) -> pd.DataFrame:
    n = 4
    df = pd.DataFrame(
        {
            "step.id": [5, 6, 7, 3],
            "step.ts_start_ns": [10_000, 20_000, 30_000, 5_000],
            "step.ts_end_ns": [11_000, 21_500, 30_700, 5_900],
            "step.duration_us": [1, 1, 1, 1],
            "queue.running_depth": [3, 3, 2, 1],
            "queue.waiting_depth": [1, 0, 0, 0],
            "batch.num_prefill_reqs": [1, 0, 0, 1],
            "batch.num_decode_reqs": [2, 3, 2, 0],
            "batch.scheduled_tokens": [102, 3, 2, 50],
            "batch.prefill_tokens": [100, 0, 0, 50],
            "batch.decode_tokens": [2, 3, 2, 0],
            "batch.num_finished": [0, 1, 0, 0],
            "batch.num_preempted": [0, 0, 0, 0],
            "kv.usage_gpu_ratio": [0.02, 0.03, 0.02, 0.01],
            "kv.blocks_total_gpu": [100, 100, 100, 50],
            "kv.blocks_free_gpu": [98, 97, 98, 49],
            "experiment_id": ["exp-a", "exp-a", "exp-a", "exp-b"],
            "cycle_time_us": [np.nan, 1400.0, 800.0, np.nan],
            "matched_iti_count": [0, 3, 2, 0],
            "model": ["m-70b"] * 3 + ["m-34b"],
            "workload": ["general"] * n,
            "tp": [4, 4, 4, 2],
        }
    )
    for col, (row, value) in changes.items():
        df[col] = df[col].astype(float if isinstance(value, float) else object)
        df.loc[row, col] = value
    return df


def _write(tmp_path, df, name="steps.parquet"):
    path = tmp_path / name
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    return path


def test_steps_are_read_into_their_own_schema(tmp_path):
    steps = read_step_parquet(_write(tmp_path, _steps()))
    t = steps.table
    assert steps.experiments == ["exp-a", "exp-b"]
    assert t["start_ns"].tolist() == [10_000, 20_000, 30_000, 5_000]
    assert t["num_prefill_tokens"].tolist() == [100, 0, 0, 50]
    assert t["kv_blocks_total"].tolist() == [100, 100, 100, 50]
    assert np.isnan(t["cycle_time_us"].iloc[0]) and t["cycle_time_us"].iloc[1] == 1400.0
    assert "step.duration_us" not in t and "duration_us" not in t
    assert steps.meta["experiments"]["exp-b"] == {"model": "m-34b", "workload": "general", "tp": 2}
    assert steps.of("exp-a")["step_id"].tolist() == [5, 6, 7]


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"step.ts_end_ns": (1, 19_000)}, "row 2: step.ts_end_ns: before step.ts_start_ns"),
        ({"kv.blocks_free_gpu": (0, 101)}, "row 1: kv.blocks_free_gpu: more than"),
        ({"batch.scheduled_tokens": (2, 9)}, "row 3: batch.scheduled_tokens: is not"),
        ({"kv.usage_gpu_ratio": (3, 1.5)}, "row 4: kv.usage_gpu_ratio: must be a fraction"),
        ({"cycle_time_us": (1, float("nan"))}, "row 2: cycle_time_us: missing where"),
        ({"step.id": (1, 5)}, "row 2: step.id: repeats a step"),
        ({"queue.running_depth": (2, -1)}, "row 3: queue.running_depth must be"),
        ({"batch.prefill_tokens": (0, 100.5)}, "row 1: batch.prefill_tokens must be"),
        ({"experiment_id": (0, "")}, "row 1: experiment_id must be a name"),
        ({"tp": (0, 2)}, "experiment 'exp-a' has 2 values of 'tp'"),
    ],
)
def test_each_bad_cell_is_one_line(tmp_path, changes, fragment):
    path = _write(tmp_path, _steps(**changes))
    with pytest.raises(DataError, match=fragment) as exc:
        read_step_parquet(path)
    assert str(path) in str(exc.value)


def test_files_that_are_not_such_parquet_are_refused(tmp_path):
    df = _steps().drop(columns=["kv.blocks_total_gpu"])
    with pytest.raises(DataError, match="no column 'kv.blocks_total_gpu'"):
        read_step_parquet(_write(tmp_path, df))
    for name, content in [("text.parquet", b"step,id\n1,2\n"), ("empty.parquet", b""),
                          ("half.parquet", _write(tmp_path, _steps()).read_bytes()[:200])]:  # fmt: skip
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DataError, match="not a readable Parquet file"):
            read_step_parquet(tmp_path / name)
    text = _steps()
    text["batch.prefill_tokens"] = text["batch.prefill_tokens"].astype(str)
    with pytest.raises(DataError, match="row 1: batch.prefill_tokens holds .* not numbers"):
        read_step_parquet(_write(tmp_path, text))
    table = pa.table({"a": [1], "b": [2]}).rename_columns(["cycle_time_us", "cycle_time_us"])
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(DataError, match="'cycle_time_us' appears twice"):
        read_step_parquet(tmp_path / "dup.parquet")
