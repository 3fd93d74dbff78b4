"""No run grows until the kernel kills it (issue #34, item 2): a run too large for the
machine's memory is refused before anything is built, in one line naming the key, the
estimate, the memory and the setting that would fit; ``validate`` says the same.

Where a test needs a small machine it says how much memory there is
(``footprint.machine_memory_bytes``); a billion requests needs no such help.
"""

from __future__ import annotations

import pytest
from trust_helpers import cli, synthetic_doc

from pagesim.simulator import footprint
from pagesim.simulator.spec import RunSpec

GIB = 2**30


def _refuse_to_simulate(monkeypatch) -> None:
    """Any simulation from here on fails the test: a refusal must come before it."""
    import pagesim.simulator

    def boom(*args, **kwargs):
        raise AssertionError("simulated a run that should have been refused")

    monkeypatch.setattr(pagesim.simulator, "simulate", boom)
    monkeypatch.setattr("pagesim.simulator.run.simulate", boom)


def test_a_billion_requests_is_refused_by_validate_run_and_simulate(write_doc, tmp_path, capsys,
                                                                    monkeypatch):  # fmt: skip
    _refuse_to_simulate(monkeypatch)
    doc = synthetic_doc()
    doc["base"]["workload"]["num_requests"] = 10**9
    path = write_doc(doc)
    for argv in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out")]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "workload.num_requests: 1,000,000,000 requests need about" in err
        assert "GiB of memory" in err and "more than this machine's" in err
        assert "requests fit: lower workload.num_requests" in err
    assert not (tmp_path / "out").exists()
    code, _, err = cli(capsys, "simulate", "--num-requests", str(10**9))
    assert code == 2 and "1,000,000,000 requests need about" in err


def test_a_set_flag_that_makes_a_run_too_large_is_named(tiny_doc, write_doc, tmp_path, capsys,
                                                        monkeypatch):  # fmt: skip
    _refuse_to_simulate(monkeypatch)
    code, _, err = cli(capsys, "run", str(write_doc(tiny_doc)), "--out", str(tmp_path / "out"),
                       "--set", "workload.num_requests=1000000000")  # fmt: skip
    assert code == 2 and "(with --set workload.num_requests=1000000000)" in err
    assert "workload.num_requests: 1,000,000,000 requests need" in err
    assert not (tmp_path / "out").exists()


def test_every_step_too_large_offers_windows(write_doc, capsys, monkeypatch):
    monkeypatch.setattr(footprint, "machine_memory_bytes", lambda: 1 * GIB)
    doc = synthetic_doc(num_requests=100_000, output={"mean": 2000, "high": 4000})
    doc["base"]["metrics"] = {"every_step": True}
    doc["base"]["max_model_len"] = 8192
    del doc["sweep"]
    code, _, err = cli(capsys, "validate", str(write_doc(doc)))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "metrics.every_step: a time-series row per engine step needs about" in err
    assert "more than this machine's 1.0 GiB" in err
    assert "set metrics.every_step: false" in err


def test_tiny_sample_interval_offers_a_wider_one(write_doc, capsys, monkeypatch):
    monkeypatch.setattr(footprint, "machine_memory_bytes", lambda: 1 * GIB)
    doc = synthetic_doc(num_requests=200_000, output={"mean": 2000, "high": 4000})
    doc["base"]["metrics"] = {"sample_interval_s": 1e-6}
    doc["base"]["max_model_len"] = 8192
    del doc["sweep"]
    code, _, err = cli(capsys, "validate", str(write_doc(doc)))
    assert code == 2 and "metrics.sample_interval_s: a time-series row per 1e-06 s" in err
    interval = float(err.rsplit("at least ", 1)[1])
    spec = RunSpec.model_validate(
        {**doc["base"], "metrics": {"sample_interval_s": interval}}
    )  # the offered interval fits
    assert footprint.memory_problem(spec, 1 * GIB) is None


def test_a_duration_is_counted_at_its_rate():
    spec = RunSpec.model_validate(
        {"workload": {"name": "synthetic", "duration_s": 1e9}, "arrivals": {"rate_req_s": 2.0}}
    )
    need = footprint.estimate(spec)
    assert need.num_requests == 2 * 10**9 and need.requests_key == "workload.duration_s"
    problem = footprint.memory_problem(spec, 64 * GIB)
    assert problem.startswith("workload.duration_s: 2,000,000,000 requests need about")
    assert "shorten workload.duration_s (or lower arrivals.rate_req_s)" in problem


def test_a_replay_counts_the_trace_rows(tmp_path):
    from trust_helpers import csv_trace

    trace = csv_trace(tmp_path / "t.csv", [(i * 0.1, 20, 10) for i in range(500)])
    spec = RunSpec.model_validate({
        "workload": {"name": "csv", "path": str(trace), "num_requests": None},
        "arrivals": {"process": "replay"},
    })  # fmt: skip
    need = footprint.estimate(spec)
    assert need.num_requests == 500 and need.requests_key == "workload.path"
    problem = footprint.memory_problem(spec, footprint.BASE_BYTES + 100 * 1024)
    assert "set workload.num_requests to replay fewer of its rows" in problem


@pytest.mark.parametrize("name", ["memory_waste", "latency_vs_rate", "paper_fig13"])
def test_shipped_experiments_fit_a_small_machine(name):
    """The estimate refuses what cannot fit, not what the project ships (8 GiB machine)."""
    from pagesim.experiments.points import expand_points
    from pagesim.experiments.validate import load_experiment

    spec = load_experiment(name)
    for point in expand_points(spec):
        run_spec = RunSpec.model_validate(point.run_doc)
        assert footprint.memory_problem(run_spec, 8 * GIB) is None, point.point_id


def test_machine_memory_is_read_and_sane():
    memory = footprint.machine_memory_bytes()
    assert memory is None or 64 * 2**20 < memory < 2**50


def test_unknown_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(footprint, "machine_memory_bytes", lambda: None)
    spec = RunSpec.model_validate({"workload": {"name": "synthetic", "num_requests": 10**12}})
    assert footprint.memory_problem(spec) is None
