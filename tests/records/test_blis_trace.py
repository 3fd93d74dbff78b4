"""BLIS trace v3 (llm-d inference-sim): made-up runs in the real layout."""

from __future__ import annotations

import numpy as np
import pytest
from record_writers import BLIS_HEADER, T0_US, blis_row, default_blis_rows, write_blis

from pagesim.errors import DataError
from pagesim.records.blis_trace import read_blis_trace


def test_a_run_is_read_with_ttft_and_e2e_from_the_send_time(tmp_path):
    folder = write_blis(tmp_path / "results" / "agg_4rps" / "vanilla")
    run = read_blis_trace(folder, root=tmp_path)
    assert run.name == "results/agg_4rps/vanilla"
    assert run.rate_req_s == 4.0 and "agg_4rps" in run.meta["rate"]
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0.0, 0.5, 1.0])  # sorted by send time
    assert t["prompt_len"].tolist() == [100, 120, 80]  # server_input_tokens
    assert t["output_len"].tolist() == [8, 5, 3]
    lat = run.latencies()
    assert lat["ttft_s"].tolist() == pytest.approx([0.04, 0.06, 0.05])
    assert lat["e2e_s"].tolist() == pytest.approx([0.24, 0.2, 0.25])
    assert run.num_failed == 0 and run.meta["num_failed"] == 0
    assert (run.meta["model"], run.meta["workload_seed"], run.meta["mode"]) == (
        "Org/Model-1B", 7, "real",
    )  # fmt: skip
    assert run.meta["request_ids"] == [0, 1, 2]
    assert [s[0].rsplit("/", 1)[1] for s in run.sources] == ["trace.yaml", "trace.csv"]


def test_gzip_and_the_header_path_read_the_same(tmp_path):
    a = read_blis_trace(write_blis(tmp_path / "a"))
    b = read_blis_trace(write_blis(tmp_path / "b", gz=True) / "trace.yaml")
    assert a.table.equals(b.table)
    assert a.name == "a" and b.name == "b"


def test_without_a_rate_in_the_path_the_rate_is_measured_and_said(tmp_path):
    run = read_blis_trace(write_blis(tmp_path / "plain"))
    assert run.rate_req_s == pytest.approx(2 / 1.0)  # 3 sends over 1 s
    assert run.meta["rate"].startswith("measured from the send times")


def test_the_clients_count_stands_in_where_the_server_gave_none(tmp_path):
    rows = default_blis_rows()
    rows[1] = blis_row(0, T0_US, T0_US + 40_000, T0_US + 240_000, server_in=0,
                       input_tokens=90, prefix=10)  # fmt: skip
    run = read_blis_trace(write_blis(tmp_path / "r", rows))
    assert run.table["prompt_len"].iloc[0] == 100
    assert run.meta["prompt_from_client_count"] == 1


def test_failed_requests_stay_in_the_trace_and_out_of_the_statistics(tmp_path):
    rows = [
        *default_blis_rows(),
        # timed out after 4 streamed chunks, no usage: 4 output tokens assumed
        blis_row(
            3,
            T0_US + 200_000,
            0,
            0,
            server_in=0,
            input_tokens=64,
            out=0,
            chunks=4,
            status="timeout",
            error="streaming timeout",
        ),  # fmt: skip
        # refused by the server at once, no chunk: 1 token assumed
        blis_row(4, T0_US + 300_000, 0, 0, server_in=77, out=0, chunks=0, status="error"),
        # failed before it was sent: not in the table
        blis_row(5, 0, 0, 0, server_in=0, out=0, chunks=0, status="error"),
    ]
    run = read_blis_trace(write_blis(tmp_path / "r", rows))
    t = run.table
    assert run.num_requests == 5 and run.num_failed == 2
    assert run.meta["failed_by_status"] == {"timeout": 1, "error": 1}
    assert run.meta["num_never_sent"] == 1
    failed = t[t["failed"]]
    assert failed["prompt_len"].tolist() == [64, 77]
    assert failed["output_len"].tolist() == [4, 1]
    assert failed["first_token_s"].isna().all() and failed["finish_s"].isna().all()
    lat = run.latencies()
    assert lat[t["failed"].to_numpy()].isna().all().all()  # never a made-up time
    assert lat[~t["failed"].to_numpy()].notna()["ttft_s"].all()
    assert len(run.served_latencies()) == 3
    trace = run.trace()
    assert trace.num_requests == 5  # the failed ones loaded the server: replayed
    assert trace.table["arrival_s"].tolist() == pytest.approx([0, 0.2, 0.3, 0.5, 1.0])
    with pytest.raises(DataError, match="2 of 5 requests failed"):
        run.require_served("the serving fit")


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        (BLIS_HEADER.replace("trace_version: 3", "trace_version: 2"), "trace_version 2"),
        (BLIS_HEADER.replace("time_unit: us", "time_unit: ms"), "time_unit 'ms'"),
        (BLIS_HEADER.replace("trace_version: 3", "trace_version: true"), "trace_version True"),
    ],
)
def test_other_versions_and_units_are_refused_in_one_line(tmp_path, header, fragment):
    with pytest.raises(DataError, match=fragment) as exc:
        read_blis_trace(write_blis(tmp_path / "r", header=header))
    assert "trace.yaml" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        (blis_row(9, "1.2.3", T0_US, T0_US), "row 5: send_time_us must be a finite number"),
        (blis_row(9, 1e300, T0_US, T0_US), "row 5: send_time_us must be a clock reading"),
        (blis_row(9, T0_US, T0_US, T0_US, status="lost"), "row 5: status must be one of"),
        (blis_row(9, T0_US, T0_US, T0_US, out=0), "row 5: an ok request with no output_tokens"),
        (blis_row(9, T0_US, T0_US, T0_US, server_in="true"), "row 5: server_input_tokens"),
        (blis_row(9, T0_US, T0_US - 5, T0_US), "row 5, column 'first_chunk_time_us'"),
        (blis_row(9, T0_US, T0_US, T0_US, out=2.5), "row 5: output_tokens must be"),
    ],
)
def test_each_bad_cell_is_named_by_file_row_and_column(tmp_path, row, fragment):
    folder = write_blis(tmp_path / "r", [*default_blis_rows(), row])
    with pytest.raises(DataError, match=fragment) as exc:
        read_blis_trace(folder)
    assert str(folder / "trace.csv") in str(exc.value)


def test_a_missing_trace_csv_is_one_line(tmp_path):
    folder = write_blis(tmp_path / "r")
    (folder / "trace.csv").unlink()
    with pytest.raises(DataError, match=r"no trace\.csv or trace\.csv\.gz beside trace\.yaml"):
        read_blis_trace(folder)
    with pytest.raises(DataError, match="no trace.yaml"):
        read_blis_trace(tmp_path)


def test_the_name_is_relative_to_the_data_folder_given(tmp_path):
    folder = write_blis(tmp_path / "x" / "sweep" / "rate_0.5rps")
    run = read_blis_trace(folder, root=tmp_path / "x")
    assert run.name == "sweep/rate_0.5rps" and run.rate_req_s == 0.5
    with pytest.raises(DataError, match="not inside the data folder"):
        read_blis_trace(folder, root=tmp_path / "elsewhere")
    assert np.isfinite(run.table["finish_s"]).all()
