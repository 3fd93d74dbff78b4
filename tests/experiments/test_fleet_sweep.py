"""Sweeps over cluster.* and disaggregation.* through the experiment runner: results.csv
keeps one row per run, replicas.csv a row per replica; Ray gives the same bytes."""

from __future__ import annotations

import pandas as pd
import pytest

FLEET_DOC = {
    "name": "fleet",
    "base": {
        "hardware": {"kv_slots": 4000},
        "workload": {"name": "sharegpt", "num_requests": 24},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
    },
    "sweep": {
        "grid": {
            "cluster.replicas": [1, 2],
            "cluster.router": ["round-robin", "least-outstanding"],
        }
    },
    "seeds": [0],
}

DISAGG_DOC = {
    "name": "disagg",
    "base": {
        "hardware": {"kv_slots": 4000},
        "workload": {"name": "sharegpt", "num_requests": 16},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "disaggregation": {"prefill": {"instances": 1}, "decode": {"instances": 1}},
    },
    "sweep": {"grid": {"disaggregation.decode.instances": [1, 2]}},
    "seeds": [0],
}


def run(doc, write_doc, out, **kwargs):
    from pagesim.experiments.runner import run_experiment
    from pagesim.experiments.validate import load_experiment

    spec = load_experiment(write_doc(doc, f"{doc['name']}.yaml"))
    return run_experiment(spec, out, progress=False, **kwargs)


def test_a_sweep_over_replicas_and_routers(write_doc, tmp_path):
    out = run(FLEET_DOC, write_doc, tmp_path / "out", jobs=1)
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert len(results) == 4 and (results["num_finished"] == 24).all()
    replicas = pd.read_csv(tmp_path / "out" / "replicas.csv")
    # one row per replica of each fleet run (a single server has no replica rows)
    assert replicas.groupby("point")["replica"].count().tolist() == [2, 2]
    assert replicas.groupby("point")["num_requests"].sum().tolist() == [24, 24]
    assert out.num_computed == 4
    # a fleet of one is the single server, whatever its router
    one = results[results["cluster.replicas"] == 1]
    assert one["ttft_s_p50"].nunique() == 1


def test_a_sweep_over_decode_instances(write_doc, tmp_path):
    run(DISAGG_DOC, write_doc, tmp_path / "out", jobs=1)
    replicas = pd.read_csv(tmp_path / "out" / "replicas.csv")
    assert replicas["role"].tolist() == ["prefill", "decode", "prefill", "decode", "decode"]


@pytest.mark.slow
def test_ray_gives_the_same_bytes_as_local(write_doc, tmp_path):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'pagesim[cluster]')")
    run(FLEET_DOC, write_doc, tmp_path / "local", jobs=1)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run(FLEET_DOC, write_doc, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    for name in ("results.csv", "replicas.csv"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
