"""Hostile input, reader by reader: every file that is not what it should be is one
DataError line naming the file (and the row and field where there is one), never a
traceback. Files are written by the tests."""

from __future__ import annotations

import gzip
import json

import pytest
from record_writers import (
    BLIS_COLUMNS,
    LMBENCH_COLUMNS,
    bench_doc,
    default_blis_rows,
    default_lmbench_rows,
    write_bench,
    write_blis,
    write_exp,
    write_lmbench,
)

from pagesim.errors import DataError
from pagesim.records import read_run
from pagesim.records.bench_json import read_vllm_bench_json
from pagesim.records.blis_trace import read_blis_trace
from pagesim.records.distserve_csv import read_distserve_csv
from pagesim.records.distserve_exp import read_distserve_exp
from pagesim.records.llmservingsim import read_llmservingsim_run
from pagesim.records.lmbench import read_lmbench_csv

DISTSERVE = (
    "issue_time,first_token_time,complete_time,prompt_len,output_len\n"
    "100.0,100.1,100.5,10,5\n100.5,100.62,101.0,20,8\n"
)
BINARY = bytes(range(256)) * 4
UTF16 = "prompt_tokens,generation_tokens\r\n1,2\r\n".encode("utf-16")  # PowerShell's `>`


def _one_line(exc: pytest.ExceptionInfo, *parts: str) -> str:
    text = str(exc.value)
    assert "\n" not in text
    for part in parts:
        assert part in text, (part, text)
    return text


# ---- each reader, given a file whose bytes are not text of its format --------------


def _distserve(tmp_path, data: bytes):
    path = tmp_path / "vllm-2-1.csv"
    path.write_bytes(data)
    return read_distserve_csv, path


def _lmbench(tmp_path, data: bytes):
    path = tmp_path / "LMBench_short_input_qps1.csv"
    path.write_bytes(data)
    return read_lmbench_csv, path


def _blis(tmp_path, data: bytes):
    folder = write_blis(tmp_path / "run")
    (folder / "trace.csv").write_bytes(data)
    return read_blis_trace, folder / "trace.csv"


def _bench(tmp_path, data: bytes):
    path = tmp_path / "result.json"
    path.write_bytes(data)
    return read_vllm_bench_json, path


def _llmservingsim(tmp_path, data: bytes):
    folder = tmp_path / "GPU" / "Model" / "vllm"
    folder.mkdir(parents=True)
    (folder / "requests.jsonl").write_bytes(data)
    return (lambda p: read_llmservingsim_run(p.parent.parent)), folder / "requests.jsonl"


def _exp(tmp_path, data: bytes):
    path = tmp_path / "distserve-1-1.exp"
    path.write_bytes(data)
    return read_distserve_exp, path


READERS = [_distserve, _lmbench, _blis, _bench, _llmservingsim, _exp]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__.strip("_"))
@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (BINARY, "a binary file"),
        (UTF16, "UTF-16 text (what Windows PowerShell's `>` writes)"),
        (b"", "empty file"),
        (b"\n \n", "empty file"),
        (b"caf\xe9,x\n1,2\n", "not UTF-8 text (byte 3"),
    ],
    ids=["binary", "utf16", "empty", "blank", "latin1"],
)
def test_files_that_are_not_utf8_text_are_named_and_refused(tmp_path, reader, data, fragment):
    read, path = reader(tmp_path, data)
    with pytest.raises(DataError) as exc:
        read(path)
    _one_line(exc, str(path), fragment)


def test_utf16_without_a_byte_order_mark_is_recognised(tmp_path):
    read, path = _distserve(tmp_path, DISTSERVE.encode("utf-16-le"))
    with pytest.raises(DataError, match="UTF-16"):
        read(path)


@pytest.mark.parametrize("reader", [_lmbench, _blis], ids=["lmbench", "blis"])
def test_a_truncated_gzip_is_named(tmp_path, reader):
    whole = gzip.compress(("\n".join([LMBENCH_COLUMNS, *default_lmbench_rows()]) * 50).encode())
    read, path = reader(tmp_path, b"")
    gz = path.with_name(path.name + ".gz")
    path.unlink()
    gz.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError) as exc:
        read(gz if reader is _lmbench else gz.parent)
    _one_line(exc, str(gz), "a truncated or corrupt gzip file")


@pytest.mark.parametrize(
    ("reader", "text"),
    [
        (_distserve, DISTSERVE.replace("prompt_len,output_len", "prompt_len,prompt_len")),
        (_lmbench, LMBENCH_COLUMNS.replace("ttft,", "prompt_tokens,") + "\n1,2,3,4,5,6,7,8\n"),
        (_blis, BLIS_COLUMNS.replace("x_request_id", "status") + "\n" + default_blis_rows()[0]),
    ],
    ids=["distserve", "lmbench", "blis"],
)
def test_a_column_named_twice_is_refused(tmp_path, reader, text):
    read, path = reader(tmp_path, text.encode())
    with pytest.raises(DataError) as exc:
        read(path.parent if reader is _blis else path)
    _one_line(exc, str(path), "row 1: column", "appears twice")


