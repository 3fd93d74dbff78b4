"""The paper artifact's ShareGPT lengths: the real file's numbers, and a safe unpickler.

The real-data test reads the shared CSV (``../shared/data/paper_artifact``) and checks
the numbers its README and the paper give; it skips, with a reason, where it is absent.
The pickle tests build small pickles here: a plain one in the artifact's layout and
hostile ones that would run a command if loaded with ``pickle.load``.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.workloads.artifact import NoGlobalsUnpickler, read_length_pairs
from pagesim.workloads.registry import load_rows


@pytest.mark.parametrize(
    "file", ["sharegpt_opt_lengths.csv", "sharegpt_opt_text_completion_length.pkl"]
)
def test_the_real_artifact_lengths(shared_data, capsys, file):
    """The shared CSV, or the artifact's own pickle where a copy of it sits beside it."""
    csv = shared_data("paper_artifact", file)
    assert main(["workload", "prepare", "sharegpt-paper", "--source", str(csv)]) == 0
    table = load_rows("sharegpt-paper")
    assert len(table) == 84_226
    kept = table.prompt_len + table.output_len < 2048
    assert int(kept.sum()) == 79_725
    assert round(float(table.prompt_len[kept].mean()), 2) == 161.18
    assert round(float(table.output_len[kept].mean()), 2) == 338.00
    # the workload.path route reads the same file without preparing it
    direct = load_rows("sharegpt-paper", str(csv))
    assert np.array_equal(direct.prompt_len, table.prompt_len)
    assert np.array_equal(direct.output_len, table.output_len)


def test_a_plain_pickle_in_the_artifact_layout(tmp_path):
    path = tmp_path / "lengths.pkl"
    # ints, as the public file has them, and a token list, which the artifact also accepts
    path.write_bytes(pickle.dumps([(21, 518), (8, 66), ([5, 6, 7], 3)]))
    table = read_length_pairs(path)
    assert table.prompt_len.tolist() == [21, 8, 3]
    assert table.output_len.tolist() == [518, 66, 3]


class _Hostile:
    """Pickles into a call of ``os.system`` (what a malicious .pkl would carry)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("payload", ["bare", "inside-the-list"])
def test_a_hostile_pickle_is_refused_without_running_anything(tmp_path, payload):
    marker = tmp_path / "ran"
    hostile = _Hostile(f"touch {marker}")
    data = hostile if payload == "bare" else [(1, 2), (3, hostile)]
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(data))
    assert b"system" in path.read_bytes()  # the pickle really names os.system
    with pytest.raises(DataError, match=r"evil\.pkl: not a plain-data pickle .*refused global"):
        read_length_pairs(path)
    assert not marker.exists()


def test_the_unpickler_refuses_even_harmless_globals():
    with pytest.raises(pickle.UnpicklingError, match=r"refused global (__builtin__|builtins)\.set"):
        import io

        NoGlobalsUnpickler(io.BytesIO(pickle.dumps({1, 2}, protocol=2))).load()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "input_len,output_len\n3,4\n5,x\n",
            r"line 3: output_len must be an integer >= 0, got 'x'",
        ),
        ("prompt,output\n3,4\n", r"header prompt,output; expected input_len,output_len"),
        ("", r"empty file"),
    ],
)
def test_bad_csv_names_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "lengths.csv"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_length_pairs(path)


def test_bad_pickles_name_the_file(tmp_path):
    path = tmp_path / "lengths.pkl"
    path.write_bytes(pickle.dumps([(1, -2)]))
    with pytest.raises(DataError, match=r"lengths\.pkl: item 0: a length must be an int >= 0"):
        read_length_pairs(path)
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(DataError, match=r"expected a list of \(input_len, output_len\) pairs"):
        read_length_pairs(path)
    path.write_bytes(b"not a pickle")
    with pytest.raises(DataError, match=r"lengths\.pkl: not a"):
        read_length_pairs(path)
    other = tmp_path / "lengths.json"
    other.write_text("[]")
    with pytest.raises(DataError, match=r"expected the artifact's \.pkl or a \.csv"):
        read_length_pairs(other)
