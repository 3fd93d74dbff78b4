"""Fixtures of the calibration tests: one build folder for the kernels on the host shim."""

import os

import pytest


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    """One folder per test session, shared by its xdist workers (builds are keyed by content
    and published atomically, so the workers reuse each other's)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "host-kernels"
