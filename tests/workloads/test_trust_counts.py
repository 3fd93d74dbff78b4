"""External data that wraps or slips through (issue #34, item 3): token counts that are
huge, text or empty are refused in one line naming the file, the line and the column,
and nothing is written; tables store counts as int64.

Each test here failed before the fix: 4,294,967,396 became a 100-token request (int32),
10**12 became negative, a 23-digit count became 0, a 10**30 in a pickle or a CSV was a
traceback.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.workloads.artifact import read_length_pairs
from pagesim.workloads.lengthtable import MAX_TOKENS, LengthTable, load_table, save_table

HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        ("4294967396", "num_prefill_tokens must be at most 10,000,000, got '4294967396'"),
        ("1000000000000", "num_prefill_tokens must be at most 10,000,000"),
        ("12345678901234567890123", "at most 10,000,000, got '12345678901234567890123'"),
        ("many", "num_prefill_tokens must be a non-negative integer, got 'many'"),
        ("-4", "num_prefill_tokens must be a non-negative integer, got '-4'"),
        ("", "num_prefill_tokens must be a non-negative integer, got ''"),
    ],
)
def test_prepare_refuses_counts_that_would_wrap_or_slip(tmp_path, monkeypatch, capsys, cell,
                                                         needle):  # fmt: skip
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    source = tmp_path / "conv.csv"
    rows = [f"{i * 0.5},{40 + i},{20 + i}\n" for i in range(5)]
    rows[3] = f"1.5,{cell},7\n"
    source.write_text(HEADER + "".join(rows))
    code, err = _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{source}: line 5: " in err and needle in err
    assert not (tmp_path / "user").exists()


@pytest.mark.parametrize(
    ("body", "needle"),
    [("", "empty file"), (HEADER, "no rows after the header")],
)
def test_prepare_refuses_empty_and_header_only_files(tmp_path, monkeypatch, capsys, body, needle):
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    source = tmp_path / "conv.csv"
    source.write_text(body)
    code, err = _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and f"{source}: {needle}" in err
    assert not (tmp_path / "user").exists()


def test_a_run_on_a_trace_with_a_wrapping_count_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0.0,20,10\n0.5,4294967396,12\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"workload": {"name": "csv", "path": str(trace), "num_requests": None},
                               "arrivals": {"process": "replay"}}))  # fmt: skip
    code, err = _cli(capsys, "simulate", "--config", str(cfg))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "line 3: num_prefill_tokens must be at most 10,000,000" in err


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ("3,4\n5,4294967396\n", "line 3: output_len must be at most 10,000,000, got '4294967396'"),
        ("3,4\n12345678901234567890123,5\n", "line 3: input_len must be at most 10,000,000"),
        ("3,4\n5,x\n", "line 3: output_len must be an integer >= 0, got 'x'"),
        ("", "no rows after the header"),
    ],
)
def test_artifact_csv_counts(tmp_path, rows, needle):
    path = tmp_path / "lengths.csv"
    path.write_text("input_len,output_len\n" + rows)
    with pytest.raises(DataError, match=needle):
        read_length_pairs(path)


@pytest.mark.parametrize("value", [10**30, 2**40, MAX_TOKENS + 1, -1, 1.5, "7", True])
def test_artifact_pickle_counts(tmp_path, value):
    path = tmp_path / "lengths.pkl"
    path.write_bytes(pickle.dumps([(3, 4), (5, value)]))
    with pytest.raises(DataError, match=r"lengths\.pkl: item 1: a length must be an int >= 0.*"
                                        r"output_len is"):  # fmt: skip
        read_length_pairs(path)


def test_tables_store_counts_as_int64_and_refuse_counts_out_of_range(tmp_path):
    big = MAX_TOKENS - 1  # far above int16, and what int32 holds; int64 either way
    table = LengthTable(prompt_len=np.array([big, 3]), output_len=np.array([5, 6]))
    path = save_table(table, tmp_path / "t.npz")
    with np.load(path) as npz:
        assert npz["prompt_len"].dtype == np.int64 and npz["output_len"].dtype == np.int64
    assert load_table(path).prompt_len.tolist() == [big, 3]
    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, prompt_len=np.array([3, 2**40]), output_len=np.array([1, 1]))
    with pytest.raises(DataError, match=r"hostile\.npz: row 1: prompt_len must be at most"):
        load_table(hostile)


def test_measured_records_refuse_a_negative_ttft(tmp_path, capsys):
    """validate-vllm and replay-vllm check every cell of the records they read: a first
    token before its request (a negative TTFT) is refused in one line naming the file,
    the array and the request, and nothing is written."""
    doc = {
        "backend": "vllm", "request_rate": 4.0, "input_lens": [12, 30], "output_lens": [3, 4],
        "ttfts": [0.05, -0.005], "itls": [[0.02, 0.03], [0.02, 0.02, 0.02]],
        "start_times": [1000.0, 1000.25], "errors": ["", ""],
    }  # fmt: skip
    result = tmp_path / "result.json"
    result.write_text(json.dumps(doc))
    out = tmp_path / "out"
    code, err = _cli(capsys, "replay-vllm", str(result), "--model", "llama-2-7b", "--gpu",
                     "a100-80gb", "--out", str(out))  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "result.json: ttfts[1] must be a finite number from 0" in err  # the second request
    assert "got -0.005" in err
    assert not out.exists()
