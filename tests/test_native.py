"""The compiled build (pagesim._native, setup.py): the same results as the sources, and
the sources run whenever the compiled modules may not be theirs."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from pagesim import _native
from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

PACKAGE_DIR = Path(_native.__file__).resolve().parent

needs_compiled = pytest.mark.skipif(
    _native.status != "compiled", reason=f"this install runs {_native.status}"
)

#: one run per scheduler, and the allocator paths the compiled modules hold
CASES = {
    "vllm-recompute": {
        "workload": {"name": "sharegpt", "num_requests": 300},
        "arrivals": {"process": "poisson", "rate_req_s": 30.0},
        "hardware": {"kv_slots": 8000},
    },
    "vllm-swap-parallel": {
        "workload": {"name": "alpaca-like", "num_requests": 150, "n": 3},
        "arrivals": {"process": "poisson", "rate_req_s": 20.0},
        "hardware": {"kv_slots": 8000},
        "allocator": {"kind": "paged", "swap_space_gib": 1.0},
        "scheduler": {"kind": "vllm", "preemption_mode": "swap"},
    },
    "vllm-paper-beam": {
        "workload": {"name": "alpaca-like", "num_requests": 80, "beam_width": 3},
        "arrivals": {"process": "poisson", "rate_req_s": 8.0},
        "hardware": {"kv_slots": 9000},
        "scheduler": {"kind": "vllm-paper"},
    },
    "prefix-caching": {
        "workload": {"name": "sharegpt", "num_requests": 200, "shared_prefix_len": 64},
        "arrivals": {"process": "poisson", "rate_req_s": 10.0},
        "allocator": {"kind": "paged", "prefix_caching": True},
    },
    "vllm-v1-chunked": {
        "workload": {"name": "sharegpt", "num_requests": 200, "shared_prefix_len": 48},
        "arrivals": {"process": "poisson", "rate_req_s": 20.0},
        "hardware": {"kv_slots": 6000},
        "allocator": {"kind": "paged-v1"},
        "scheduler": {"kind": "vllm-v1", "max_num_batched_tokens": 512},
    },
    "orca-pow2": {
        "workload": {"name": "sharegpt", "num_requests": 200},
        "arrivals": {"process": "poisson", "rate_req_s": 10.0},
        "hardware": {"kv_slots": 15728},
        "scheduler": {"kind": "orca"},
        "allocator": {"kind": "pow2"},
    },
    "static-oracle": {
        "workload": {"name": "sharegpt", "num_requests": 150},
        "arrivals": {"process": "poisson", "rate_req_s": 10.0},
        "scheduler": {"kind": "static"},
        "allocator": {"kind": "oracle"},
    },
}

#: in a child process: each case's requests, time series and summary, pickled to a file
CHILD = r"""
import json, pickle, sys
from pagesim import _native
from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict
runs = {}
for name, doc in json.loads(sys.argv[1]).items():
    res = simulate(run_spec_from_dict(doc))
    runs[name] = (res.requests, res.timeseries, res.summary)
with open(sys.argv[2], "wb") as f:
    pickle.dump({"status": _native.status, "runs": runs}, f)
