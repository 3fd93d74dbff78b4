"""Trust, round two (issue #34): one line instead of a traceback (item 4), errors that
blame the right thing (item 5), inputs that say what they are (item 6), and a full disk
that keeps the runs finished before it (item 4, fault injection).

Each test feeds the bad input and checks the one-line message and that nothing was
written or changed.
"""

from __future__ import annotations

import errno
import json
import pathlib
from pathlib import Path

import pandas as pd
import pytest
from trust_helpers import cli, csv_trace, run_file, synthetic_doc

from pagesim.experiments import cache as cache_module

# ---- a full disk, mid-run ----------------------------------------------------------------


def _fill_disk_after(monkeypatch, num_ok: int, module, name: str) -> list[int]:
    """``module.name`` (a writer) raises ENOSPC from its ``num_ok + 1``-th call on."""
    real = getattr(module, name)
    calls = [0]

    def writer(*args, **kwargs):
        calls[0] += 1
        if calls[0] > num_ok:
            raise OSError(errno.ENOSPC, "No space left on device", str(args[-1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, writer)
    return calls


def _four_runs(write_doc) -> Path:
    doc = synthetic_doc()
    doc["seeds"] = [0, 1]
    return write_doc(doc)


def test_a_disk_that_fills_mid_run_keeps_the_runs_finished_before(write_doc, tmp_path, capsys,
                                                                   monkeypatch):  # fmt: skip
    path = _four_runs(write_doc)
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        # two tables per run: the third run's second table finds the disk full
        _fill_disk_after(patch, 5, cache_module, "write_table")
        code, _, err = cli(capsys, "run", str(path), "--out", str(out), "--jobs", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "No space left on device" in err
    assert "the 2 run(s) finished before it are stored whole" in err and "rerun" in err
    stored = sorted(p for p in (out / "runs").iterdir())
    assert [p.name.startswith(".tmp-") for p in stored] == [False, False]  # nothing half-made
    for folder in stored:  # each stored run is whole and readable
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["summary"]["num_finished"] > 0
        assert len(pd.read_csv(folder / "requests.csv.gz")) > 0
        assert len(pd.read_csv(folder / "timeseries.csv.gz")) > 0
    assert not (out / "results.csv").exists()
    # with space again, the rerun simulates only the two runs that are missing
    resumed = run_file(path, out)
    assert resumed.num_computed == 2
    fresh = run_file(path, tmp_path / "fresh")
    assert (out / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()
    assert fresh.num_computed == 4


def test_a_disk_that_fills_while_writing_outputs_leaves_the_old_ones(write_doc, tmp_path,
                                                                      capsys, monkeypatch):  # fmt: skip
    path = _four_runs(write_doc)
    out = tmp_path / "out"
    run_file(path, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    doc = synthetic_doc()
    doc["seeds"] = [0, 1, 2]
    path = write_doc(doc)
    real = pathlib.Path.write_bytes

    def full_disk(self, data):
        if self.name.startswith(".tmp-summary.md"):
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    with monkeypatch.context() as patch:
        patch.setattr(pathlib.Path, "write_bytes", full_disk)
        code, _, err = cli(capsys, "run", str(path), "--out", str(out), "--jobs", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{out}: cannot write the outputs (No space left on device" in err
    assert "free space and rerun" in err
    assert not list(out.rglob(".tmp-*"))  # no half-written file
    assert (out / "summary.md").read_bytes() == before["summary.md"]  # the old one, whole
    pd.read_csv(out / "results.csv")  # whole: the old one or the new one
    again = run_file(path, out)
    assert again.num_computed == 0  # every run was stored before the disk filled
    assert "3 seed(s)" in (out / "summary.md").read_text()


def test_a_full_disk_elsewhere_is_one_line(tmp_path, monkeypatch, capsys):
    """Any command: a write that finds the disk full is one line, never a traceback."""
    import pagesim.workloads.lengthtable as lengthtable

    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    source = csv_trace(tmp_path / "conv.csv", [(i * 0.1, 50 + i, 20 + i) for i in range(30)])
    _fill_disk_after(monkeypatch, 0, lengthtable.np, "savez_compressed")
    code, _, err = cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "No space left on device; nothing was half-written" in err
    assert not list((tmp_path / "user").glob("*"))


# ---- one line, never a traceback ---------------------------------------------------------


def test_data_folder_that_is_a_file(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "data"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PAGESIM_DATA", str(blocker))
    source = csv_trace(tmp_path / "conv.csv", [(i * 0.1, 50 + i, 20 + i) for i in range(30)])
    code, _, err = cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"PAGESIM_DATA={blocker}: the data folder {blocker} is a file, not a folder" in err
    assert blocker.read_text() == "not a folder"
    monkeypatch.setenv("PAGESIM_DATA", str(blocker / "sub"))
    code, _, err = cli(capsys, "workload", "list")
    assert code == 2 and f"lies under {blocker}, which is a file" in err


@pytest.mark.parametrize("depth", [100, 5000])
def test_yaml_nested_thousands_deep(tmp_path, capsys, depth):
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\nbase: " + "[" * depth + "]" * depth + "\n")
    code, _, err = cli(capsys, "validate", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: line 2, column" in err and "nested more than 64 levels deep" in err
    block = "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "1\n"
    path.write_text(block)
    code, _, err = cli(capsys, "validate", str(path))
    assert code == 2 and "nested more than 64 levels deep" in err


# ---- errors that blame the right thing -----------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("workload.num_requests=abc", "--set workload.num_requests=abc: Input should be a valid integer"),
        ("workload.num_requests=-5", "--set workload.num_requests=-5: Input should be greater than or equal to 1"),
        ("allocator.watermark=2", "--set allocator.watermark=2: Input should be less than 1"),
        ("workload.name=nope", "--set workload.name=nope: unknown workload 'nope'; allowed:"),
        ("allocator.kind=max", "--set allocator.kind=max: the spec: scheduler 'vllm'"),
        ("workload.prompt=[[[[1]]]]", "--set workload.prompt=[[[[1]]]]: "),
    ],
)  # fmt: skip
def test_a_bad_set_value_names_the_flag_not_the_file(write_doc, tmp_path, capsys, flag, message):
    doc = synthetic_doc()
    path = write_doc(doc)
    code, _, err = cli(capsys, "run", str(path), "--set", flag, "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"pagesim: error: {message}" in err
    assert str(path) not in err  # the file is not to blame
    assert not (tmp_path / "out").exists()


def test_a_point_refused_under_a_set_flag_says_which(write_doc, tmp_path, capsys):
    code, _, err = cli(capsys, "run", str(write_doc(synthetic_doc())), "--set",
                       "hardware.kv_slots=3", "--out", str(tmp_path / "out"))  # fmt: skip
    assert code == 2 and "(with --set hardware.kv_slots=3): point p000" in err
    assert "larger than the whole KV pool (3 slots)" in err


# ---- results name the table they used ------------------------------------------------------


def test_a_prepared_sample_table_is_named_in_the_results(write_doc, tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    doc = synthetic_doc()
    doc["base"]["workload"] = {"name": "sharegpt", "num_requests": 10}
    path = write_doc(doc)
    code, _, err = cli(capsys, "run", str(path), "--out", str(tmp_path / "shipped"))
    assert code == 0 and "not the shipped table" not in err
    assert "workload_table" not in pd.read_csv(tmp_path / "shipped" / "results.csv").columns
    assert "## Workload tables" not in (tmp_path / "shipped" / "summary.md").read_text()

    sample = Path(__file__).parents[1] / "workloads" / "data" / "sharegpt_sample.json"
    assert cli(capsys, "workload", "prepare", "sharegpt", "--source", str(sample))[0] == 0
    code, _, err = cli(capsys, "run", str(path), "--out", str(tmp_path / "prepared"))
    assert code == 0
    assert "note: not the shipped table: sharegpt: sharegpt.npz in the data folder" in err
    results = pd.read_csv(tmp_path / "prepared" / "results.csv")
    label = results["workload_table"].iloc[0]
    assert "sharegpt.npz in the data folder" in label and "12 rows" in label
    assert "sharegpt_sample.json" in label and "sha256:" in label
    assert str(tmp_path) not in label  # no machine path in results.csv
    summary = (tmp_path / "prepared" / "summary.md").read_text()
    assert "## Workload tables" in summary and "12 rows" in summary


def test_a_table_given_by_path_is_named_in_the_results(write_doc, tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("input_len,output_len\n" + "".join(f"{10 + i},{20 + i}\n" for i in range(7)))
    doc = synthetic_doc()
    doc["base"]["workload"] = {"name": "sharegpt-paper", "path": str(pairs), "num_requests": 10}
    out = run_file(write_doc(doc), tmp_path / "out")
    label = out.results["workload_table"].iloc[0]
    assert label.startswith(f"sharegpt-paper: {pairs}, sha256:") and "7 rows" in label
