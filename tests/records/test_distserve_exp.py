"""DistServe's .exp files: ground truth (a Python literal, read without eval) and workloads."""

from __future__ import annotations

import json

import pytest
from record_writers import exp_request, write_exp

from pagesim.errors import DataError
from pagesim.records.distserve_exp import read_distserve_exp, read_distserve_workload


def test_a_ground_truth_run_is_read_with_its_setup_size_and_rate(tmp_path):
    run = read_distserve_exp(write_exp(tmp_path / "distserve-c21d11-3-1.5.exp"))
    assert (run.name, run.rate_req_s, run.num_requests) == ("distserve-c21d11-3-1.5", 1.5, 3)
    assert run.meta["setup"] == "c21d11" and run.meta["summary"] == {"num_requests": 3.0}
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0.0, 0.5, 0.9])  # sorted by issue time
    assert t["prompt_len"].tolist() == [20, 30, 50]
    lat = run.latencies()
    assert lat["ttft_s"].tolist() == pytest.approx([0.05, 0.1, 0.1])
    assert lat["tpot_s"].tolist()[1:] == pytest.approx([0.1, 0.1])
    unlabelled = read_distserve_exp(write_exp(tmp_path / "distserve-3-2.exp"))
    assert unlabelled.meta["setup"] is None


@pytest.mark.parametrize(
    ("first_line", "fragment"),
    [
        ("{'prompt_len': 1}", "must be a Python literal list"),
        ("[__import__('os').system('echo pwned')]", "not a Python literal list"),
        ("[exp_request(1, 2, 3, 4, 5)]", "not a Python literal list"),
        ("[{'prompt_len': 1,", "not a Python literal list"),
        ("[" * 100_000 + "]" * 100_000, "not a Python literal list"),
        ("[1, 2]", "request 1: expected a dict, got 1"),
        ("[]", "a non-empty list"),
    ],
)
def test_a_first_line_that_is_not_a_literal_list_of_requests_is_refused(
    tmp_path, first_line, fragment
):
    path = write_exp(tmp_path / "distserve-1-1.exp", first_line=first_line)
    with pytest.raises(DataError, match=fragment) as exc:
        read_distserve_exp(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_requests_are_checked_key_by_key(tmp_path):
    good = exp_request(20, 2, 10.0, 10.1, 10.2)
    for change, fragment in [
        ({"prompt_len": True}, "request 1, prompt_len: must be a number, got True"),
        ({"ttft_ms": 250.0}, "request 1, ttft_ms: 250.0 disagrees"),
        ({"extra": 1}, "request 1: unknown key 'extra'"),
        ({"issue_time": 1e300}, "request 1: issue_time must be a clock reading"),
        ({"output_len": 0}, "row 1, column 'output_len'"),
    ]:
        path = write_exp(tmp_path / "distserve-1-1.exp", [{**good, **change}])
        with pytest.raises(DataError, match=fragment):
            read_distserve_exp(path)
    path = write_exp(tmp_path / "distserve-1-1.exp", [good], summary={"num_requests": 2})
    with pytest.raises(DataError, match="the summary 2.0"):
        read_distserve_exp(path)
    path = write_exp(tmp_path / "distserve-2-1.exp", [good])
    with pytest.raises(DataError, match="the name says 2"):
        read_distserve_exp(path)
    with pytest.raises(DataError, match="named distserve-"):
        read_distserve_exp(write_exp(tmp_path / "run.exp", [good]))


def test_a_line_too_long_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    from pagesim.records import distserve_exp

    monkeypatch.setattr(distserve_exp, "MAX_LITERAL_CHARS", 100)
    with pytest.raises(DataError, match="more than the 100 this reader parses"):
        read_distserve_exp(write_exp(tmp_path / "distserve-3-1.exp"))


def test_a_workload_is_read_as_a_trace(tmp_path):
    path = tmp_path / "vllm-3-2.5.exp"
    items = [{"prompt_len": 5, "output_len": 2, "start_time": 0.0},
             {"prompt_len": 7, "output_len": 1, "start_time": 0.4},
             {"prompt_len": 9, "output_len": 3, "start_time": 1.0}]  # fmt: skip
    path.write_text(json.dumps(items))
    trace = read_distserve_workload(path)
    assert trace.table["prompt_len"].tolist() == [5, 7, 9]
    assert trace.table["arrival_s"].tolist() == [0.0, 0.4, 1.0]
    for bad, fragment in [
        ([{**items[0], "prompt_len": "5"}, *items[1:]], "request 1, prompt_len: must be"),
        ([items[0], items[2], items[1]], "request 3, start_time: before"),
        ([{"prompt_len": 5}, *items[1:]], "request 1: expected the keys"),
        ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ]:
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(DataError, match=fragment):
            read_distserve_workload(path)
