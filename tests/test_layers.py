"""The import graph follows the layers: workloads -> records; workloads, records,
allocators -> simulator -> experiments.

records (real servers' measured records, read into workloads' traces) imports
workloads and nothing above it; calibrate may import simulator.costmodel (the profile
schema it writes), the specs and the plan (the serving fit prices reconstructed steps)
and nothing else of the simulator, and workloads and records (the measured records it
fits on); the simulator never imports calibrate, CuPy or torch; experiments
(validation) may import calibrate; nothing imports experiments except the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("workloads", "records", "allocators", "simulator", "calibrate", "experiments", "pagesim")

# layer -> pagesim layers it may import
ALLOWED = {
    "pagesim": {"pagesim"},  # the core package: errors, specbase, version (cli is special-cased)
    "workloads": {"pagesim", "workloads"},
    "records": {"pagesim", "workloads", "records"},
    "allocators": {"pagesim", "allocators"},
    "simulator": {"pagesim", "workloads", "records", "allocators", "simulator"},
    "calibrate": {
        "pagesim",
        "calibrate",
        "workloads",
        "records",
        "simulator.costmodel",
        "simulator.model_gpu_specs",
        "simulator.plan",
    },
    "experiments": {
        "pagesim",
        "workloads",
        "records",
        "allocators",
        "simulator",
        "calibrate",
        "experiments",
    },  # fmt: skip
}
FORBIDDEN_THIRD_PARTY = {
    "workloads": {"cupy", "torch", "simpy"},
    "records": {"cupy", "torch", "simpy"},
    "allocators": {"cupy", "torch", "simpy"},
    "simulator": {"cupy", "torch"},
    "experiments": {"cupy", "torch"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _layer_of(module: str) -> str | None:
    """'pagesim.simulator.costmodel.profile' -> 'simulator.costmodel' / 'simulator' / ..."""
    parts = module.split(".")
    if parts[0] != "pagesim":
        return None
    if len(parts) == 1 or parts[1] not in LAYERS:
        return "pagesim"
    return ".".join(parts[1:3]) if len(parts) > 2 else parts[1]


def _allowed(layer: str, target: str) -> bool:
    """A whole layer ("simulator") admits its sublayers; a sublayer entry admits only itself."""
    return any(
        target == a or target.startswith(a + ".") or ("." not in a and target.split(".")[0] == a)
        for a in ALLOWED[layer]
    )


def _python_files(layer: str) -> list[Path]:
    folder = ROOT / layer
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("layer", [name for name in ALLOWED])
def test_layer_imports_point_one_way(layer: str) -> None:
    bad = []
    for path in _python_files(layer):
        if layer == "pagesim" and path.name in ("cli.py", "api.py"):
            continue  # the CLI dispatcher and the notebook API are facades over every layer
        for module in _imports(path):
            target = _layer_of(module)
            if target is not None and not _allowed(layer, target):
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
            top = module.split(".")[0]
            if top in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                bad.append(f"{path.relative_to(ROOT)} imports {module} (not allowed in {layer})")
    assert not bad, "layering violations:\n" + "\n".join(bad)


def test_layer_check_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself must be able to fail."""
    assert not _allowed("allocators", "simulator")
    assert not _allowed("workloads", "experiments")
    assert not _allowed("workloads", "records")
    assert not _allowed("records", "simulator")
    assert _allowed("calibrate", "records") and _allowed("records", "workloads")
    assert not _allowed("calibrate", "simulator")
    assert _allowed("calibrate", "simulator.costmodel")
    assert _allowed("experiments", "simulator")
    f = tmp_path / "x.py"
    f.write_text("from pagesim.experiments import runner\nimport cupy\n")
    assert _imports(f) == {"pagesim.experiments", "cupy"}
    assert _layer_of("pagesim.experiments") == "experiments"
    assert _layer_of("pagesim.errors") == "pagesim"
