"""Trustworthy runs, outputs and errors (issue #15): --quick, stale and foreign files,
tables stored once, and one-line errors instead of tracebacks.

Each test here failed before the fix it names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fake_sim import fake_simulate
from trust_helpers import cli, csv_trace, replay_doc, synthetic_doc

from pagesim.cli import main
from pagesim.errors import ConfigError
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

#: a bound on a subprocess against a hang only, far beyond what a loaded machine takes
PATIENCE_S = 1800

# ---- outputs: --quick, stale files, foreign files, stored once ---------------------------


def test_quick_never_mixes_with_a_full_run(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    run_experiment(load_experiment(path), tmp_path / "out", simulate=fake_simulate, jobs=1,
                   progress=False)  # fmt: skip
    before = (tmp_path / "out" / "results.csv").read_bytes()
    with pytest.raises(ConfigError, match="holds the outputs of a full run"):
        run_experiment(load_experiment(path, quick=True), tmp_path / "out",
                       simulate=fake_simulate, jobs=1, progress=False, variant="quick")  # fmt: skip
    assert (tmp_path / "out" / "results.csv").read_bytes() == before


def test_cli_quick_default_folder_differs(tiny_doc, write_doc, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = synthetic_doc()
    code, out, _ = cli(capsys, "run", str(write_doc(doc)), "--quick")
    assert code == 0 and str(Path("out") / "synth-quick") in out


def test_rerun_removes_stale_outputs_and_keeps_foreign_files(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    out = tmp_path / "out"
    run_experiment(load_experiment(path), out, simulate=fake_simulate, jobs=1, progress=False)
    (out / "notes.txt").write_text("mine")
    assert (out / "heatmap.png").is_file() and (out / "requests" / "p000_seed1.csv.gz").is_file()
    tiny_doc["charts"] = tiny_doc["charts"][:1]
    tiny_doc["seeds"] = [0]
    run_experiment(load_experiment(write_doc(tiny_doc)), out, simulate=fake_simulate, jobs=1,
                   progress=False)  # fmt: skip
    assert not (out / "heatmap.png").exists()
    assert not (out / "requests" / "p000_seed1.csv.gz").exists()
    assert (out / "requests" / "p000_seed0.csv.gz").is_file()
    assert (out / "notes.txt").read_text() == "mine"


def test_never_overwrites_a_file_it_did_not_write(tiny_doc, write_doc, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("my notes")
    with pytest.raises(ConfigError, match="summary.md exists and was not written by pagesim"):
        run_experiment(load_experiment(write_doc(tiny_doc)), out, simulate=fake_simulate,
                       jobs=1, progress=False)  # fmt: skip
    assert (out / "summary.md").read_text() == "my notes"


def test_per_run_tables_are_stored_once(tiny_doc, write_doc, tmp_path):
    out = tmp_path / "out"
    run_experiment(load_experiment(write_doc(tiny_doc)), out, simulate=fake_simulate, jobs=1,
                   progress=False)  # fmt: skip
    table = out / "timeseries" / "p000_seed0.csv.gz"
    assert table.stat().st_nlink == 2  # the cache's file and this name: one copy on disk
    manifest = json.loads((out / ".pagesim-outputs.json").read_text())
    assert manifest["variant"] == "full" and "timeseries/p000_seed0.csv.gz" in manifest["files"]


def test_leaked_tmp_folders_are_cleaned(tiny_doc, write_doc, tmp_path):
    out = tmp_path / "out"
    (out / "runs" / ".tmp-abc-999999999-deadbeef").mkdir(parents=True)
    (out / ".tmp-results.csv-999999999-deadbeef").write_text("x")
    run_experiment(load_experiment(write_doc(tiny_doc)), out, simulate=fake_simulate, jobs=1,
                   progress=False)  # fmt: skip
    assert not list(out.rglob(".tmp-*"))


# ---- one line, never a traceback ---------------------------------------------------------


def test_out_that_is_a_file_or_under_a_file(tiny_doc, write_doc, tmp_path, capsys):
    path = write_doc(tiny_doc)
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    code, _, err = cli(capsys, "run", str(path), "--out", str(blocker))
    assert code == 2 and "is a file, not a folder" in err
    code, _, err = cli(capsys, "run", str(path), "--out", str(blocker / "sub"))
    assert code == 2 and f"{blocker} is a file, not a folder" in err


def test_out_not_writable(tiny_doc, write_doc, tmp_path, capsys):
    import os

    if os.geteuid() == 0:
        # root may write anywhere but in the kernel's pseudo file systems
        if not Path("/proc/self").is_dir():
            pytest.skip("root, and no /proc to stand for an unwritable folder")
        target = Path("/proc") / "pagesim-out"
        needle = "cannot create the folder"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target, needle = locked / "o", "is not writable"
    code, _, err = cli(capsys, "run", str(write_doc(tiny_doc)), "--out", str(target))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_non_utf8_experiment_file(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    code, _, err = cli(capsys, "validate", str(path))
    assert code == 2 and "not UTF-8 text" in err and len(err.splitlines()) == 1


def test_negative_seed(tiny_doc, write_doc, capsys):
    tiny_doc["seeds"] = [-1]
    code, _, err = cli(capsys, "validate", str(write_doc(tiny_doc)))
    assert code == 2 and "seeds must be >= 0" in err
    code, _, err = cli(capsys, "simulate", "--seed", "-1", "--num-requests", "5")
    assert code == 2 and "seed" in err and "greater than or equal to 0" in err


def test_huge_kv_pool_is_refused_before_allocating(write_doc, tmp_path, capsys):
    doc = synthetic_doc()
    doc["base"]["hardware"] = {"kv_slots": 10**12}
    code, _, err = cli(capsys, "validate", str(write_doc(doc)))
    assert code == 2 and "too large to simulate" in err


def test_bad_point_among_many_is_named(write_doc, tmp_path, capsys):
    doc = synthetic_doc()
    doc["base"]["hardware"] = {"kv_slots": 20}
    doc["sweep"] = {"grid": {"allocator.block_size": [4, 8, 16, 32]}}
    code, _, err = cli(capsys, "validate", str(write_doc(doc)))
    assert code == 2 and "point p003 (allocator.block_size=32)" in err
    assert "larger than the whole KV pool (20 slots)" in err


@pytest.mark.parametrize(
    ("base", "needle"),
    [
        ({"workload": {"name": "csv", "path": "missing.csv"}}, "workload.path: file not found"),
        ({"hardware": {"profile": "missing.yaml"}}, "hardware.profile: file not found"),
        ({"arrivals": {"process": "replay"}}, "'replay' needs a timestamped workload"),
    ],
)
def test_validate_catches_what_run_would_reject(write_doc, tmp_path, capsys, base, needle):
    doc = synthetic_doc()
    for section, values in base.items():
        doc["base"][section] = {**doc["base"].get(section, {}), **values}
    path = write_doc(doc)
    code, _, err = cli(capsys, "validate", str(path))
    assert code == 2 and needle in err
    code, _, err = cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and needle in err
    assert not (tmp_path / "out").exists()


def test_failed_run_leaves_no_empty_folder(write_doc, tmp_path, capsys):
    trace = csv_trace(tmp_path / "t.csv", [(0.0, 3000, 10)])
    code, _, _ = cli(capsys, "run", str(write_doc(replay_doc(trace))), "--out",
                      str(tmp_path / "a" / "b"))  # fmt: skip
    assert code == 2
    assert not (tmp_path / "a").exists() or any((tmp_path / "a").rglob("summary.json"))


def test_bad_profile_and_config_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [measured\ngpu_name: x\n")
    code, _, err = cli(capsys, "simulate", "--config", str(bad))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "line" in err
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"hardware": {"profile": str(bad)}}))
    code, _, err = cli(capsys, "simulate", "--config", str(cfg), "--num-requests", "5")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.yaml" in err


class _ClosedPipe:
    """A stdout whose reader has gone (``pagesim list | head -1``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise ValueError("no descriptor")


def test_output_piped_into_head_is_quiet(monkeypatch):
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["list"]) == 141


