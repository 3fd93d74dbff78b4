"""``tasks.py gpu-calibrate`` and ``gpu-wheels``: the one call a lent GPU machine runs.

The dry run goes through every step of the GPU call on the CPU (the wheels' check and
install, pagesim from its sources, the kernel check on the host shim, the budgeted grid
on the synthetic device, the fit, the report, the output folder) except the timing.
"""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from pagesim.calibrate.grid import FULL_GRID, H100_VALIDATION_GEMM_MODELS, gemm_model, plan_grid
from pagesim.calibrate.models import model_dims

ROOT = Path(__file__).resolve().parents[2]
#: a bound on the dry run against a hang only, far beyond what a loaded machine takes
PATIENCE_S = 1800
#: what the GPU call returns (the device tool brings back at most 8 files)
OUTPUT_FILES = {
    "profile.yaml",
    "report.md",
    "measurements.csv",
    "calibration.json",
    "fit_predicted_vs_measured.png",
    "decode_bandwidth.png",
    "run.log",
}


@pytest.fixture(scope="module")
def tasks():
    spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheels_are_the_dependencies_the_gpu_machine_lacks(tasks):
    with open(ROOT / "pyproject.toml", "rb") as f:
        import tomllib

        deps = tomllib.load(f)["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].lower() for d in tasks.gpu_requirements()}
    assert names == {"simpy", "pydantic", "mypy-extensions"}
    assert set(tasks.gpu_requirements()) <= set(deps)
    assert "cupy" not in " ".join(deps)  # CuPy stays in the gpu extra
    # pyarrow is a dependency the GPU tasks never need: without it (an import of it
    # fails) the records package and the serving fit import
    assert any(d.startswith("pyarrow") for d in deps)
    code = (
        "import sys; sys.modules['pyarrow'] = None; "
        "import pagesim.records, pagesim.calibrate.serving; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-500:]


def test_the_grid_times_the_gemms_of_every_shipped_experiments_model():
    models = set()
    for path in (ROOT / "experiments").glob("**/*.yaml"):
        doc = yaml.safe_load(path.read_text())
        for spec in doc.values() if isinstance(doc, dict) else []:
            if isinstance(spec, dict) and isinstance(spec.get("hardware"), dict):
                hw = spec["hardware"]
                tp = hw.get("tensor_parallel", 1)
                models.add(hw.get("model") if tp == 1 else f"{hw.get('model')}@tp{tp}")
    models.discard(None)
    assert models and set(FULL_GRID.gemm_models) == models | set(H100_VALIDATION_GEMM_MODELS)
    # each entry names the shapes of one GPU of its TP group
    model, tp = gemm_model("opt-175b@tp8")
    assert (model.name, tp) == ("opt-175b", 8)
    shapes = {
        c.params["n"]
        for c in plan_grid(model_dims("opt-13b"), FULL_GRID, np.random.default_rng(0))
        if c.term == "gemm" and c.params["model"] == "opt-175b@tp8"
    }
    assert 3 * model.hidden_size // 8 in shapes


def _wheel(folder: Path, name: str = "demo_pkg") -> Path:
    """A minimal pure-Python wheel: one module and its dist-info."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.parametrize("use_pip", [True, False], ids=["pip", "unpacked"])
def test_carried_wheels_install_offline_into_a_folder(tasks, tmp_path, use_pip):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    lines = []
    tasks.install_wheels(wheels, tmp_path / "site", lines.append, ["demo-pkg"], use_pip=use_pip)
    out = subprocess.run(
        [sys.executable, "-c", "import demo_pkg; print(demo_pkg.VALUE, demo_pkg.__file__)"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert out.stdout.startswith(f"42 {tmp_path / 'site'}"), out.stderr
    assert any("--no-index" in ln for ln in lines) == use_pip


def test_dry_run_of_the_gpu_call_writes_the_whole_output_folder(tmp_path, build_dir):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PAGESIM_PURE_PYTHON")}
    cmd = [sys.executable, str(ROOT / "tasks.py"), "gpu-calibrate", "--dry-run", "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--host-build-dir", str(build_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == OUTPUT_FILES
    log = (out / "run.log").read_text()
    assert log == proc.stdout  # everything the call printed is in the folder
    for needle in (
        "dependencies: importable",
        f"pagesim from {ROOT / 'pagesim'} (pure Python (PAGESIM_PURE_PYTHON=1))",
        "kernel check: 10 of 10 match their references",
        "--budget-s 240",
        "gpu-calibrate: exit 0",
        # the whole steps need PyTorch and a GPU: the dry run says why it has none
        "whole steps: skipped (no ",
    ):
        assert needle in log, needle
    meta = json.loads((out / "calibration.json").read_text())
    assert meta["budget"]["num_timed"] == meta["budget"]["num_planned"]
    assert meta["checked_on"] == "host" and len(meta["checks"]) == 10
    assert "## What the timings answer (synthetic)" in (out / "report.md").read_text()
    profile = yaml.safe_load((out / "profile.yaml").read_text())
    assert profile["kind"] == "synthetic"
