"""The runner: outputs, determinism, the cache (resume after an interruption), golden output."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pandas as pd
import pytest
from fake_sim import fake_simulate

from pagesim.experiments.cache import RunCache, run_key
from pagesim.experiments.inputs import FileHasher
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment
from pagesim.simulator.result import METRIC_COLUMNS

GOLDEN = Path(__file__).parent / "golden" / "tiny_results.csv"


class CountingSimulate:
    """fake_simulate that counts its calls and can fail on the n-th (an interruption)."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.num_calls = 0
        self.fail_on_call = fail_on_call

    def __call__(self, spec, **kwargs):
        self.num_calls += 1
        if self.num_calls == self.fail_on_call:
            raise KeyboardInterrupt
        return fake_simulate(spec, **kwargs)


def _key(spec) -> str:
    return run_key(spec, FileHasher().input_hashes(spec))


def _run(path: Path, out: Path, simulate=fake_simulate, jobs: int = 1, **kwargs):
    return run_experiment(
        load_experiment(path),
        out,
        simulate=simulate,
        jobs=jobs,
        progress=False,
        source=str(path),
        **kwargs,
    )


def test_outputs_written(tiny_doc, write_doc, tmp_path):
    out = _run(write_doc(tiny_doc), tmp_path / "out")
    assert out.num_runs == 16 and out.num_computed == 16
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(results.columns[:6]) == [
        "point",
        "label",
        "scheduler.kind",
        "allocator.kind",
        "arrivals.rate_req_s",
        "num_seeds",
    ]
    metrics = [m for m in METRIC_COLUMNS if m != "sim_wall_s"]
    assert [c for c in results.columns if c in METRIC_COLUMNS] == metrics
    assert "sim_wall_s" not in results.columns
    assert "throughput_req_s_ci95" in results.columns
    walls = pd.read_csv(tmp_path / "out" / "wall_times.csv")
    assert len(walls) == 16 and walls["sim_wall_s"].notna().all()
    assert (tmp_path / "out" / "timeseries" / "p007_seed1.csv.gz").is_file()
    assert (tmp_path / "out" / "requests" / "p000_seed0.csv.gz").is_file()
    assert sorted(p.name for p in out.chart_paths) == [
        "heatmap.png",
        "latency_vs_rate.png",
        "memory_breakdown.png",
        "memory_over_time.png",
    ]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert (
        "## Paper comparison (fig2)" in summary
        and "| orca+max | mem_token_frac | 20.4 |" in summary
    )


def test_mean_and_ci95_over_seeds(tiny_doc, write_doc, tmp_path):
    _run(write_doc(tiny_doc), tmp_path / "out")
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    cache = RunCache(tmp_path / "out" / "runs")
    spec = load_experiment(tmp_path / "exp.yaml")
    from pagesim.experiments.validate import validate_points

    point, run_spec = validate_points(spec, "x")[3]
    values = [
        cache.load_summary(_key(run_spec.model_copy(update={"seed": s})))[0]["throughput_req_s"]
        for s in (0, 1)
    ]
    row = results[results["point"] == point.point_id].iloc[0]
    assert row["throughput_req_s"] == pytest.approx(sum(values) / 2)
    assert row["throughput_req_s_ci95"] == pytest.approx(12.706 * abs(values[0] - values[1]) / 2)


def test_same_file_same_results_bytes(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    _run(path, tmp_path / "a")
    _run(path, tmp_path / "b", jobs=2)
    assert (tmp_path / "a" / "results.csv").read_bytes() == (
        tmp_path / "b" / "results.csv"
    ).read_bytes()
    for name in ("timeseries/p005_seed1.csv.gz", "requests/p002_seed0.csv.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_rerun_uses_the_cache(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    _run(path, tmp_path / "out")
    counting = CountingSimulate()
    out = _run(path, tmp_path / "out", simulate=counting)
    assert counting.num_calls == 0 and out.num_computed == 0


def test_interrupted_sweep_resumes_with_only_missing_runs(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    interrupted = CountingSimulate(fail_on_call=6)
    with pytest.raises(KeyboardInterrupt):
        _run(path, tmp_path / "out", simulate=interrupted)
    runs_dir = tmp_path / "out" / "runs"
    assert len([p for p in runs_dir.iterdir() if not p.name.startswith(".tmp")]) == 5
    assert not [p for p in runs_dir.iterdir() if p.name.startswith(".tmp")]
    resumed = CountingSimulate()
    out = _run(path, tmp_path / "out", simulate=resumed)
    assert resumed.num_calls == 11 and out.num_computed == 11
    _run(path, tmp_path / "fresh")
    assert (tmp_path / "out" / "results.csv").read_bytes() == (
        tmp_path / "fresh" / "results.csv"
    ).read_bytes()


def test_changed_field_is_not_served_from_cache(tiny_doc, write_doc, tmp_path):
    path = write_doc(tiny_doc)
    _run(path, tmp_path / "out")
    spec = load_experiment(path, overrides={"workload.num_requests": 21})
    counting = CountingSimulate()
    run_experiment(spec, tmp_path / "out", simulate=counting, jobs=1, progress=False)
    assert counting.num_calls == 16


def test_run_key_depends_on_every_field():
    from pagesim.simulator.spec import RunSpec

    base = RunSpec()
    assert run_key(base) == run_key(RunSpec())
    assert run_key(base) != run_key(base.model_copy(update={"seed": 1}))
    assert run_key(base) != run_key(RunSpec.model_validate({"allocator": {"watermark": 0.02}}))


def test_cached_tables_are_deterministic_gzip(tiny_doc, write_doc, tmp_path):
    _run(write_doc(tiny_doc), tmp_path / "out")
    data = (tmp_path / "out" / "timeseries" / "p000_seed0.csv.gz").read_bytes()
    assert data[4:8] == b"\x00\x00\x00\x00"  # gzip mtime field is zero
    assert gzip.decompress(data).startswith(b"t_s,")


def test_golden_results(tiny_doc, write_doc, tmp_path):
    """results.csv of the tiny experiment on the fake simulator, pinned byte for byte
    (wall time lives in wall_times.csv, so nothing is excluded). Regenerate with
    PAGESIM_UPDATE_GOLDEN=1 after an intended change of the output format."""
    _run(write_doc(tiny_doc), tmp_path / "out")
    produced = (tmp_path / "out" / "results.csv").read_text()
    if os.environ.get("PAGESIM_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(produced)
    assert produced == GOLDEN.read_text()


def test_missing_chart_column_is_reported_not_dropped(tiny_doc, write_doc, tmp_path):
    tiny_doc["charts"] = [{"kind": "latency_vs_rate", "y": "no_such_metric"}]
    out = _run(write_doc(tiny_doc), tmp_path / "out")
    assert out.chart_paths == ()
    assert "y 'no_such_metric' is not a column" in out.chart_problems[0]
    assert "no_such_metric" in (tmp_path / "out" / "summary.md").read_text()