def test_a_time_cell_that_is_not_a_number_names_its_row_and_field(tmp_path):
    read, path = _distserve(tmp_path, DISTSERVE.replace("100.62", "1.2.3").encode())
    with pytest.raises(DataError) as exc:
        read(path)
    _one_line(exc, str(path), "row 3, column 'first_token_time': '1.2.3' is not a finite number")


def test_a_row_with_more_cells_than_the_header_is_refused(tmp_path):
    read, path = _distserve(tmp_path, (DISTSERVE + "1,2,3,4,5,6\n").encode())
    with pytest.raises(DataError) as exc:
        read(path)
    _one_line(exc, str(path))


def test_read_run_says_what_is_wrong_with_an_unreadable_file_first(tmp_path):
    path = tmp_path / "mystery.bin"
    path.write_bytes(BINARY)
    with pytest.raises(DataError, match="a binary file"):
        read_run(path)


# ---- vllm bench serve's JSON -------------------------------------------------------


def _bench_error(tmp_path, doc_or_text) -> str:
    path = tmp_path / "result.json"
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    with pytest.raises(DataError) as exc:
        read_vllm_bench_json(path)
    return _one_line(exc, str(path))


def test_bench_arrays_must_hold_numbers_not_strings_or_lists(tmp_path):
    assert read_vllm_bench_json(write_bench(tmp_path / "ok.json")).num_requests == 3
    text = _bench_error(tmp_path, bench_doc(ttfts=["0.05", "0.08", "0.06"]))
    assert "ttfts[0] must be a number, got '0.05'" in text
    text = _bench_error(tmp_path, bench_doc(input_lens=[[12], [30], [7]]))
    assert "input_lens[0] must be a number, got [12]" in text
    text = _bench_error(tmp_path, bench_doc(start_times="1000.0"))
    assert "'start_times' must be a list of 3 entries" in text


def test_bench_json_nested_200000_deep_is_one_line(tmp_path):
    deep = '{"input_lens": ' + "[" * 200_000 + "]" * 200_000 + "}"
    assert "JSON nested too deeply" in _bench_error(tmp_path, deep)


def test_a_json_true_is_not_a_token_count(tmp_path):
    text = _bench_error(tmp_path, bench_doc(output_lens=[3, True, 4]))
    assert "output_lens[1] must be a number, got True" in text


def test_itls_must_hold_one_gap_per_token_after_the_first(tmp_path):
    doc = bench_doc(output_lens=[3, 75, 4], itls=[[0.02, 0.03], [0.01] * 740, [0.02] * 3])
    text = _bench_error(tmp_path, doc)
    assert "itls[1] holds 740 token gaps, output_lens[1] = 75 needs 74" in text
    text = _bench_error(tmp_path, bench_doc(itls=[[0.02, -0.03], [], [0.02] * 3]))
    assert "itls[0][1] must be a finite number from 0 to 1e+10, got -0.03" in text


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        (
            {"start_times": [1000.0, 1e300, 1000.5]},
            "start_times[1] must be a finite number from -1e+10 to 1e+10",
        ),
        ({"ttfts": [0.05, 1e300, 0.06]}, "ttfts[1] must be a finite number from 0 to 1e+10"),
        (
            {"request_rate": -4.0},
            "request_rate -4.0 must be a number above 0 and at most 1,000,000 req/s",
        ),
        ({"request_rate": 1e9}, "request_rate 1000000000.0 must be"),
        ({"request_rate": "fast"}, "request_rate 'fast' must be"),
    ],
)
def test_absurd_magnitudes_are_refused_with_the_bound(tmp_path, over, fragment):
    assert fragment in _bench_error(tmp_path, bench_doc(**over))


def test_a_nan_or_infinite_rate_is_refused_where_it_spaces_the_requests(tmp_path):
    doc = bench_doc()
    del doc["start_times"]
    for rate, fragment in [("NaN", "request_rate nan must be"), ("Infinity", "(all at once)"),
                           ('"inf"', "(all at once)")]:  # fmt: skip
        text = json.dumps(doc).replace('"request_rate": 4.0', f'"request_rate": {rate}')
        assert fragment in _bench_error(tmp_path, text)
    # beside send times, vLLM's "inf" (all at once) is read: the rate is measured
    run = read_vllm_bench_json(write_bench(tmp_path / "inf.json", request_rate="inf"))
    assert run.rate_req_s == pytest.approx(4.0)


def test_every_reader_refuses_an_empty_table(tmp_path):
    path = write_lmbench(tmp_path / "LMBench_sharegpt_output_1.csv", [])
    with pytest.raises(DataError, match="a header and no records"):
        read_lmbench_csv(path)
    with pytest.raises(DataError, match="a header and no records"):
        read_blis_trace(write_blis(tmp_path / "b", []))
    with pytest.raises(DataError, match="must be a list of 1 entries"):
        read_vllm_bench_json(write_bench(tmp_path / "e.json", input_lens=[], output_lens=[],
                                         ttfts=[], itls=[], start_times=[], errors=[]))  # fmt: skip
    with pytest.raises(DataError, match="a non-empty list"):
        read_distserve_exp(write_exp(tmp_path / "distserve-0-1.exp", first_line="[]"))
