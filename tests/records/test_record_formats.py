"""RECORD_FORMATS and read_run: every format recognised by its files, and read."""

from __future__ import annotations

import json

import pytest
from record_writers import write_bench, write_blis, write_exp, write_lmbench

from pagesim.errors import DataError
from pagesim.records import RECORD_FORMATS, MeasuredRun, format_of, read_run
from pagesim.records.steps import StepTable


def _llmservingsim(folder):
    row = {"request_id": "bench-0", "input_toks": 5, "output_toks": 2, "arrival_time": 1.0,
           "queued_ts": 10.0, "scheduled_ts": 10.1, "first_token_ts": 10.2, "last_token_ts": 10.3}  # fmt: skip
    (folder / "vllm").mkdir(parents=True)
    (folder / "vllm" / "requests.jsonl").write_text(json.dumps(row) + "\n")
    return folder


def _parquet(path):
    from test_steps import _steps, _write

    return _write(path.parent, _steps(), path.name)


def _distserve(path):
    path.write_text(
        "issue_time,first_token_time,complete_time,prompt_len,output_len\n1,1.1,1.3,5,3\n"
    )
    return path


@pytest.fixture
def runs(tmp_path):
    return {
        "distserve-csv": _distserve(tmp_path / "vllm-1-1.csv"),
        "distserve-exp": write_exp(tmp_path / "distserve-c21d12-3-4.exp"),
        "vllm-bench-json": write_bench(tmp_path / "result.json"),
        "llmservingsim": _llmservingsim(tmp_path / "GPU" / "Model"),
        "blis-trace-v3": write_blis(tmp_path / "agg_2rps"),
        "lmbench-csv": write_lmbench(tmp_path / "LMBench_long_input_output_1.csv.gz"),
        "step-parquet": _parquet(tmp_path / "enriched_steps.parquet"),
    }


def test_every_format_is_recognised_by_its_files_and_read(runs):
    assert set(runs) == set(RECORD_FORMATS)
    for name, path in runs.items():
        assert format_of(path) == name
        got = read_run(path)
        kind = RECORD_FORMATS[name].kind
        assert isinstance(got, MeasuredRun if kind == "per-request" else StepTable), name
    blis = runs["blis-trace-v3"]
    assert format_of(blis / "trace.yaml") == format_of(blis / "trace.csv") == "blis-trace-v3"


def test_read_run_passes_keywords_to_the_reader(runs, tmp_path):
    run = read_run(runs["blis-trace-v3"], root=tmp_path)
    assert run.name == "agg_2rps" and run.rate_req_s == 2.0
    assert read_run(runs["distserve-csv"], dataset="mine").dataset == "mine"


def test_unknown_missing_and_ambiguous_paths_are_one_line(tmp_path, runs):
    with pytest.raises(DataError, match="no such file or folder"):
        read_run(tmp_path / "absent.csv")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(
        DataError, match="not a run in a format pagesim reads; the formats: distserve-csv"
    ):
        read_run(other)
    clash = write_lmbench(tmp_path / "vllm-1-2.csv")  # LMBench's columns, DistServe's name
    with pytest.raises(
        DataError, match=r"could be any of the formats \['distserve-csv', 'lmbench-csv'\]"
    ):
        read_run(clash)