"""


def _pure_runs(tmp_path: Path) -> dict:
    env = {**os.environ, _native.PURE_ENV: "1"}
    out = tmp_path / "pure.pkl"
    subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CASES), str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    with open(out, "rb") as f:
        return pickle.load(f)


@needs_compiled
def test_the_compiled_modules_are_the_ones_imported():
    import importlib

    for name in _native.COMPILED:
        module = importlib.import_module(name)
        assert Path(module.__file__).suffix in (".so", ".pyd"), name


@needs_compiled
def test_compiled_and_pure_python_give_the_same_results(tmp_path):
    """Every case, compiled (this process) and from the sources (a child with
    PAGESIM_PURE_PYTHON=1): the same requests table, time series and summary, bit for
    bit."""
    pure = _pure_runs(tmp_path)
    assert pure["status"] == f"pure Python ({_native.PURE_ENV}=1)"
    for name, doc in CASES.items():
        res = simulate(run_spec_from_dict(doc))
        requests, timeseries, summary = pure["runs"][name]
        assert len(res.requests) == doc["workload"]["num_requests"], name
        pd.testing.assert_frame_equal(res.requests, requests, check_exact=True)
        pd.testing.assert_frame_equal(res.timeseries, timeseries, check_exact=True)
        assert res.summary.keys() == summary.keys(), name
        for key, value in res.summary.items():
            if key.endswith("wall_s"):  # how long this process took
                continue
            assert value == summary[key] or (pd.isna(value) and pd.isna(summary[key])), (name, key)


def _stamp_of_sources() -> dict[str, str]:
    return {
        name: _native.source_hash(_native._source_file(name).read_bytes())
        for name in _native.COMPILED
    }


def test_matching_sources_may_run_compiled(tmp_path, monkeypatch):
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    (tmp_path / "_compiled.json").write_text(json.dumps(_stamp_of_sources()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native._stale(tmp_path) is None


def test_an_edited_source_runs_as_python_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    stamp = _stamp_of_sources()
    stamp["pagesim.simulator.schedulers.vllm"] = "0" * 16  # compiled from other source
    (tmp_path / "_compiled.json").write_text(json.dumps(stamp))
    with pytest.warns(RuntimeWarning, match=r"vllm\.py changed since it was compiled"):
        why = _native._stale(tmp_path)
    assert why is not None and why.endswith("vllm.py changed since it was compiled")


def test_no_stamp_or_the_variable_runs_python(tmp_path, monkeypatch):
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    assert _native._stale(tmp_path) == "not compiled"
    (tmp_path / "_compiled.json").write_text(json.dumps(_stamp_of_sources()))
    monkeypatch.setenv(_native.PURE_ENV, "1")
    assert _native._stale(tmp_path) == f"{_native.PURE_ENV}=1"


def test_pure_python_loads_every_compiled_module_from_its_source():
    code = (
        "import importlib, json; from pagesim import _native; "
        "print(json.dumps([importlib.import_module(n).__file__ for n in _native.COMPILED]))"
    )
    env = {**os.environ, _native.PURE_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    files = json.loads(out.stdout)
    assert [Path(f).suffix for f in files] == [".py"] * len(_native.COMPILED)
    assert [Path(f).stem for f in files] == [n.rpartition(".")[2] for n in _native.COMPILED]


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI only (CI=true)")
def test_ci_runs_the_compiled_modules():
    """CI's machines have a C compiler: there the install must have compiled (a failed
    compile installs pure Python, and every compiled-only test would just skip)."""
    assert _native.status == "compiled" or os.environ.get(_native.PURE_ENV) == "1"


def test_modules_outside_the_compiled_set_load_from_source():
    """Only the COMPILED modules may come from extensions (an extension an earlier build
    left beside another module's source is not used)."""
    import importlib
    import pkgutil

    loaded = []
    packages = ["pagesim.allocators", "pagesim.simulator", "pagesim.workloads"]
    infos = [
        info
        for name in packages
        for info in pkgutil.walk_packages(importlib.import_module(name).__path__, name + ".")
    ]
    for info in infos:
        if (
            info.ispkg
            or info.name in _native.COMPILED
            or info.name.endswith(("__mypyc", "__main__"))
        ):
            continue
        loaded.append(importlib.import_module(info.name))
    assert len(loaded) > 20
    assert all(Path(m.__file__).suffix == ".py" for m in loaded), [
        m.__name__ for m in loaded if Path(m.__file__).suffix != ".py"
    ]


def test_named_constructors_keep_the_field_order():
    """The named constructors (docs/compiled_modules.md) build their named tuples with
    ``tuple.__new__``, by position: each field, given a value of its own, lands where the
    keyword constructor puts it."""
    from pagesim.allocators.base import AllocRequest
    from pagesim.simulator.plan import BatchPlan, plan_of
    from pagesim.simulator.request import SequenceGroup

    group = SequenceGroup(3, 0.0, 20, 50, 2, 1, ((7, 20),))
    group.num_generated = 4
    built_and_expected = [
        (
            plan_of((1, 2, 3, 4.5), (5, 6, 7), 8, 9, 10, 11, False),
            BatchPlan,
            {"num_prefill_seqs": 1, "num_prefill_tokens": 2, "prefill_context_sum": 3,
             "prefill_scores": 4.5, "num_decode_seqs": 5, "decode_context_sum": 6,
             "decode_num_blocks": 7, "num_copied_blocks": 8, "num_swapped_in_blocks": 9,
             "num_swapped_out_blocks": 10, "block_size": 11, "is_paged": False},
        ),
        (
            group.alloc_request(9),
            AllocRequest,
            {"group_id": 3, "seq_id": 9, "prompt_len": 20, "num_tokens": 24,
             "segments": ((7, 20),), "max_num_seqs": 2, "target_len": 70},
        ),
    ]  # fmt: skip
    for built, cls, fields in built_and_expected:
        assert type(built) is cls
        assert built == cls(**fields) and len(built) == len(cls._fields)
