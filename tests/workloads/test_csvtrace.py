import numpy as np
import pandas as pd
import pytest

from pagesim.errors import DataError
from pagesim.workloads.csvtrace import load_csv_trace, read_timestamped_csv


def test_processed_layout(data_dir):
    path = data_dir / "trace_processed.csv"
    raw = pd.read_csv(path)
    table = read_timestamped_csv(path)
    assert len(table) == 40
    np.testing.assert_array_equal(table.prompt_len, raw["num_prefill_tokens"].to_numpy())
    np.testing.assert_array_equal(table.output_len, raw["num_decode_tokens"].to_numpy())
    np.testing.assert_allclose(table.arrival_s, raw["arrived_at"].to_numpy())


def test_original_layout_matches_processed(data_dir, tmp_path):
    raw = pd.read_csv(data_dir / "trace_processed.csv")
    start = pd.Timestamp("2023-11-16 18:15:46.6805900")
    stamps = start + pd.to_timedelta(raw["arrived_at"], unit="s")
    original = pd.DataFrame(
        {
            "TIMESTAMP": stamps.dt.strftime("%Y-%m-%d %H:%M:%S.%f"),
            "ContextTokens": raw["num_prefill_tokens"],
            "GeneratedTokens": raw["num_decode_tokens"],
        }
    )
    path = tmp_path / "orig.csv"
    original.to_csv(path, index=False)
    table = read_timestamped_csv(path)
    np.testing.assert_allclose(table.arrival_s, raw["arrived_at"].to_numpy(), atol=1e-6)
    np.testing.assert_array_equal(table.prompt_len, raw["num_prefill_tokens"].to_numpy())


def test_unsorted_rows_are_sorted_and_shifted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n5.0,10,20\n2.0,30,40\n")
    table = read_timestamped_csv(path)
    assert table.arrival_s.tolist() == [0.0, 3.0]
    assert table.prompt_len.tolist() == [30, 10]


def test_numbers_read_as_numbers_equal_numbers_read_as_text(tmp_path):
    """The fast read (read_csv's own number parsing) gives bit for bit the table the
    text read (pd.to_numeric on each cell) gives, and Python's float() of each cell,
    here on 3,000 rows of times with up to 17 significant digits, in three notations."""
    from pagesim.workloads.csvtrace import _length_table, _read_frame

    rng = np.random.default_rng(7)
    times = np.cumsum(rng.exponential(0.5, 3000))
    cells = [
        repr(float(t)) if i % 3 == 0 else f"{t:.6f}" if i % 3 == 1 else f"{t:.9e}"
        for i, t in enumerate(times)
    ]
    rows = [
        f"{c}, {p},{o}"
        for c, p, o in zip(
            cells, rng.integers(1, 4000, 3000), rng.integers(1, 900, 3000), strict=True
        )
    ]
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    fast = read_timestamped_csv(path)
    text = _length_table(path, _read_frame(path, as_text=True), "azure-2023-processed")
    assert fast.arrival_s.tobytes() == text.arrival_s.tobytes()
    exact = np.array([float(c) for c in cells])  # Python's correctly rounded parse
    assert fast.arrival_s.tobytes() == (exact - exact.min()).tobytes()
    assert fast.prompt_len.tolist() == text.prompt_len.tolist()
    assert fast.output_len.tolist() == text.output_len.tolist()
    assert fast.source_note == text.source_note


def test_load_csv_trace(data_dir):
    trace = load_csv_trace(data_dir / "trace_processed.csv")
    assert len(trace) == 40 and trace.has_arrivals
    d = trace.describe()
    assert d["num_requests"] == 40 and d["rate_req_s"] > 0
    assert trace.table["segments"].iloc[3] == ((4, trace.table["prompt_len"].iloc[3]),)


HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            HEADER + "0.0,10,5\n1.0,-3,5\n",
            "line 3: num_prefill_tokens must be a non-negative integer, got '-3'",
        ),
        (
            HEADER + "0.0,10,5.5\n",
            "line 2: num_decode_tokens must be a non-negative integer, got '5.5'",
        ),
        (HEADER + "0.0,10,5\nabc,1,1\n", "line 3: arrived_at must be seconds"),
        (HEADER + "0.0,ten,5\n", "line 2: num_prefill_tokens"),
        (HEADER + "0.0,10,5\n1.0,1,1,7,8\n", "malformed CSV"),
        ("time,prompt,output\n0,1,1\n", "line 1: unknown CSV header"),
        ("", "empty file"),
        (HEADER, "no rows"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            "line 2: TIMESTAMP is not a datetime",
        ),
    ],
)
def test_bad_csv(tmp_path, body, needle):
    path = tmp_path / "trace.csv"
    path.write_text(body)
    with pytest.raises(DataError, match="trace.csv") as info:
        read_timestamped_csv(path)
    assert needle in str(info.value)


def test_missing_csv(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_timestamped_csv(tmp_path / "none.csv")
