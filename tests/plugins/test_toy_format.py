"""A record format is one file and one line: ``toy_format.py`` (its reader and what
recognises its files), registered here with one line, read through ``read_run`` beside
the shipped formats (docs/plugins.md)."""

from __future__ import annotations

import pytest
import toy_format

from pagesim.errors import DataError
from pagesim.records import RECORD_FORMATS, RecordFormat, format_of, read_run


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(
        RECORD_FORMATS,
        "toy-log",
        RecordFormat(toy_format.read_toy_log, toy_format.recognises, "per-request", "a toy log"),
    )  # the one line


def test_a_registered_format_is_recognised_and_read(toy, tmp_path):
    path = tmp_path / "run7.toylog"
    path.write_text("10.0\t12\t3\t10.1\t10.3\n10.5\t20\t2\t10.6\t10.7\n")
    assert format_of(path) == "toy-log"
    run = read_run(path)
    assert (run.name, run.num_requests, run.rate_req_s) == ("run7", 2, pytest.approx(2.0))
    assert run.latencies()["ttft_s"].tolist() == pytest.approx([0.1, 0.1])
    assert RECORD_FORMATS["toy-log"](path).table.equals(run.table)  # an entry reads as called
    path.write_text("10.0\t12\t3\t9.0\t10.3\n")
    with pytest.raises(DataError, match="row 1, column 'first_token_s'"):
        read_run(path)


def test_without_its_line_the_format_is_unknown_and_the_error_lists_the_known_ones(tmp_path):
    path = tmp_path / "run7.toylog"
    path.write_text("10.0\t12\t3\t10.1\t10.3\n")
    with pytest.raises(DataError) as exc:
        read_run(path)
    text = str(exc.value)
    assert "not a run in a format pagesim reads" in text and "\n" not in text
    for name in RECORD_FORMATS:
        assert name in text
