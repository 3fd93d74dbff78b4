import numpy as np
import pytest

from pagesim.errors import DataError
from pagesim.workloads import lengthtable
from pagesim.workloads.lengthtable import LengthTable, load_table, save_table


def _table() -> LengthTable:
    return LengthTable(
        prompt_len=np.array([1, 2, 3]),
        output_len=np.array([4, 5, 6]),
        arrival_s=np.array([0.0, 0.5, 1.5]),
        conv_ids=np.array([0, 0, 1]),
        source_note="note",
    )


def test_roundtrip(tmp_path):
    path = save_table(_table(), tmp_path / "t.npz")
    back = load_table(path)
    assert back.prompt_len.tolist() == [1, 2, 3] and back.output_len.tolist() == [4, 5, 6]
    assert back.arrival_s.tolist() == [0.0, 0.5, 1.5] and back.conv_ids.tolist() == [0, 0, 1]
    assert back.source_note == "note"


def test_failed_write_leaves_old_table_and_no_temp(tmp_path, monkeypatch):
    path = save_table(_table(), tmp_path / "t.npz")
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(lengthtable.np, "savez_compressed", boom)
    with pytest.raises(OSError, match="disk full"):
        save_table(_table(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]


def test_negative_lengths_rejected(tmp_path):
    path = tmp_path / "neg.npz"
    np.savez(path, prompt_len=np.array([3, -1]), output_len=np.array([1, 1]))
    with pytest.raises(DataError, match=r"neg.npz: row 1: prompt_len must be >= 0, got -1"):
        load_table(path)


def test_float_lengths_rejected(tmp_path):
    path = tmp_path / "float.npz"
    np.savez(path, prompt_len=np.array([3.5]), output_len=np.array([1]))
    with pytest.raises(DataError, match="must be integer"):
        load_table(path)


def test_unreadable_and_missing(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(DataError, match="bad.npz: not a readable length table"):
        load_table(bad)
    with pytest.raises(DataError, match="not found"):
        load_table(tmp_path / "none.npz")


def test_column_length_mismatch():
    with pytest.raises(DataError, match="output_len has 1 rows, expected 2"):
        LengthTable(prompt_len=np.array([1, 2]), output_len=np.array([1]))
