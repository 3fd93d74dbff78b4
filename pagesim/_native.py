"""The modules that run compiled, and the guard that runs their sources instead.

``setup.py`` compiles the modules in :data:`COMPILED` with mypyc (the engine's per-step
path: the engine, the schedulers, the paged allocator, its lockstep tables, its block
pool and its prefix cache, vLLM V1's KV cache manager with its tables and its pool,
the contiguous allocator and its heaps, the admission answers, the recorder and the
request log, the cost model's formulas, the plan and the request state) and writes
``pagesim/_compiled.json``, a hash of each one's source. The compiled modules run the
same operations in the same order as their sources, so a simulation gives the same
results either way (``tests/test_native.py``), faster (``docs/performance.md``).

At import (``pagesim/__init__.py`` calls :func:`choose`), the compiled modules are
used only if every source still has the hash it was compiled from. Otherwise, or
with ``PAGESIM_PURE_PYTHON=1`` in the environment, all of them are loaded from their
``.py`` files (never some of each: compiled classes refer to each other directly), and
an edited source warns once that it runs as Python until it is compiled again. The
modules outside :data:`COMPILED` always load from source, even beside an extension an
earlier build left.

The rules the compiled modules follow, and the idioms they name (boxed ids, named
constructors, ...), are in ``docs/compiled_modules.md``; :data:`BoxedId` is the one
the modules import from here.

This module imports nothing from pagesim (``setup.py`` reads it before pagesim exists).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

#: compiled by mypyc when pagesim is installed (setup.py)
COMPILED = (
    "pagesim.allocators.status",
    "pagesim.allocators.validation",
    "pagesim.allocators.prefix_cache",
    "pagesim.allocators.block_pool",
    "pagesim.allocators.lockstep",
    "pagesim.allocators.paged",
    "pagesim.allocators.v1_pool",
    "pagesim.allocators.v1_tables",
    "pagesim.allocators.paged_v1",
    "pagesim.allocators.buddy",
    "pagesim.allocators.first_fit",
    "pagesim.allocators.artifact_buddy",
    "pagesim.allocators.contiguous",
    "pagesim.simulator.plan",
    "pagesim.simulator.request",
    "pagesim.simulator.token_gaps",
    "pagesim.simulator.request_log",
    "pagesim.simulator.metrics",
    "pagesim.simulator.costmodel.model",
    "pagesim.simulator.schedulers.ancestry",
    "pagesim.simulator.schedulers.step",
    "pagesim.simulator.schedulers.riders",
    "pagesim.simulator.schedulers.beams",
    "pagesim.simulator.schedulers.base",
    "pagesim.simulator.schedulers.vllm",
    "pagesim.simulator.schedulers.vllm_paper",
    "pagesim.simulator.schedulers.vllm_v1",
    "pagesim.simulator.schedulers.orca",
    "pagesim.simulator.schedulers.static",
    "pagesim.simulator.engine",
)

#: a sequence or group id kept as the object its caller holds: compiled, an ``int``
#: annotated ``int`` is unboxed, and boxed anew (a new object) at every dict look-up or
#: store (docs/compiled_modules.md, "Boxed ids")
BoxedId = Any

#: the environment variable that makes an install, or a run, pure Python
PURE_ENV = "PAGESIM_PURE_PYTHON"

#: how this process runs the COMPILED modules: "compiled" or "pure Python (why)"
status = "not decided"


def source_hash(data: bytes) -> str:
    """The hash ``_compiled.json`` keeps of a compiled module's source."""
    return hashlib.sha256(data).hexdigest()[:16]


class SourcesFirst(importlib.abc.MetaPathFinder):
    """Loads pagesim's modules from their ``.py`` files, ignoring extensions beside
    them: every module, or (``keep_compiled``) every module but the COMPILED ones (an
    extension left by an earlier build of a module no longer compiled is never used)."""

    def __init__(self, *, keep_compiled: bool) -> None:
        self.keep_compiled = keep_compiled

    def find_spec(self, fullname, path, target=None):
        if not path or not fullname.startswith("pagesim."):
            return None
        if self.keep_compiled and fullname in COMPILED:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for directory in path:
            source = os.path.join(directory, name)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def _source_file(module: str) -> Path | None:
    """A COMPILED module's source, found without importing any package below pagesim
    (a subpackage's directory is inside its parent's, in the repository and installed)."""
    parts = module.split(".")
    spec = importlib.util.find_spec(".".join(parts[:2]))  # imports pagesim only
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        path = Path(directory, *parts[2:-1], parts[-1] + ".py")
        if path.is_file():
            return path
    return None


def _stale(package_dir: Path) -> str | None:
    """Why the compiled modules cannot be used (None: they can)."""
    if os.environ.get(PURE_ENV) == "1":
        return f"{PURE_ENV}=1"
    try:
        stamp = json.loads((package_dir / "_compiled.json").read_text())
    except (OSError, ValueError):
        return "not compiled"
    for module in COMPILED:
        source = _source_file(module)
        if source is None or stamp.get(module) != source_hash(source.read_bytes()):
            where = source if source is not None else module
            warnings.warn(
                f"pagesim: {where} changed since it was compiled: the engine's modules run "
                "as Python (about a third of the speed) until they are compiled again "
                "(`pip install -e .`, or `python3 tasks.py run`)",
                RuntimeWarning,
                stacklevel=3,
            )
            return f"{where} changed since it was compiled"
    return None


def choose(package_dir: Path) -> str:
    """Decide, once per process, whether the COMPILED modules run compiled; returns
    :data:`status`."""
    global status
    if status != "not decided":
        return status
    why = _stale(package_dir)
    sys.meta_path.insert(0, SourcesFirst(keep_compiled=why is None))
    status = "compiled" if why is None else f"pure Python ({why})"
    return status
