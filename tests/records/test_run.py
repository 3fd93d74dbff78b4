"""Measured per-request records: the readers and the checks that refuse what cannot be one.

Every file here is written by the test in the real formats (made-up requests)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import DataError
from pagesim.records.bench_json import read_vllm_bench_json
from pagesim.records.distserve_csv import read_distserve_csv
from pagesim.records.run import MeasuredRun, check_records


def _distserve(folder, name="vllm-4-2.csv", **changes):
    df = pd.DataFrame(
        {
            "issue_time": [100.0, 100.5, 101.0, 101.5],
            "first_token_time": [100.1, 100.62, 101.2, 101.6],
            "complete_time": [100.5, 101.0, 102.0, 101.6],
            "prompt_len": [10, 20, 30, 40],
            "output_len": [5, 8, 11, 1],
        }
    )
    for col, (row, value) in changes.items():
        df[col] = df[col].astype(object)
        df.loc[row, col] = value
    path = folder / name
    df.to_csv(path, index=False)
    return path


def test_distserve_run_is_read_into_the_canonical_table(tmp_path):
    run = read_distserve_csv(_distserve(tmp_path))
    assert (run.name, run.rate_req_s, run.num_requests) == ("vllm-4-2", 2.0, 4)
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0, 0.5, 1.0, 1.5])
    lat = run.latencies()
    assert lat["ttft_s"].tolist() == pytest.approx([0.1, 0.12, 0.2, 0.1])
    assert lat["tpot_s"].iloc[0] == pytest.approx(0.4 / 4)
    assert np.isnan(lat["tpot_s"].iloc[3])  # a one-token output has no TPOT
    assert len(run.sources[0][1]) == 64  # its sha256


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        (
            {"first_token_time": (2, 100.5)},
            "row 4, column 'first_token_time': 100.5 is before its issue_time",
        ),
        ({"complete_time": (1, 100.6)}, "row 3, column 'complete_time'"),
        (
            {"prompt_len": (0, "twelve")},
            "row 2, column 'prompt_len': 'twelve' is not a finite number",
        ),
        (
            {"output_len": (3, 10**12)},
            "row 5, column 'output_len': '1000000000000' is not a token count",
        ),
        ({"prompt_len": (1, 2.5)}, "row 3, column 'prompt_len': '2.5' is not a token count"),
        ({"issue_time": (0, float("nan"))}, "row 2, column 'issue_time'"),
    ],
)
def test_bad_records_are_one_line_errors_naming_file_row_and_column(tmp_path, changes, fragment):
    path = _distserve(tmp_path, **changes)
    with pytest.raises(DataError) as exc:
        read_distserve_csv(path)
    assert str(path) in str(exc.value) and fragment in str(exc.value)


def test_distserve_file_names_and_columns_are_checked(tmp_path):
    path = _distserve(tmp_path)
    with pytest.raises(DataError, match="the name says 5 requests, the file has 4"):
        read_distserve_csv(path.rename(tmp_path / "vllm-5-2.csv"))
    with pytest.raises(DataError, match="named vllm-N-RATE.csv"):
        read_distserve_csv(_distserve(tmp_path, name="run.csv"))
    pd.DataFrame({"issue_time": [1.0]}).to_csv(tmp_path / "vllm-1-1.csv", index=False)
    with pytest.raises(DataError, match="no column 'first_token_time'"):
        read_distserve_csv(tmp_path / "vllm-1-1.csv")
    (tmp_path / "vllm-0-1.csv").write_text("")
    with pytest.raises(DataError, match="empty file"):
        read_distserve_csv(tmp_path / "vllm-0-1.csv")


def _bench(**over):
    doc = {
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B",
        "request_rate": 4.0,
        "input_lens": [12, 30, 7],
        "output_lens": [3, 1, 4],
        "ttfts": [0.05, 0.08, 0.06],
        "itls": [[0.02, 0.03], [], [0.02, 0.02, 0.025]],
        "start_times": [1000.0, 1000.25, 1000.5],
        "errors": ["", "", ""],
    }
    doc.update(over)
    return doc


def test_vllm_bench_result_is_read_with_send_times_and_token_gaps(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_bench()))
    run = read_vllm_bench_json(path)
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0, 0.25, 0.5])
    assert t["first_token_s"].tolist() == pytest.approx([0.05, 0.33, 0.56])
    assert t["finish_s"].tolist() == pytest.approx([0.10, 0.33, 0.625])
    assert run.rate_req_s == 4.0 and run.meta["model_id"] == "meta-llama/Llama-3.1-8B"


def test_vllm_bench_result_without_send_times_spaces_them_at_the_rate_and_says_so(tmp_path):
    doc = _bench()
    del doc["start_times"]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    run = read_vllm_bench_json(path)
    assert run.table["arrival_s"].tolist() == pytest.approx([0, 0.25, 0.5])
    assert "evenly spaced" in run.meta["arrivals"]


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"ttfts": None}, "no key 'ttfts'"),
        ({"errors": ["", "timeout", ""]}, "errors\\[1\\]: request 1 failed"),
        ({"output_lens": [3, 1]}, "'output_lens' must be a list of 3 entries"),
        ({"ttfts": [0.05, -0.2, 0.06]}, "ttfts\\[1\\] must be a finite number from 0"),
    ],
)
def test_bad_bench_results_are_refused(tmp_path, over, fragment):
    doc = _bench(**over)
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=fragment):
        read_vllm_bench_json(path)
    path.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_vllm_bench_json(path)


def test_check_records_sorts_by_arrival_and_starts_at_zero():
    df = pd.DataFrame(
        {
            "arrival_s": [5.0, 3.0],
            "prompt_len": [1, 2],
            "output_len": [1, 2],
            "first_token_s": [6.0, 4.0],
            "finish_s": [6.0, 5.0],
        }
    )
    t = check_records(df, "x")
    assert t["prompt_len"].tolist() == [2, 1]
    assert t["arrival_s"].tolist() == [0.0, 2.0]
    with pytest.raises(DataError, match="x: no records"):
        check_records(df.iloc[:0], "x")


def _frame(**extra):
    df = pd.DataFrame(
        {
            "arrival_s": [5.0, 3.0, 4.0],
            "prompt_len": [4, 2, 3],
            "output_len": [2, 2, 1],
            "first_token_s": [6.0, 4.0, 99.0],
            "finish_s": [7.0, 5.0, -1.0],
        }
    )
    for key, value in extra.items():
        df[key] = value
    return df


def test_a_failed_request_keeps_its_place_and_loses_its_times():
    """The rule for failed requests (pagesim.records.run): replayed, never measured."""
    t = check_records(_frame(failed=[False, False, True]), "x")
    assert t["failed"].tolist() == [False, True, False]  # sorted by arrival, carried along
    assert np.isnan(t["first_token_s"].iloc[1]) and np.isnan(t["finish_s"].iloc[1])
    run = MeasuredRun("r", "d", t, 1.0)
    assert run.num_failed == 1 and run.served.tolist() == [True, False, True]
    lat = run.latencies()
    assert lat.iloc[1].isna().all() and lat.iloc[[0, 2]].notna()["e2e_s"].all()
    assert run.served_latencies().index.tolist() == [0, 2]
    assert run.trace().table["prompt_len"].tolist() == [2, 3, 4]
    with pytest.raises(DataError, match="1 of 3 requests failed"):
        run.require_served("a fit")
    with pytest.raises(DataError, match="row 3, column 'finish_s': -1.0 is before"):
        check_records(_frame(), "x")  # served, the same times are refused


def test_users_and_segments_travel_with_their_rows_into_the_trace():
    segs = [((1, 4),), ((2, 2),), ((1, 2), (3, 1))]
    t = check_records(_frame(user_id=[7, 8, 7], segments=segs, failed=[False, False, True]), "x")
    assert t["user_id"].tolist() == [8, 7, 7]
    assert t["segments"].tolist() == [segs[1], segs[2], segs[0]]
    trace = MeasuredRun("r", "d", t, 1.0).trace()
    assert trace.table["user_id"].tolist() == [8, 7, 7]
    assert trace.table["segments"].tolist() == [segs[1], segs[2], segs[0]]
    with pytest.raises(DataError, match="row 2: its segments cover 3 tokens, its prompt has 2"):
        check_records(
            _frame(segments=[((1, 4),), ((2, 3),), ((3, 3),)], failed=[False, False, True]), "x"
        )
    with pytest.raises(DataError, match="row 1, user_id -1 is not an integer >= 0"):
        check_records(_frame(user_id=[-1, 8, 7], failed=[False, False, True]), "x")


def test_a_bool_is_not_a_number_in_a_record():
    with pytest.raises(DataError, match="row 2, column 'prompt_len': True is not a finite number"):
        check_records(_frame(failed=[False, False, True]).assign(prompt_len=[4, True, 3]), "x")
