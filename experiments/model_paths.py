"""``hardware.model`` paths in an experiment file are relative to that file.

A ``config.json`` path (``simulator/model_catalog.py is_config_path``: ending in ``.json``,
starting with ``./`` or ``../``, or a folder beside the file holding a ``config.json``) that
is relative is joined to the experiment file's folder before the points are built, in the
base, the sweep's grid and zip groups, and the ``quick`` section; absolute paths, ``~``
paths, shipped names and Hugging Face ids are left as they are. A ``--set`` value is the
command line's, relative to the working directory. Manifests of one's own runs anchor
theirs the same way (:func:`anchored`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

MODEL_PATH = "hardware.model"


def anchored(value: Any, folder: Path) -> Any:
    """``value`` joined to ``folder`` when it is a relative config path, else unchanged."""
    if not isinstance(value, str) or os.path.isabs(value) or value.startswith("~"):
        return value
    looks_like_path = value.endswith(".json") or value.startswith(("./", "../"))
    if looks_like_path or (folder / value / "config.json").is_file():
        return os.path.normpath(os.path.join(str(folder), value))
    return value


def _sweep(sweep: Any, folder: Path) -> None:
    if not isinstance(sweep, dict):
        return
    grid = sweep.get("grid")
    if isinstance(grid, dict) and isinstance(grid.get(MODEL_PATH), list):
        grid[MODEL_PATH] = [anchored(v, folder) for v in grid[MODEL_PATH]]
    for group in sweep.get("zip") or []:
        if isinstance(group, dict) and isinstance(group.get(MODEL_PATH), list):
            group[MODEL_PATH] = [anchored(v, folder) for v in group[MODEL_PATH]]


def anchor_model_paths(doc: Any, experiment_file: Path) -> Any:
    """A copy of the parsed experiment ``doc`` with its model paths anchored (module doc)."""
    if not isinstance(doc, dict):
        return doc
    folder = Path(experiment_file).parent
    out = copy.deepcopy(doc)
    hardware = (
        (out.get("base") or {}).get("hardware") if isinstance(out.get("base"), dict) else None
    )
    if isinstance(hardware, dict) and "model" in hardware:
        hardware["model"] = anchored(hardware["model"], folder)
    _sweep(out.get("sweep"), folder)
    quick = out.get("quick")
    if isinstance(quick, dict):
        if isinstance(quick.get("set"), dict) and MODEL_PATH in quick["set"]:
            quick["set"][MODEL_PATH] = anchored(quick["set"][MODEL_PATH], folder)
        _sweep(quick.get("sweep"), folder)
    return out
