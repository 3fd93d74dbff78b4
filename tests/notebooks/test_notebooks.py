"""Every notebook under notebooks/ runs top to bottom without an error.

Each runs with nbclient on the ``python3`` kernel (the test environment's ipykernel) in
the ``notebooks/`` folder, as a user opening it in Jupyter would, with a per-cell
timeout against a hang; afterwards the folder must hold exactly what it held before (a notebook
writes only to temporary folders). Notebooks are committed without outputs; this test
is what executes them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pagesim.cli import main

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
#: Notebooks that read external data: the workloads and the shared files they come from.
EXTERNAL = {"05_your_own_trace": [("azure-conv", ("azure_llm_2023", "conv.csv"))]}
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: a bound on one cell against a hang only, far beyond what a loaded machine takes
CELL_TIMEOUT_S = 1800


def test_the_walkthroughs_are_there():
    names = [p.name for p in NOTEBOOKS]
    assert names == [
        "01_why_paging.ipynb",
        "02_capacity.ipynb",
        "03_sharing.ipynb",
        "04_calibration.ipynb",
        "05_your_own_trace.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; strip them before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data_root: Path
):
    """With the shared data beside the checkout, the notebooks that read external data
    get it prepared in their data folder (PAGESIM_DATA); without it they run on their
    stand-ins (and say what to fetch)."""
    for workload, parts in EXTERNAL.get(path.stem, []):
        source = shared_data_root.joinpath(*parts)
        if source.is_file():
            assert main(["workload", "prepare", workload, "--source", str(source)]) == 0
    nb = nbformat.read(path, as_version=4)
    before = {p.name for p in path.parent.iterdir()}
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # the kernel runs this interpreter's environment, wherever the venv lives
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    left = sorted({p.name for p in path.parent.iterdir()} - before)
    assert not left, f"{path.name} left {left} in notebooks/; write to a temporary folder"
