"""The Ray executor gives the same results.csv as the local one, byte for byte."""

from __future__ import annotations

import pytest

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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = run_experiment(
            spec, tmp_path / "ray", simulate=fake_sim.fake_simulate, executor="ray", progress=False
        )
    finally:
        ray.shutdown()
    assert out.num_computed == 16
    local = (tmp_path / "local" / "results.csv").read_bytes()
    assert (tmp_path / "ray" / "results.csv").read_bytes() == local