def test_output_piped_into_head_in_a_shell(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        f"{sys.executable} -m pagesim list | head -1",
        shell=True, capture_output=True, text=True, timeout=PATIENCE_S,
    )  # fmt: skip
    assert proc.stdout.strip() and "Traceback" not in proc.stderr


def test_progress_flag_forces_bars_off_a_terminal(write_doc, tmp_path):
    import subprocess
    import sys

    path = write_doc(synthetic_doc())
    proc = subprocess.run(
        [sys.executable, "-m", "pagesim", "run", str(path), "--out", str(tmp_path / "o"),
         "--progress", "--jobs", "1"],
        capture_output=True, text=True, timeout=PATIENCE_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "run/s" in proc.stderr or "s/run" in proc.stderr
    assert "req" in proc.stderr  # the in-run bar: requests done, with an ETA


def test_folder_from_before_manifests_is_adopted(tiny_doc, write_doc, tmp_path):
    out = tmp_path / "out"
    path = write_doc(tiny_doc)
    run_experiment(load_experiment(path), out, simulate=fake_simulate, jobs=1, progress=False)
    (out / ".pagesim-outputs.json").unlink()
    run_experiment(load_experiment(path), out, simulate=fake_simulate, jobs=1, progress=False)
    assert (out / ".pagesim-outputs.json").is_file()


def test_run_interrupted_while_writing_outputs_reruns(tiny_doc, write_doc, tmp_path, monkeypatch):
    import pagesim.experiments.summary as summary_module

    path = write_doc(tiny_doc)
    out = tmp_path / "out"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(summary_module, "write_summary", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(load_experiment(path), out, simulate=fake_simulate, jobs=1,
                           progress=False)  # fmt: skip
    (out / "experiment.json").unlink()  # as if interrupted before it was written
    again = run_experiment(load_experiment(path), out, simulate=fake_simulate, jobs=1,
                           progress=False)  # fmt: skip
    assert again.num_computed == 0 and (out / "summary.md").is_file()
