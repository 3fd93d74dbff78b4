"""``pip install`` builds pagesim without setuptools warnings (issue #15).

Builds the wheel with pip (in build isolation, as a user's ``pip install`` does) from
a copy of the sources in a temporary folder (pip builds in the source tree, and the
repository must not gain a ``build/`` folder), and checks the build log for setuptools' warnings (licence field, data folders missing
from the packages list) and the wheel for its data files. Skipped when pip cannot
fetch the build backend (no network and no cached wheel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pagesim import _native

REPO = Path(__file__).resolve().parents[1]
#: a bound on the build against a hang only: it compiles the engine's modules, about a
#: minute on an idle 2-core machine and ten or more on a loaded one (the old 600 s
#: failed the suite there), so the bound is far beyond either
PATIENCE_S = 3600


@pytest.mark.slow
def test_wheel_builds_without_setuptools_warnings(tmp_path):
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "tests", "notebooks", "*.so", "_compiled.json"
    )
    shutil.copytree(REPO, source, ignore=skip)
    wheels = tmp_path / "wheels"
    env = {k: v for k, v in os.environ.items() if k != _native.PURE_ENV}  # a default build
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(wheels), "-v"],
        capture_output=True, text=True, timeout=PATIENCE_S, env=env,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 and ("setuptools" in log and "Could not" in log):
        pytest.skip("pip could not fetch setuptools to build the wheel (offline)")
    assert proc.returncode == 0, log[-2000:]
    for warning in ("BuildBackendWarning", "SetuptoolsDeprecationWarning", "is absent from the"):
        assert warning not in log, [line for line in log.splitlines() if warning in line][:3]
    (wheel,) = wheels.glob("pagesim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pagesim/workloads/data/sharegpt.npz" in names
    assert "pagesim/simulator/model_configs/qwen3-14b.json" in names
    assert any(n.startswith("pagesim/calibrate/kernels/") and n.endswith(".cu") for n in names)
    # setup.py compiled the engine's modules (pagesim._native), their sources beside them
    if "pagesim: not compiled" in log:
        pytest.skip("this machine could not compile the engine's modules: " + log[-300:])
    assert "pagesim/_compiled.json" in names
    for module in _native.COMPILED:
        path = module.replace(".", "/")
        assert f"{path}.py" in names, module
        assert any(n.startswith(f"{path}.") and n.endswith(".so") for n in names), module
