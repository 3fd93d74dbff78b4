"""The Ray executor gives the same results.csv as the local one, byte for byte."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from trust_helpers import cli, csv_trace

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'pagesim[cluster]')")


@pytest.mark.slow
def test_ray_and_local_results_identical(tiny_doc, write_doc, tmp_path):
    import fake_sim

    from pagesim.experiments.runner import run_experiment
    from pagesim.experiments.validate import load_experiment

    ray.cloudpickle.register_pickle_by_value(fake_sim)
    spec = load_experiment(write_doc(tiny_doc))
    run_experiment(
        spec, tmp_path / "local", simulate=fake_sim.fake_simulate, jobs=1, progress=False
    )
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = run_experiment(
            spec, tmp_path / "ray", simulate=fake_sim.fake_simulate, executor="ray", progress=False
        )
    finally:
        ray.shutdown()
    assert out.num_computed == 16
    local = (tmp_path / "local" / "results.csv").read_bytes()
    assert (tmp_path / "ray" / "results.csv").read_bytes() == local


def _experiment(folder: Path) -> Path:
    """A CSV-trace workload and a profile, both named by paths relative to ``folder``."""
    from pagesim.simulator.costmodel.analytic import analytic_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    csv_trace(folder / "trace.csv", [(0.1 * i, 20 + 7 * i % 90, 5 + 3 * i % 40) for i in range(40)])
    profile = analytic_profile(get_gpu("a100-40gb")).with_terms(kind="synthetic", date="2026-01-01")
    profile.save(folder / "profile.yaml")
    doc = {
        "name": "cluster",
        "base": {
            "hardware": {"kv_slots": 3000, "profile": "profile.yaml"},
            "workload": {"name": "csv", "path": "trace.csv", "num_requests": 30, "replace": True},
            "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        },
        "sweep": {"grid": {"allocator.block_size": [8, 16]}},
        "seeds": [0, 1],
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.slow
def test_two_node_cluster_reads_inputs_by_content(tmp_path, monkeypatch, capsys):
    """`--executor ray --ray-address` on a two-node cluster (head and one worker node,
    one CPU each) gives results.csv, and every per-run table, byte for byte as
    `--executor local`, for runs whose trace CSV and profile the workers cannot read by
    path.

    The experiment names its inputs by paths relative to the driver's folder; each node
    is started from another empty folder, and its workers run there, so neither node
    finds them by path (checked first, on each node). What this proves: the runs read
    the bytes the driver sent, not the paths, and the results and notes do not depend on
    where the files were. What a cluster on one machine cannot prove: nodes here share
    the file system (an absolute path would be readable), the Python, the installed
    pagesim and its shipped tables and profiles; the bytes cross no network. Which node
    ran which run is Ray's choice, so this does not show that both nodes ran runs, only
    that neither could have read the inputs by path.
    """
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pagesim.experiments.remote_inputs import remove_leftovers

    # Ray's own folder, private to this test (other Ray users on the machine do not find
    # this cluster) and short (Ray's socket paths must fit in 107 bytes).
    ray_tmp = Path(tempfile.mkdtemp(prefix="pgr", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    head_dir, node_dir, driver_dir = (tmp_path / n for n in ("head", "node", "driver"))
    for folder in (head_dir, node_dir, driver_dir):
        folder.mkdir()
    monkeypatch.chdir(head_dir)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        monkeypatch.chdir(node_dir)
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        monkeypatch.chdir(driver_dir)
        experiment = _experiment(driver_dir)

        def sees(names: list[str]) -> list[str]:
            return [name for name in names if Path(name).exists()]

        probe = ray.remote(sees)
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
            seen = [
                ray.get(
                    probe.options(
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                    ).remote(["trace.csv", "profile.yaml"])
                )
                for node in nodes
            ]
        finally:
            ray.shutdown()
        assert (len(nodes), seen) == (2, [[], []])

        local = cli(capsys, "run", str(experiment), "--jobs", "1", "--out", "local")
        assert local[0] == 0, local[2]
        code, _, err = cli(
            capsys, "run", str(experiment), "--executor", "ray",
            "--ray-address", cluster.address, "--out", "ray",
        )  # fmt: skip
        assert code == 0, err
        assert (
            f"ray: joined the cluster at {cluster.address} (--ray-address): 2 nodes, 2 CPUs;" in err
        )
    finally:
        cluster.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        remove_leftovers()  # the copies of the workers the cluster killed
    local_out, ray_out = driver_dir / "local", driver_dir / "ray"
    results = (ray_out / "results.csv").read_text()
    assert "profile.yaml (a100-40gb, 2026-01-01, sha256:" in results
    assert results == (local_out / "results.csv").read_text()
    tables = sorted(p.relative_to(local_out) for p in local_out.glob("*/*.csv.gz"))
    assert len(tables) == 8
    for table in tables:
        assert (ray_out / table).read_bytes() == (local_out / table).read_bytes(), table
