"""``python3 tasks.py test`` runs every stage and reports each one's result (issue #34,
item 7): a failure in one stage (the compiled suite, say) must not hide the others'
results, and the task fails if any stage failed.

The stages' commands are replaced by tiny Python ones; nothing is installed or tested.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tasks():
    spec = importlib.util.spec_from_file_location("pagesim_tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stage(tasks, name: str, code: int, env: dict | None = None):
    script = f"import os, sys; print('{name} ran', os.environ.get('MARK', '-')); sys.exit({code})"
    return tasks.Stage(name, [sys.executable, "-c", script], env or {})


def test_every_stage_runs_and_reports_though_an_earlier_one_failed(tasks, capfd):
    stages = [
        _stage(tasks, "lint", 0),
        _stage(tasks, "compiled suite", 1),
        _stage(tasks, "pure-Python pass", 0, {"MARK": "pure"}),
        _stage(tasks, "golden files", 0),
    ]
    assert tasks.run_stages(stages) == 1
    out = capfd.readouterr().out
    for name in ("lint", "compiled suite", "pure-Python pass", "golden files"):
        assert f"{name} ran" in out
    assert "pure-Python pass ran pure" in out  # a stage's environment reaches it
    report = out[out.index("tasks.py test:") :]
    assert "compiled suite    FAILED (exit 1)" in report
    assert "pure-Python pass  passed" in report and "golden files      passed" in report
    assert "total             FAILED: compiled suite" in report


def test_all_passing_or_selecting_nothing_passes(tasks, capfd):
    stages = [_stage(tasks, "lint", 0), _stage(tasks, "pure-Python pass", tasks.NO_TESTS)]
    assert tasks.run_stages(stages) == 0
    out = capfd.readouterr().out
    assert "no test selected" in out and "total             passed" in out


def test_the_suite_has_its_five_stages(tasks):
    names = [stage.name for stage in tasks.suite_stages([])]
    assert names == ["lint", "compiled suite", "pure-Python pass", "golden files", "docs site"]
    pure = [s for s in tasks.suite_stages([]) if (s.env or {}).get("PAGESIM_PURE_PYTHON") == "1"]
    assert [s.name for s in pure] == ["pure-Python pass", "golden files"]
    # arguments select tests in the two pytest passes; the golden files run only without
    assert [s.name for s in tasks.suite_stages(["-k", "paged"])][-1] == "pure-Python pass"
