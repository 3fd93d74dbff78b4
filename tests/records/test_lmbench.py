"""LMBench's CSVs: made-up runs in the real layout; the multi-round rebuild."""

from __future__ import annotations

import numpy as np
import pytest
from record_writers import L0, LMBENCH_COLUMNS, lmbench_row, write_lmbench

from pagesim.allocators.prefix_cache import prompt_block_keys
from pagesim.errors import DataError
from pagesim.records.conversations import rebuild
from pagesim.records.lmbench import read_lmbench_csv


def test_times_are_launch_launch_plus_ttft_and_finish(tmp_path):
    run = read_lmbench_csv(write_lmbench(tmp_path / "LMBench_long_input_output_0.5.csv"))
    assert run.name == "LMBench_long_input_output_0.5"
    assert run.rate_req_s == 0.5 and run.meta["rate"].startswith("nominal")
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0.0, 0.3, 1.0, 2.0])
    assert t["prompt_len"].tolist() == [1100, 1100, 1149, 1178]
    lat = run.latencies()
    assert lat["ttft_s"].tolist() == pytest.approx([0.1] * 4)
    assert lat["e2e_s"].tolist() == pytest.approx([0.6] * 4)
    assert run.meta["workload"] == "long_input" and run.num_failed == 0


def test_each_round_holds_the_previous_rounds_prompt_and_answer(tmp_path):
    run = read_lmbench_csv(write_lmbench(tmp_path / "LMBench_long_input_output_0.5.csv"))
    t = run.table
    assert t["user_id"].tolist() == [5, 6, 5, 5]
    segs = t["segments"].tolist()
    r1, other, r2, r3 = segs
    assert r1[0] == other[0] == (0, 1000)  # the system prompt every user starts with
    assert r1[1][0] != other[1][0]  # each user's own context
    assert r2[: len(r1)] == r1 and r2[len(r1)][1] == 20  # round 1's answer
    assert r2[-1][1] == 1149 - 1100 - 20
    assert r3[: len(r2)] == r2 and r3[len(r2)][1] == 20 and r3[-1][1] == 9
    assert run.meta["num_later_rounds"] == 2 and run.meta["num_short_rounds"] == 0
    assert run.meta["history_share"] == pytest.approx((1120 + 1169) / (1100 * 2 + 1149 + 1178))
    trace = run.trace()
    assert trace.table["user_id"].tolist() == [5, 6, 5, 5]
    assert trace.table["segments"].tolist() == segs
    # prefix caching sees the history: round 2 shares round 1's full blocks, and the
    # other user shares the system prompt's only
    k1, k2, k_other = (prompt_block_keys(s, sum(n for _, n in s), 16) for s in (r1, r2, other))
    assert k2[: len(k1)] == k1
    assert k_other[: 1000 // 16] == k1[: 1000 // 16] and k_other[1000 // 16] != k1[1000 // 16]


def test_a_round_shorter_than_its_history_keeps_its_start_and_is_counted():
    built = rebuild(
        user_id=np.array([1, 1]), question_id=np.array([1, 2]),
        prompt_len=np.array([100, 110]), answer_len=np.array([30, 5]), system_tokens=0,
    )  # fmt: skip
    first, second = built.segments
    assert built.num_short_rounds == 1
    assert second == (*first, (second[1][0], 9), (second[2][0], 1))  # 109 of 130, then 1 new
    assert sum(n for _, n in second) == 110


def test_sharegpt_runs_share_nothing_and_a_rate_is_measured_without_one_in_the_name(tmp_path):
    columns = "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time"
    rows = [
        f"{p},{g},0.1,0.4,{L0 + i},{L0 + i + 0.5}"
        for i, (p, g) in enumerate([(10, 5), (20, 7), (30, 2)])
    ]
    run = read_lmbench_csv(write_lmbench(tmp_path / "run.csv.gz", rows, columns=columns))
    assert "segments" not in run.table and "user_id" not in run.table
    assert run.rate_req_s == pytest.approx(1.0) and run.meta["rate"].startswith("measured")
    assert len({s for s, _ in (seg for segs in run.trace().table["segments"] for seg in segs)}) == 3


def test_a_row_with_no_token_back_is_a_failed_request(tmp_path):
    rows = [lmbench_row(1100, 0, 0.0, 0.0, 5, 1, 0.0), lmbench_row(1100, 20, 0.1, 0.5, 6, 1, 1.0)]
    run = read_lmbench_csv(write_lmbench(tmp_path / "LMBench_short_input_qps1.csv", rows))
    assert run.num_failed == 1 and run.table["output_len"].tolist() == [1, 20]
    assert run.latencies()["ttft_s"].isna().tolist() == [True, False]


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        (lmbench_row(1100, 20, 0.1, 0.5, 7, 1, 3.0, finish=L0 + 9.0), "row 6: finish_time"),
        (lmbench_row(1100, 20, "1.2.3", 0.5, 7, 1, 3.0, finish=L0 + 3.6), "row 6: ttft must be"),
        (lmbench_row(1100, 20, -0.1, 0.5, 7, 1, 3.0), "row 6: ttft must be a duration"),
        (lmbench_row(1100, 20, 0.1, 0.5, 5, 2, 3.0), "row 6: user_id 5 has question_id 2 twice"),
        (lmbench_row(1100, 20, 0.1, 0.5, 5, 4, 2.2), "row 6: launch_time: user 5's question 4"),
        (lmbench_row(0, 20, 0.1, 0.5, 7, 1, 3.0), "row 6: prompt_tokens is 0"),
        (lmbench_row(1100, 20.5, 0.1, 0.5, 7, 1, 3.0), "row 6: generation_tokens must be"),
    ],
)
def test_bad_cells_are_one_line_errors(tmp_path, row, fragment):
    from record_writers import default_lmbench_rows

    path = write_lmbench(tmp_path / "LMBench_short_input_qps1.csv", [*default_lmbench_rows(), row])
    with pytest.raises(DataError, match=fragment) as exc:
        read_lmbench_csv(path)
    assert str(path) in str(exc.value)


def test_a_multi_round_file_needs_both_round_columns(tmp_path):
    columns = LMBENCH_COLUMNS.replace(",question_id", "")
    path = write_lmbench(tmp_path / "x.csv", ["10,5,0.1,0.4,3,1,2"], columns=columns)
    with pytest.raises(DataError, match="'question_id' is missing"):
        read_lmbench_csv(path)
