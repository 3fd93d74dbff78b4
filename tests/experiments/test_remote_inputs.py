"""Input files sent by content (``experiments/remote_inputs.py``), without Ray.

``put``/``get`` are a dict here, as ``ray.put``/``ray.get`` are on a cluster. The
"worker" runs after the inputs are gone from their paths, so these runs prove that it
reads only the shipped bytes, and that the result (notes included) is the one
``simulate`` gives on the original files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from trust_helpers import csv_trace

from pagesim.errors import DataError
from pagesim.experiments.remote_inputs import InputPacker, local_spec, simulate_shipped
from pagesim.simulator import simulate
from pagesim.simulator.spec import RunSpec, run_spec_from_dict


class Store:
    """``ray.put``/``ray.get`` over a dict, counting the puts."""

    def __init__(self) -> None:
        self.refs: dict[int, bytes] = {}

    def put(self, data: bytes) -> int:
        self.refs[len(self.refs)] = data
        return len(self.refs) - 1

    def get(self, ref: int) -> bytes:
        return self.refs[ref]


def _profile(path: Path) -> Path:
    from pagesim.simulator.costmodel.analytic import analytic_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    profile = analytic_profile(get_gpu("a100-40gb"))
    return profile.with_terms(kind="synthetic", date="2026-01-01").save(path)


def _csv_spec(trace: str, profile: str | None) -> RunSpec:
    return run_spec_from_dict(
        {
            "hardware": {"kv_slots": 4000, "profile": profile},
            "workload": {"name": "csv", "path": trace, "num_requests": None},
            "arrivals": {"process": "replay"},
        }
    )


def _same(a, b) -> None:
    assert a.summary.keys() == b.summary.keys()
    assert {k: v for k, v in a.summary.items() if k != "sim_wall_s"} == {
        k: v for k, v in b.summary.items() if k != "sim_wall_s"
    }
    assert a.extra == b.extra
    assert a.notes == b.notes
    assert a.requests.equals(b.requests)


def test_worker_without_the_files_gives_the_same_result(tmp_path, monkeypatch):
    """Relative paths, read on the driver; the worker runs after the files are gone."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    csv_trace(inputs / "trace.csv", [(0.0, 20, 10), (0.5, 30, 12), (1.0, 25, 8)])
    _profile(inputs / "profile.yaml")
    monkeypatch.chdir(inputs)
    spec = _csv_spec("trace.csv", "profile.yaml")
    expected = simulate(spec)
    assert "profile.yaml (" in expected.notes["cost_model_profile"]

    store = Store()
    files = InputPacker(store.put).pack(spec)
    assert sorted((f.role, f.name, f.original) for f in files) == [
        ("profile", "profile.yaml", "profile.yaml"),
        ("workload", "trace.csv", "trace.csv"),
    ]
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(inputs)
    got = simulate_shipped(simulate, spec, files, store.get)
    _same(got, expected)


def test_shipped_profile_name_and_packaged_table_keep_their_names(tmp_path, monkeypatch):
    """A shipped profile (by name) and a table workload's table travel too; the notes
    still name the profile by the name the spec gave."""
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "empty"))
    spec = run_spec_from_dict(
        {
            "hardware": {"model": "opt-13b", "gpu": "a100-80gb", "profile": "a100-80gb-vidur"},
            "workload": {"name": "sharegpt", "num_requests": 10},
            "arrivals": {"process": "poisson", "rate_req_s": 2.0},
        }
    )
    expected = simulate(spec)
    store = Store()
    files = InputPacker(store.put).pack(spec)
    assert sorted((f.role, f.name) for f in files) == [
        ("profile", "profile.yaml"),
        ("workload", "sharegpt.npz"),
    ]
    worker_spec, copy_to_original = local_spec(spec, files, store.get)
    assert worker_spec.workload.path is not None and worker_spec.hardware.profile is not None
    assert Path(worker_spec.workload.path).name == "sharegpt.npz"
    assert copy_to_original[worker_spec.hardware.profile] == "a100-80gb-vidur"
    got = simulate_shipped(simulate, spec, files, store.get)
    _same(got, expected)
    assert got.notes["cost_model_profile"].startswith("a100-80gb-vidur (")


def test_a_table_prepared_in_the_data_folder_is_named_as_the_driver_names_it(tmp_path, monkeypatch):
    """A table resolved by the workload's name from the driver's data folder: the worker
    reads it through ``workload.path`` (its copy), and the ``workload_table`` note still
    names it as the driver does (its file name in the data folder and its hash), where
    the shipped table (previous test) gets no such note."""
    from pagesim.workloads.registry import DATA_DIR

    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(DATA_DIR / "sharegpt.npz", mine / "sharegpt.npz")
    monkeypatch.setenv("PAGESIM_DATA", str(mine))
    spec = run_spec_from_dict(
        {
            "hardware": {"model": "opt-13b", "gpu": "a100-80gb"},
            "workload": {"name": "sharegpt", "num_requests": 10},
            "arrivals": {"process": "poisson", "rate_req_s": 2.0},
        }
    )
    expected = simulate(spec)
    assert expected.notes["workload_table"].startswith("sharegpt: sharegpt.npz in the data folder")
    store = Store()
    files = InputPacker(store.put).pack(spec)
    got = simulate_shipped(simulate, spec, files, store.get)
    _same(got, expected)
    assert "workload_table" not in simulate_shipped(
        simulate, spec, tuple(f.__class__(**{**f.__dict__, "table_label": None}) for f in files),
        store.get,
    ).notes  # fmt: skip


def test_each_file_read_once_and_each_content_stored_once(tmp_path):
    rows = [(0.0, 20, 10), (0.5, 30, 12)]
    a = csv_trace(tmp_path / "a.csv", rows)
    b = csv_trace(tmp_path / "b.csv", rows)  # the same bytes at another path
    store = Store()
    packer = InputPacker(store.put)
    specs = [_csv_spec(str(a), None).model_copy(update={"seed": s}) for s in range(5)]
    specs.append(_csv_spec(str(b), None))
    packed = [packer.pack(spec) for spec in specs]
    assert packer.num_reads == 2
    assert packer.num_stored == len(store.refs) == 1
    assert {files[0].ref for files in packed} == {0}
    assert packed[-1][0].original == str(b)


def test_a_missing_file_is_left_to_the_path(tmp_path):
    """Preflight reports a missing input first; if one is missing anyway, it is not
    shipped and the run reads the path as it would locally."""
    spec = _csv_spec(str(tmp_path / "gone.csv"), None)
    assert InputPacker(Store().put).pack(spec) == ()


def test_an_error_names_the_file_the_spec_gave(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,what\n1,2\n")
    spec = _csv_spec(str(bad), None)
    with pytest.raises(DataError) as local:
        simulate(spec)
    assert str(bad) in str(local.value)
    store = Store()
    files = InputPacker(store.put).pack(spec)
    with pytest.raises(DataError) as shipped:
        simulate_shipped(simulate, spec, files, store.get)
    assert str(shipped.value) == str(local.value)
