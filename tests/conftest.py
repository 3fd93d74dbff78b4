"""Fixtures for every test folder: the shared reference data beside the checkout.

Data that others published is never committed (``../shared/data/README.md``); tests read
it from ``../shared/data`` relative to the repository root (CI has it there), or from
``PAGESIM_DATA`` when set, and skip with a one-line reason where it is absent.
"""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    env = os.environ.get("PAGESIM_DATA")
    return Path(env) if env else REPO_ROOT / ".." / "shared" / "data"


@pytest.fixture
def shared_data():
    """``shared_data("vidur_profiling")``: that folder of the shared data, or skip."""

    def get(name: str) -> Path:
        path = shared_data_dir() / name
        if not path.exists():
            pytest.skip(f"shared data {name} not found beside the checkout (or in PAGESIM_DATA)")
        return path

    return get
