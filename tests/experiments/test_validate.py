"""Bad experiment files: each error names the file, the path in the document, and
what is allowed there."""

from __future__ import annotations

import pytest

from pagesim.allocators import ALLOCATORS
from pagesim.errors import ConfigError
from pagesim.experiments.points import expand_points, expand_runs
from pagesim.experiments.validate import load_experiment


def _error(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return str(info.value)


def test_tiny_experiment_validates_and_expands(tiny_doc, write_doc):
    spec = load_experiment(write_doc(tiny_doc))
    points = expand_points(spec)
    assert [p.point_id for p in points] == [f"p{i:03d}" for i in range(8)]
    assert [p.label for p in points[:3]] == ["orca+max", "orca+max", "orca+pow2"]
    assert points[1].path_to_value == {
        "scheduler.kind": "orca",
        "allocator.kind": "max",
        "arrivals.rate_req_s": 2.0,
    }
    runs = expand_runs(spec)
    assert [r.run_id for r in runs[:3]] == ["p000_seed0", "p000_seed1", "p001_seed0"]
    assert runs[1].run_doc["seed"] == 1


def test_unknown_top_level_key_lists_allowed_keys(tiny_doc, write_doc):
    tiny_doc["sweeps"] = {}
    path = write_doc(tiny_doc)
    msg = _error(path)
    assert str(path) in msg
    assert "sweeps: unknown key; allowed keys: base, charts, description" in msg


def test_unknown_key_in_base_section(tiny_doc, write_doc):
    tiny_doc["base"]["allocator"] = {"blok_size": 16}
    msg = _error(write_doc(tiny_doc))
    assert "base.allocator.blok_size: unknown key; allowed keys: block_size" in msg


def test_wrong_type_in_base(tiny_doc, write_doc):
    tiny_doc["base"]["workload"]["num_requests"] = "20"
    msg = _error(write_doc(tiny_doc))
    assert "base.workload.num_requests" in msg


def test_unknown_allocator_kind_in_zip_names_index_and_allowed(tiny_doc, write_doc):
    tiny_doc["sweep"]["zip"][0]["allocator.kind"][3] = "buddy"
    msg = _error(write_doc(tiny_doc))
    assert "sweep.zip[0].allocator.kind[3]" in msg
    assert f"unknown allocator 'buddy'; allowed: {', '.join(sorted(ALLOCATORS))}" in msg


def test_bad_grid_value_names_index(tiny_doc, write_doc):
    tiny_doc["sweep"]["grid"] = {"allocator.block_size": [8, 16, 0]}
    msg = _error(write_doc(tiny_doc))
    assert "sweep.grid.allocator.block_size[2]" in msg
    assert "greater than or equal to 1" in msg


def test_unknown_swept_path_lists_allowed_keys(tiny_doc, write_doc):
    tiny_doc["sweep"]["grid"] = {"allocator.blocksize": [8]}
    msg = _error(write_doc(tiny_doc))
    assert "sweep.grid.allocator.blocksize: unknown key 'blocksize' in allocator" in msg
    assert "block_size" in msg


def test_path_through_a_value_is_rejected(tiny_doc, write_doc):
    tiny_doc["sweep"]["grid"] = {"seed.x": [1]}
    assert "is a value, not a section" in _error(write_doc(tiny_doc))


def test_seed_cannot_be_swept(tiny_doc, write_doc):
    tiny_doc["sweep"]["grid"] = {"seed": [1, 2]}
    assert "sweep.grid.seed: the seed is set by the top-level 'seeds' list" in _error(
        write_doc(tiny_doc)
    )


def test_unknown_model_name_lists_registered_models(tiny_doc, write_doc):
    from pagesim.experiments.registries import REGISTRIES

    if REGISTRIES[0].names() is None:
        pytest.skip("the simulator layer provides no model registry yet")
    tiny_doc["base"]["hardware"]["model"] = "opt-14b"
    msg = _error(write_doc(tiny_doc))
    assert "base.hardware.model: unknown model 'opt-14b'; close matches:" in msg
    assert "opt-13b" in msg and "config.json" in msg


def test_unknown_workload_in_sweep_names_its_index(tiny_doc, write_doc):
    from pagesim.experiments.registries import REGISTRIES

    if REGISTRIES[2].names() is None:
        pytest.skip("the workloads layer provides no registry yet")
    tiny_doc["sweep"]["grid"] = {"workload.name": ["sharegpt", "nope"]}
    msg = _error(write_doc(tiny_doc))
    assert "sweep.grid.workload.name[1]: unknown workload 'nope'; allowed:" in msg


def test_incompatible_point_names_point_and_values(tiny_doc, write_doc):
    tiny_doc["sweep"] = {"grid": {"scheduler.kind": ["vllm"], "allocator.kind": ["max"]}}
    msg = _error(write_doc(tiny_doc))
    assert "point p000 (scheduler.kind=vllm, allocator.kind=max)" in msg
    # the paged allocators that speak v0's allocator verbs (paged-v1 speaks V1's)
    paged = ", ".join(
        sorted(k for k, c in ALLOCATORS.items() if c.is_paged and c.kv_interface == "allocator")
    )
    assert f"'vllm' needs a paged allocator ({paged}), got 'max'" in msg


def test_zip_lengths_must_match(tiny_doc, write_doc):
    tiny_doc["sweep"]["zip"][0]["allocator.kind"] = ["max"]
    msg = _error(write_doc(tiny_doc))
    assert "sweep.zip" in msg and "common, non-zero length" in msg


def test_unknown_chart_kind_lists_kinds(tiny_doc, write_doc):
    tiny_doc["charts"].append({"kind": "pie"})
    msg = _error(write_doc(tiny_doc))
    assert "charts[4].kind: unknown chart kind 'pie'; allowed:" in msg
    assert "memory_breakdown" in msg


def test_unknown_chart_option(tiny_doc, write_doc):
    tiny_doc["charts"][0]["colour"] = "red"
    assert "charts[0].colour: unknown key; allowed keys:" in _error(write_doc(tiny_doc))


def test_duplicate_chart_files(tiny_doc, write_doc):
    tiny_doc["charts"].append({"kind": "memory_breakdown"})
    assert "charts[4].file" in _error(write_doc(tiny_doc))


def test_duplicate_seeds(tiny_doc, write_doc):
    tiny_doc["seeds"] = [1, 1]
    assert "seeds" in _error(write_doc(tiny_doc))


def test_yaml_syntax_error_names_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    msg = _error(path)
    assert str(path) in msg and "not valid YAML" in msg


def test_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    assert "must be a mapping" in _error(path)


def test_missing_file_is_not_a_shipped_name(tmp_path):
    msg = _error(tmp_path / "absent.yaml")
    assert "no such experiment file" in msg and "shipped:" in msg


def test_quick_set_path_checked(tiny_doc, write_doc):
    tiny_doc["quick"]["set"] = {"workload.num_request": 5}
    assert "quick.set.workload.num_request: unknown key" in _error(write_doc(tiny_doc))


def test_quick_variant_applies_overrides(tiny_doc, write_doc):
    spec = load_experiment(write_doc(tiny_doc), quick=True)
    assert spec.seeds == [0]
    assert spec.base["workload"]["num_requests"] == 5


def test_set_overrides_are_validated(tiny_doc, write_doc):
    path = write_doc(tiny_doc)
    spec = load_experiment(path, overrides={"allocator.block_size": 32})
    assert spec.base["allocator"]["block_size"] == 32
    with pytest.raises(ConfigError, match="--set allocator.bs: unknown key 'bs'"):
        load_experiment(path, overrides={"allocator.bs": 32})
    # a bad value is the flag's error, not the file's (issue #34)
    with pytest.raises(
        ConfigError, match="--set allocator.block_size=big: Input should be a valid"
    ):
        load_experiment(path, overrides={"allocator.block_size": "big"})
