"""The run cache follows the code (issue #34, item 1): an edited engine, scheduler or
cost-model source, or another pagesim version, is never answered from the cache.

The sources hashed are a copy of the real ones (``inputs.code_files`` pointed at it), so
that the test edits a file without touching the checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from trust_helpers import run_file, synthetic_doc

from pagesim.experiments import cache as cache_module
from pagesim.experiments import inputs


@pytest.fixture
def code_copy(tmp_path, monkeypatch, request) -> Path:
    """A copy of the sources that compute a run, hashed in their place."""
    copy = tmp_path / "src"
    real = inputs.code_files()
    for name, path in real:
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    monkeypatch.setattr(
        inputs, "code_files", lambda: sorted((name, copy / name) for name, _ in real)
    )
    inputs.code_hash.cache_clear()
    request.addfinalizer(inputs.code_hash.cache_clear)
    return copy


def test_code_files_cover_engine_schedulers_allocators_cost_model_and_workloads():
    names = {name for name, _ in inputs.code_files()}
    for expected in (
        "pagesim.simulator/engine.py",
        "pagesim.simulator/schedulers/vllm.py",
        "pagesim.simulator/costmodel/analytic.py",
        "pagesim.allocators/paged.py",
        "pagesim.workloads/build.py",
    ):
        assert expected in names


def test_edited_cost_model_source_is_not_served_from_cache(code_copy, write_doc, tmp_path):
    path = write_doc(synthetic_doc())
    assert run_file(path, tmp_path / "out").num_computed == 2
    assert run_file(path, tmp_path / "out").num_computed == 0
    analytic = code_copy / "pagesim.simulator" / "costmodel" / "analytic.py"
    analytic.write_text(analytic.read_text() + "\n# a changed rule\n")
    inputs.code_hash.cache_clear()  # a new process, after the edit
    again = run_file(path, tmp_path / "out")
    assert again.num_computed == 2
    assert run_file(path, tmp_path / "out").num_computed == 0


def test_another_pagesim_version_is_not_served_from_cache(write_doc, tmp_path, monkeypatch):
    path = write_doc(synthetic_doc())
    assert run_file(path, tmp_path / "out").num_computed == 2
    monkeypatch.setattr(cache_module, "__version__", "99.0.0")
    assert run_file(path, tmp_path / "out").num_computed == 2


def test_code_hash_is_computed_once_per_process(monkeypatch, request):
    calls = []
    real = inputs.code_files
    monkeypatch.setattr(inputs, "code_files", lambda: calls.append(1) or real())
    inputs.code_hash.cache_clear()
    request.addfinalizer(inputs.code_hash.cache_clear)
    first = inputs.code_hash()
    assert inputs.code_hash() == first and calls == [1]
