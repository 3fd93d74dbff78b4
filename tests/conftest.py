"""Test-wide fixtures: an empty data folder per test, and the team's shared real data.

- Every test runs with ``PAGESIM_DATA`` set to an empty temporary folder, so no test
  reads (or writes) the user's own data folder and the suite behaves as on a fresh
  clone; a test that needs prepared tables prepares them into that folder.
- Real data that may not be committed is read from ``../shared/data`` beside the
  checkout. ``PAGESIM_TEST_SHARED_DATA`` names another folder instead (point it at a
  missing one to run the suite as a fresh clone without the shared data would):
  ``shared_data("azure_llm_2023", "conv.csv")`` skips the test, with a one-line
  reason, when the file is absent.
- Tests marked ``pure_python`` patch a class or constant of a module that the install
  compiled (``pagesim._native.COMPILED``); compiled callers would not see the patch,
  so where those modules run compiled the tests are skipped, and ``tasks.py test``
  runs them in a second pass with ``PAGESIM_PURE_PYTHON=1``.
- No test may fail because the machine is slow: hypothesis's per-example deadline and
  its "data generation too slow" health check are off for every test (a loaded 2-core
  machine runs an example many times slower than an idle one), and a test that waits
  for a subprocess bounds the wait only against a hang, far above any load's delay.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("pagesim", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pagesim")

SHARED_ENV = "PAGESIM_TEST_SHARED_DATA"
DEFAULT_SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def shared_root() -> Path:
    named = os.environ.get(SHARED_ENV, "").strip()
    return Path(named) if named else DEFAULT_SHARED


def shared_file(*parts: str) -> Path:
    """A file or folder of the shared data, or skip the calling test saying which is missing."""
    path = shared_root().joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data {'/'.join(parts)} not found under {shared_root()}")
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from pagesim import _native

    if _native.status != "compiled":
        return
    skip = pytest.mark.skip(
        reason="patches a compiled module, whose compiled callers would not see it: "
        "runs in the pure-Python pass (PAGESIM_PURE_PYTHON=1)"
    )
    for item in items:
        if item.get_closest_marker("pure_python"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _empty_data_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path_factory.mktemp("pagesim-data")))


@pytest.fixture(scope="session")
def shared_data() -> Callable[..., Path]:
    """``shared_file`` (session-wide, so module fixtures may use it too)."""
    return shared_file


@pytest.fixture
def paper_tables(shared_data: Callable[..., Path]) -> None:
    """The paper suite's external tables (the artifact's ShareGPT lengths, the Alpaca
    sample) prepared into this test's data folder, or skip."""
    pytest.importorskip("tokenizers")
    from pagesim.cli import main

    csv = shared_data("paper_artifact", "sharegpt_opt_lengths.csv")
    alpaca = shared_data("alpaca", "alpaca_5000.json")
    assert main(["workload", "prepare", "sharegpt-paper", "--source", str(csv)]) == 0
    assert main(["workload", "prepare", "alpaca-5000", "--source", str(alpaca)]) == 0


@pytest.fixture
def shared_data_root() -> Path:
    """The shared data folder, which may be absent (for tests that adapt rather than skip)."""
    return shared_root()
