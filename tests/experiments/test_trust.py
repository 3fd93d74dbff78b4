"""Trustworthy runs (issue #15): no stale cache, no silent empty results, owned outputs.

Each test here failed before the fix it names. Runs use the real simulator on tiny
synthetic or CSV workloads (well under a second each) unless the fake one suffices.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fake_sim import fake_simulate

from pagesim.cli import main
from pagesim.errors import ConfigError
from pagesim.experiments import runner as runner_module
from pagesim.experiments.inputs import FileHasher
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

CSV_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def _csv(path: Path, rows: list[tuple[float, int, int]]) -> Path:
    path.write_text(CSV_HEADER + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    return path


def _replay_doc(csv_path: Path, **base: dict) -> dict:
    doc = {
        "name": "replay",
        "base": {
            "hardware": {"kv_slots": 4000},
            "workload": {"name": "csv", "path": str(csv_path), "num_requests": None},
            "arrivals": {"process": "replay"},
            **base,
        },
        "charts": [{"kind": "latency_vs_rate", "x": "label"}],
    }
    return doc


def _synthetic_doc(**workload) -> dict:
    return {
        "name": "synth",
        "base": {
            "hardware": {"kv_slots": 4000},
            "workload": {"name": "synthetic", "num_requests": 20, **workload},
            "arrivals": {"process": "poisson", "rate_req_s": 5.0},
        },
        "sweep": {"grid": {"allocator.block_size": [8, 16]}},
    }


def _run(path: Path, out: Path, **kwargs):
    return run_experiment(
        load_experiment(path), out, jobs=1, progress=False, source=str(path), **kwargs
    )


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---- the cache key covers file contents ------------------------------------------------


def test_edited_trace_csv_is_not_served_from_cache(write_doc, tmp_path):
    trace = _csv(tmp_path / "t.csv", [(0.0, 20, 10), (0.5, 30, 12), (1.0, 25, 8)])
    path = write_doc(_replay_doc(trace))
    first = _run(path, tmp_path / "out")
    assert first.num_computed == 1
    _csv(trace, [(0.0, 20, 10), (0.5, 30, 12), (1.0, 25, 8), (1.5, 40, 9)])
    second = _run(path, tmp_path / "out")
    assert second.num_computed == 1
    assert second.results["num_finished"].tolist() == [4.0]


def test_edited_profile_is_not_served_from_cache(write_doc, tmp_path):
    from pagesim.simulator.costmodel.analytic import analytic_profile
    from pagesim.simulator.specs import get_gpu

    profile = analytic_profile(get_gpu("a100-40gb"))
    profile_path = profile.with_terms(kind="synthetic", date="2026-01-01").save(tmp_path / "p.yaml")
    doc = _synthetic_doc()
    doc["base"]["hardware"]["profile"] = str(profile_path)
    path = write_doc(doc)
    assert _run(path, tmp_path / "out").num_computed == 2
    assert _run(path, tmp_path / "out").num_computed == 0
    profile.with_terms(kind="synthetic", date="2026-01-02").save(profile_path)
    out = _run(path, tmp_path / "out")
    assert out.num_computed == 2
    assert "2026-01-02" in out.results["cost_model_profile"].iloc[0]


def test_re_prepared_table_is_not_served_from_cache(write_doc, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAGESIM_USER_DIR", str(tmp_path / "user"))
    rows = [(i * 0.1, 50 + i, 20 + i) for i in range(30)]
    source = _csv(tmp_path / "conv.csv", rows)
    assert _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))[0] == 0
    doc = _synthetic_doc()
    doc["base"]["workload"] = {"name": "azure-conv", "num_requests": 10}
    path = write_doc(doc)
    assert _run(path, tmp_path / "out").num_computed == 2
    _csv(source, [(i * 0.1, 500 + i, 200 + i) for i in range(30)])
    assert _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))[0] == 0
    assert _run(path, tmp_path / "out").num_computed == 2


def test_each_input_file_is_hashed_once_per_invocation(write_doc, tmp_path, monkeypatch):
    trace = _csv(tmp_path / "t.csv", [(0.0, 20, 10), (0.5, 30, 12)])
    doc = _replay_doc(trace)
    doc["sweep"] = {"grid": {"allocator.block_size": [4, 8, 16, 32]}}
    doc["seeds"] = [0, 1, 2]
    hashers = []
    real = runner_module.FileHasher

    def spy() -> FileHasher:
        hashers.append(real())
        return hashers[-1]

    monkeypatch.setattr(runner_module, "FileHasher", spy)
    _run(write_doc(doc), tmp_path / "out")
    assert [h.num_reads for h in hashers] == [1]


def test_completion_path_computes_each_key_once(tiny_doc, write_doc, tmp_path, monkeypatch):
    """Before: every completion recomputed the key of every missing run (O(N^2))."""
    calls = []
    real = runner_module.run_key
    monkeypatch.setattr(runner_module, "run_key", lambda *a: calls.append(1) or real(*a))
    out = run_experiment(
        load_experiment(write_doc(tiny_doc)), tmp_path / "out", simulate=fake_simulate,
        jobs=1, progress=False,
    )  # fmt: skip
    assert out.num_runs == 16 and len(calls) == 16


# ---- empty or gutted runs ----------------------------------------------------------------


def test_all_prompts_filtered_is_an_error_naming_the_filter(write_doc, tmp_path, capsys):
    trace = _csv(tmp_path / "t.csv", [(0.0, 3000, 10), (0.5, 2000, 12)])
    path = write_doc(_replay_doc(trace))
    code, _, err = _cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "no request was served" in err and "prompt_len > 1024: 2" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.csv").exists()


def test_all_rejected_is_an_error_naming_the_reason(write_doc, tmp_path, capsys):
    doc = _synthetic_doc(n=8)
    doc["base"]["scheduler"] = {"max_num_seqs": 4}
    code, _, err = _cli(capsys, "run", str(write_doc(doc)), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "no request was served: 20 rejected" in err
    assert "8 sequences exceed scheduler.max_num_seqs = 4: 20" in err


def test_heavy_loss_warns_and_is_reported(write_doc, tmp_path, capsys):
    rows = [(i * 0.1, 3000 if i % 2 else 40, 10) for i in range(20)]
    path = write_doc(_replay_doc(_csv(tmp_path / "t.csv", rows)))
    code, _, err = _cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 0
    assert "warning: point p000" in err and "lost 50% of its requests" in err
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert results["num_dropped"].tolist() == [10.0]
    assert results["dropped_reasons"].tolist() == ["prompt_len > 1024: 10"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Requests" in summary and "10 (50.0%)" in summary and "lost 50%" in summary


def test_redrawn_synthetic_lengths_are_reported(write_doc, tmp_path):
    doc = _synthetic_doc(prompt={"dist": "uniform", "low": 10, "high": 2000})
    out = _run(write_doc(doc), tmp_path / "out")
    reasons = out.results["dropped_reasons"].iloc[0]
    assert "prompt_len > 1024 (redrawn)" in reasons
    assert out.results["num_dropped"].iloc[0] > 0
    assert 0 < out.results["dropped_share"].iloc[0] < 1


# ---- where the step costs came from ------------------------------------------------------


def test_step_cost_source_in_results_summary_and_charts(write_doc, tmp_path):
    from pagesim.experiments.charts import step_cost_note

    doc = _synthetic_doc()
    doc["charts"] = [{"kind": "latency_vs_rate", "x": "allocator.block_size"}]
    out = _run(write_doc(doc), tmp_path / "out")
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert results["cost_model"].tolist() == ["analytic", "analytic"]
    assert results["cost_model_profile"].tolist() == ["analytic roofline of a100-40gb"] * 2
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Step costs" in summary and "**analytic**: analytic roofline of a100-40gb" in summary
    assert step_cost_note(out.results) == "step costs: analytic (analytic roofline of a100-40gb)"
    assert out.chart_paths


# ---- workload prepare --------------------------------------------------------------------


def test_prepare_writes_user_folder_not_package_and_says_replaced(tmp_path, monkeypatch, capsys):
    from pagesim.workloads.registry import DATA_DIR, WORKLOADS

    monkeypatch.setenv("PAGESIM_USER_DIR", str(tmp_path / "user"))
    shipped = (DATA_DIR / "azure_conv.npz").read_bytes()
    source = _csv(tmp_path / "c.csv", [(i * 0.1, 50, 20) for i in range(10)])
    code, out, err = _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 0 and "replaced" not in err
    target = tmp_path / "user" / "workloads" / "azure_conv.npz"
    assert target.is_file() and str(target) in out
    assert (DATA_DIR / "azure_conv.npz").read_bytes() == shipped
    assert WORKLOADS["azure-conv"].table_path == target
    code, _, err = _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 0 and f"replaced {target} (was 10 rows)" in err


@pytest.mark.parametrize(
    ("rows", "needle"),
    [([], "no rows after the header"), ([(0.0, 3000, 10), (1.0, 2, 5)], "passes the default")],
)
def test_prepare_refuses_empty_or_unusable_tables(tmp_path, monkeypatch, capsys, rows, needle):
    monkeypatch.setenv("PAGESIM_USER_DIR", str(tmp_path / "user"))
    source = _csv(tmp_path / "c.csv", rows)
    code, _, err = _cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and needle in err
    assert not (tmp_path / "user").exists()


# ---- inputs that were silently accepted --------------------------------------------------


def test_set_on_swept_path_is_an_error(tiny_doc, write_doc, capsys):
    code, _, err = _cli(
        capsys, "run", str(write_doc(tiny_doc)), "--set", "allocator.kind=paged"
    )  # fmt: skip
    assert code == 2 and "--set allocator.kind: allocator.kind is swept" in err


def test_duplicate_yaml_key_is_an_error(tiny_doc, write_doc, tmp_path, capsys):
    path = write_doc(tiny_doc)
    path.write_text(path.read_text() + "seeds: [5]\n")
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and "duplicate key 'seeds'" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("value", "needle"),
    [(".inf", "inf is infinite"), (".nan", "not a number (NaN)"), ("-1", "greater than 0")],
)
def test_non_finite_rates_are_errors(tiny_doc, write_doc, capsys, value, needle):
    tiny_doc["base"]["arrivals"]["rate_req_s"] = "PLACEHOLDER"
    del tiny_doc["sweep"]["grid"]
    path = write_doc(tiny_doc)
    path.write_text(path.read_text().replace("PLACEHOLDER", value))
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and needle in err and "rate_req_s" in err


def test_jobs_zero_is_an_error(tiny_doc, write_doc, tmp_path, capsys):
    code, _, err = _cli(capsys, "run", str(write_doc(tiny_doc)), "--jobs", "0", "--out",
                        str(tmp_path / "out"))  # fmt: skip
    assert code == 2 and "--jobs 0: must be at least 1" in err
    assert not (tmp_path / "out").exists()


def test_yaml_12_numbers(write_doc, tmp_path):
    doc = _synthetic_doc()
    path = write_doc(doc)
    path.write_text(path.read_text().replace("rate_req_s: 5.0", "rate_req_s: 5e-2"))
    assert load_experiment(path).base["arrivals"]["rate_req_s"] == 0.05
    path.write_text(path.read_text().replace("num_requests: 20", "num_requests: 2e1"))
    with pytest.raises(ConfigError, match=r"20.0 is a float, .*write 20"):
        load_experiment(path)


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
    doc = _synthetic_doc()
    code, out, _ = _cli(capsys, "run", str(write_doc(doc)), "--quick")
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
    code, _, err = _cli(capsys, "run", str(path), "--out", str(blocker))
    assert code == 2 and "is a file, not a folder" in err
    code, _, err = _cli(capsys, "run", str(path), "--out", str(blocker / "sub"))
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
    code, _, err = _cli(capsys, "run", str(write_doc(tiny_doc)), "--out", str(target))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_non_utf8_experiment_file(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and "not UTF-8 text" in err and len(err.splitlines()) == 1


def test_negative_seed(tiny_doc, write_doc, capsys):
    tiny_doc["seeds"] = [-1]
    code, _, err = _cli(capsys, "validate", str(write_doc(tiny_doc)))
    assert code == 2 and "seeds must be >= 0" in err
    code, _, err = _cli(capsys, "simulate", "--seed", "-1", "--num-requests", "5")
    assert code == 2 and "seed" in err and "greater than or equal to 0" in err


def test_huge_kv_pool_is_refused_before_allocating(write_doc, tmp_path, capsys):
    doc = _synthetic_doc()
    doc["base"]["hardware"] = {"kv_slots": 10**12}
    code, _, err = _cli(capsys, "validate", str(write_doc(doc)))
    assert code == 2 and "too large to simulate" in err


def test_bad_point_among_many_is_named(write_doc, tmp_path, capsys):
    doc = _synthetic_doc()
    doc["base"]["hardware"] = {"kv_slots": 20}
    doc["sweep"] = {"grid": {"allocator.block_size": [4, 8, 16, 32]}}
    code, _, err = _cli(capsys, "validate", str(write_doc(doc)))
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
    doc = _synthetic_doc()
    for section, values in base.items():
        doc["base"][section] = {**doc["base"].get(section, {}), **values}
    path = write_doc(doc)
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and needle in err
    code, _, err = _cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and needle in err
    assert not (tmp_path / "out").exists()


def test_failed_run_leaves_no_empty_folder(write_doc, tmp_path, capsys):
    trace = _csv(tmp_path / "t.csv", [(0.0, 3000, 10)])
    code, _, _ = _cli(capsys, "run", str(write_doc(_replay_doc(trace))), "--out",
                      str(tmp_path / "a" / "b"))  # fmt: skip
    assert code == 2
    assert not (tmp_path / "a").exists() or any((tmp_path / "a").rglob("summary.json"))


def test_bad_profile_and_config_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [measured\ngpu_name: x\n")
    code, _, err = _cli(capsys, "simulate", "--config", str(bad))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "line" in err
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"hardware": {"profile": str(bad)}}))
    code, _, err = _cli(capsys, "simulate", "--config", str(cfg), "--num-requests", "5")
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
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout.strip() and "Traceback" not in proc.stderr


def test_progress_flag_forces_bars_off_a_terminal(write_doc, tmp_path):
    import subprocess
    import sys

    path = write_doc(_synthetic_doc())
    proc = subprocess.run(
        [sys.executable, "-m", "pagesim", "run", str(path), "--out", str(tmp_path / "o"),
         "--progress", "--jobs", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "run/s" in proc.stderr or "s/run" in proc.stderr
    assert "req" in proc.stderr  # the in-run bar: requests done, with an ETA


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_run_failing_inside_a_sweep_names_its_point(write_doc, tmp_path, capsys, jobs):
    doc = _synthetic_doc()
    doc["base"]["workload"] = {"name": "azure-conv", "num_requests": 5, "replace": False}
    doc["sweep"] = {"grid": {"workload.num_requests": [5, 10**6]}}
    code, _, err = _cli(capsys, "run", str(write_doc(doc)), "--out", str(tmp_path / "o"),
                        "--jobs", jobs)  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "point p001 (1000000) seed 0: workload.num_requests = 1000000" in err


def test_simulate_command_with_nothing_served_is_an_error(tmp_path, capsys):
    trace = _csv(tmp_path / "t.csv", [(0.0, 3000, 10), (0.5, 2000, 12)])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"workload": {"name": "csv", "path": str(trace),
                                                "num_requests": None},
                                   "arrivals": {"process": "replay"}}))  # fmt: skip
    code, _, err = _cli(capsys, "simulate", "--config", str(cfg))
    assert code == 2 and "no request was served" in err and "prompt_len > 1024: 2" in err


def test_prepare_refuses_a_nearly_fully_truncated_sharegpt(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("PAGESIM_USER_DIR", str(tmp_path / "user"))
    record = {"id": "a", "conversations": [{"from": "human", "value": "Hello there, how are you"},
                                           {"from": "gpt", "value": "Fine, thank you very much"}]}  # fmt: skip
    whole = json.dumps(record)
    cut = json.dumps({**record, "id": "b", "pad": "x" * 5000})[:4000]
    source = tmp_path / "sg.json"
    source.write_text(f"[{whole}, {cut}")
    code, _, err = _cli(capsys, "workload", "prepare", "sharegpt", "--source", str(source))
    assert code == 2 and "cut off after" in err and "1 whole records" in err
    assert not (tmp_path / "user").exists()


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
