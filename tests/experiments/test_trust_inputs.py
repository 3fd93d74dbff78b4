"""Trustworthy runs, inputs (issue #15): no stale cache, no silent empty results,
the step costs' source in every output, prepare, inputs that were silently accepted.

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
from trust_helpers import cli, csv_trace, replay_doc, run_file, synthetic_doc

from pagesim.errors import ConfigError
from pagesim.experiments import runner as runner_module
from pagesim.experiments.inputs import FileHasher
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

# ---- the cache key covers file contents ------------------------------------------------


def test_edited_trace_csv_is_not_served_from_cache(write_doc, tmp_path):
    trace = csv_trace(tmp_path / "t.csv", [(0.0, 20, 10), (0.5, 30, 12), (1.0, 25, 8)])
    path = write_doc(replay_doc(trace))
    first = run_file(path, tmp_path / "out")
    assert first.num_computed == 1
    csv_trace(trace, [(0.0, 20, 10), (0.5, 30, 12), (1.0, 25, 8), (1.5, 40, 9)])
    second = run_file(path, tmp_path / "out")
    assert second.num_computed == 1
    assert second.results["num_finished"].tolist() == [4.0]


def test_edited_profile_is_not_served_from_cache(write_doc, tmp_path):
    from pagesim.simulator.costmodel.analytic import analytic_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    profile = analytic_profile(get_gpu("a100-40gb"))
    profile_path = profile.with_terms(kind="synthetic", date="2026-01-01").save(tmp_path / "p.yaml")
    doc = synthetic_doc()
    doc["base"]["hardware"]["profile"] = str(profile_path)
    path = write_doc(doc)
    assert run_file(path, tmp_path / "out").num_computed == 2
    assert run_file(path, tmp_path / "out").num_computed == 0
    profile.with_terms(kind="synthetic", date="2026-01-02").save(profile_path)
    out = run_file(path, tmp_path / "out")
    assert out.num_computed == 2
    assert "2026-01-02" in out.results["cost_model_profile"].iloc[0]


def test_re_prepared_table_is_not_served_from_cache(write_doc, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    rows = [(i * 0.1, 50 + i, 20 + i) for i in range(30)]
    source = csv_trace(tmp_path / "conv.csv", rows)
    assert cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))[0] == 0
    doc = synthetic_doc()
    doc["base"]["workload"] = {"name": "azure-conv", "num_requests": 10}
    path = write_doc(doc)
    assert run_file(path, tmp_path / "out").num_computed == 2
    csv_trace(source, [(i * 0.1, 500 + i, 200 + i) for i in range(30)])
    assert cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))[0] == 0
    assert run_file(path, tmp_path / "out").num_computed == 2


def test_each_input_file_is_hashed_once_per_invocation(write_doc, tmp_path, monkeypatch):
    trace = csv_trace(tmp_path / "t.csv", [(0.0, 20, 10), (0.5, 30, 12)])
    doc = replay_doc(trace)
    doc["sweep"] = {"grid": {"allocator.block_size": [4, 8, 16, 32]}}
    doc["seeds"] = [0, 1, 2]
    hashers = []
    real = runner_module.FileHasher

    def spy() -> FileHasher:
        hashers.append(real())
        return hashers[-1]

    monkeypatch.setattr(runner_module, "FileHasher", spy)
    run_file(write_doc(doc), tmp_path / "out")
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
    trace = csv_trace(tmp_path / "t.csv", [(0.0, 3000, 10), (0.5, 2000, 12)])
    path = write_doc(replay_doc(trace))
    code, _, err = cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "no request was served" in err and "prompt_len > 1024: 2" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.csv").exists()


def test_all_rejected_is_an_error_naming_the_reason(write_doc, tmp_path, capsys):
    doc = synthetic_doc(n=8)
    doc["base"]["scheduler"] = {"max_num_seqs": 4}
    code, _, err = cli(capsys, "run", str(write_doc(doc)), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "no request was served: 20 rejected" in err
    assert "8 sequences exceed scheduler.max_num_seqs = 4: 20" in err


def test_heavy_loss_warns_and_is_reported(write_doc, tmp_path, capsys):
    rows = [(i * 0.1, 3000 if i % 2 else 40, 10) for i in range(20)]
    path = write_doc(replay_doc(csv_trace(tmp_path / "t.csv", rows)))
    code, _, err = cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 0
    assert "warning: point p000" in err and "lost 50% of its requests" in err
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert results["num_dropped"].tolist() == [10.0]
    assert results["dropped_reasons"].tolist() == ["prompt_len > 1024: 10"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Requests" in summary and "10 (50.0%)" in summary and "lost 50%" in summary


def test_redrawn_synthetic_lengths_are_reported(write_doc, tmp_path):
    doc = synthetic_doc(prompt={"dist": "uniform", "low": 10, "high": 2000})
    out = run_file(write_doc(doc), tmp_path / "out")
    reasons = out.results["dropped_reasons"].iloc[0]
    assert "prompt_len > 1024 (redrawn)" in reasons
    assert out.results["num_dropped"].iloc[0] > 0
    assert 0 < out.results["dropped_share"].iloc[0] < 1


# ---- where the step costs came from ------------------------------------------------------


def test_step_cost_source_in_results_summary_and_charts(write_doc, tmp_path):
    from pagesim.experiments.charts import step_cost_note

    doc = synthetic_doc()
    doc["charts"] = [{"kind": "latency_vs_rate", "x": "allocator.block_size"}]
    out = run_file(write_doc(doc), tmp_path / "out")
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert results["cost_model"].tolist() == ["analytic", "analytic"]
    assert results["cost_model_profile"].tolist() == ["analytic roofline of a100-40gb"] * 2
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Step costs" in summary and "**analytic**: analytic roofline of a100-40gb" in summary
    assert step_cost_note(out.results) == "step costs: analytic (analytic roofline of a100-40gb)"
    assert out.chart_paths


# ---- workload prepare --------------------------------------------------------------------


def test_prepare_writes_user_folder_not_package_and_says_replaced(tmp_path, monkeypatch, capsys):
    """Before: ``prepare sharegpt`` without --out overwrote the shipped table in place."""
    pytest.importorskip("tokenizers")
    from pagesim.workloads.lengthtable import load_table
    from pagesim.workloads.registry import DATA_DIR, WORKLOADS

    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    shipped = (DATA_DIR / "sharegpt.npz").read_bytes()
    source = Path(__file__).parents[1] / "workloads" / "data" / "sharegpt_sample.json"
    code, out, err = cli(capsys, "workload", "prepare", "sharegpt", "--source", str(source))
    assert code == 0 and "replaced" not in err
    target = tmp_path / "user" / "sharegpt.npz"
    assert target.is_file() and str(target) in out
    assert (DATA_DIR / "sharegpt.npz").read_bytes() == shipped
    assert WORKLOADS["sharegpt"].table_path == target  # runs read the prepared table
    num_rows = len(load_table(target))
    code, _, err = cli(capsys, "workload", "prepare", "sharegpt", "--source", str(source))
    assert code == 0 and f"replaced {target} (was {num_rows} rows)" in err


@pytest.mark.parametrize(
    ("rows", "needle"),
    [([], "no rows after the header"), ([(0.0, 3000, 10), (1.0, 2, 5)], "passes the default")],
)
def test_prepare_refuses_empty_or_unusable_tables(tmp_path, monkeypatch, capsys, rows, needle):
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    source = csv_trace(tmp_path / "c.csv", rows)
    code, _, err = cli(capsys, "workload", "prepare", "azure-conv", "--source", str(source))
    assert code == 2 and needle in err
    assert not (tmp_path / "user").exists()


# ---- inputs that were silently accepted --------------------------------------------------


def test_set_on_swept_path_is_an_error(tiny_doc, write_doc, capsys):
    code, _, err = cli(
        capsys, "run", str(write_doc(tiny_doc)), "--set", "allocator.kind=paged"
    )  # fmt: skip
    assert code == 2 and "--set allocator.kind: allocator.kind is swept" in err


def test_duplicate_yaml_key_is_an_error(tiny_doc, write_doc, tmp_path, capsys):
    path = write_doc(tiny_doc)
    path.write_text(path.read_text() + "seeds: [5]\n")
    code, _, err = cli(capsys, "validate", str(path))
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
    code, _, err = cli(capsys, "validate", str(path))
    assert code == 2 and needle in err and "rate_req_s" in err


def test_jobs_zero_is_an_error(tiny_doc, write_doc, tmp_path, capsys):
    code, _, err = cli(capsys, "run", str(write_doc(tiny_doc)), "--jobs", "0", "--out",
                        str(tmp_path / "out"))  # fmt: skip
    assert code == 2 and "--jobs 0: must be at least 1" in err
    assert not (tmp_path / "out").exists()


def test_yaml_12_numbers(write_doc, tmp_path):
    doc = synthetic_doc()
    path = write_doc(doc)
    path.write_text(path.read_text().replace("rate_req_s: 5.0", "rate_req_s: 5e-2"))
    assert load_experiment(path).base["arrivals"]["rate_req_s"] == 0.05
    path.write_text(path.read_text().replace("num_requests: 20", "num_requests: 2e1"))
    with pytest.raises(ConfigError, match=r"20.0 is a float, .*write 20"):
        load_experiment(path)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_run_failing_inside_a_sweep_names_its_point(write_doc, tmp_path, capsys, jobs):
    trace = csv_trace(tmp_path / "t.csv", [(i * 0.1, 50, 20) for i in range(10)])
    doc = synthetic_doc()
    doc["base"]["workload"] = {"name": "csv", "path": str(trace), "replace": False}
    doc["sweep"] = {"grid": {"workload.num_requests": [5, 10**6]}}
    code, _, err = cli(capsys, "run", str(write_doc(doc)), "--out", str(tmp_path / "o"),
                       "--jobs", jobs)  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "point p001 (1000000) seed 0: workload.num_requests = 1000000" in err


def test_simulate_command_with_nothing_served_is_an_error(tmp_path, capsys):
    trace = csv_trace(tmp_path / "t.csv", [(0.0, 3000, 10), (0.5, 2000, 12)])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"workload": {"name": "csv", "path": str(trace),
                                                "num_requests": None},
                                   "arrivals": {"process": "replay"}}))  # fmt: skip
    code, _, err = cli(capsys, "simulate", "--config", str(cfg))
    assert code == 2 and "no request was served" in err and "prompt_len > 1024: 2" in err


def test_prepare_refuses_a_nearly_fully_truncated_sharegpt(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "user"))
    record = {"id": "a", "conversations": [{"from": "human", "value": "Hello there, how are you"},
                                           {"from": "gpt", "value": "Fine, thank you very much"}]}  # fmt: skip
    whole = json.dumps(record)
    cut = json.dumps({**record, "id": "b", "pad": "x" * 5000})[:4000]
    source = tmp_path / "sg.json"
    source.write_text(f"[{whole}, {cut}")
    code, _, err = cli(capsys, "workload", "prepare", "sharegpt", "--source", str(source))
    assert code == 2 and "cut off after" in err and "1 whole records" in err
    assert not (tmp_path / "user").exists()


def test_shipped_external_profile_is_named_measured_elsewhere(write_doc, tmp_path):
    from pagesim.simulator.costmodel.factory import shipped_profile_names

    if "a100-80gb-vidur" not in shipped_profile_names():
        pytest.skip("the shipped profile a100-80gb-vidur is not installed")
    doc = synthetic_doc()
    doc["base"]["hardware"] = {"kv_slots": 4000, "gpu": "a100-80gb", "profile": "a100-80gb-vidur"}
    out = run_file(write_doc(doc), tmp_path / "out")
    assert out.results["cost_model"].tolist() == ["measured elsewhere"] * 2
    assert out.results["cost_model_profile"].iloc[0].startswith("a100-80gb-vidur (")
    assert "sha256:" in out.results["cost_model_profile"].iloc[0]
