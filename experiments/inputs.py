"""The files a run reads, and their content hashes (part of the run's cache key).

A run reads at most these files besides its spec: ``workload.path`` (the trace CSV
of workload ``csv``, or the file that replaces a table workload's table), else the
prepared length table of a table workload (in the data folder, else the shipped
one; see ``workloads.registry``) and the
cost-model profile (``hardware.profile``, a path or a shipped name), and the model's
``config.json`` when ``hardware.model`` is a path. Editing any of
them at the same path changes the run's key, so ``pagesim run`` never answers from
the cache with numbers computed from the old contents.

The Ray executor sends these same files to its workers by content
(``remote_inputs.py``), which points each role's spec field at the worker's copy: a new
role needs its field there too.

:class:`FileHasher` hashes each distinct file once per invocation: it remembers
the digest by (resolved path, mtime, size), so a sweep of a thousand runs over one
trace reads the trace once, not a thousand times.

The code that computes a run is an input too: :func:`code_hash` is a hash of every
``.py`` source of :data:`CODE_PACKAGES` (the workloads, the allocators, the simulator:
engine, schedulers, cost model, metrics), so an edited scheduler or cost formula, or an
upgraded pagesim, never answers from a cache its old code filled. The sources are hashed
whether the modules run compiled or not: the compiled modules are built from those
files, and ``pagesim._native`` runs the sources instead whenever one differs from what
was compiled. It is computed once per process (about 80 files, a few milliseconds).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

from pagesim.simulator.spec import RunSpec

_CHUNK_BYTES = 1 << 20
#: the packages whose sources compute a run (what reads the results back does not)
CODE_PACKAGES = ("pagesim.workloads", "pagesim.allocators", "pagesim.simulator")


def code_files() -> list[tuple[str, Path]]:
    """``(name, path)`` of every ``.py`` source of :data:`CODE_PACKAGES` (subpackages
    included), sorted by name; the name is the file's path under its package, which is
    the same in the repository and in an installed wheel."""
    files = []
    for package in CODE_PACKAGES:
        root = Path(importlib.import_module(package).__path__[0])
        for path in root.rglob("*.py"):
            files.append((f"{package}/{path.relative_to(root).as_posix()}", path))
    return sorted(files)


@functools.cache
def code_hash() -> str:
    """A hash of the sources that compute a run (:func:`code_files`), once per process."""
    sha = hashlib.sha256()
    for name, path in code_files():
        sha.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()[:20]


def run_input_files(spec: RunSpec) -> dict[str, Path]:
    """``role -> path`` of every file ``spec`` reads (roles: ``workload``, ``profile``,
    ``model``)."""
    from pagesim.simulator.costmodel.factory import PROFILE_FILE_NAME, shipped_profiles_dir
    from pagesim.workloads.registry import WORKLOADS

    files: dict[str, Path] = {}
    source = WORKLOADS.get(spec.workload.name)
    if source is not None and source.kind != "synthetic" and spec.workload.path is not None:
        files["workload"] = Path(spec.workload.path)  # replaces a table workload's table
    elif source is not None and source.kind == "table" and source.table_path is not None:
        files["workload"] = source.table_path
    from pagesim.simulator.model_catalog import config_file, is_config_path

    if is_config_path(spec.hardware.model):
        files["model"] = config_file(spec.hardware.model)
    profile = spec.hardware.profile
    if profile is not None:
        if profile.endswith((".yaml", ".yml")) or "/" in profile or "\\" in profile:
            files["profile"] = Path(profile)
        else:
            folder = shipped_profiles_dir()
            if folder is not None:
                files["profile"] = folder / profile / PROFILE_FILE_NAME
    return files


class FileHasher:
    """SHA-256 of files, each read once per (resolved path, mtime, size)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int, int], str] = {}
        self.num_reads = 0

    def digest(self, path: Path) -> str:
        """The file's SHA-256 (hex), or ``"missing"`` when there is no such file."""
        try:
            resolved = path.resolve()
            stat = resolved.stat()
        except OSError:
            return "missing"
        memo_key = (str(resolved), stat.st_mtime_ns, stat.st_size)
        if memo_key not in self._memo:
            sha = hashlib.sha256()
            with resolved.open("rb") as fh:
                while chunk := fh.read(_CHUNK_BYTES):
                    sha.update(chunk)
            self.num_reads += 1
            self._memo[memo_key] = sha.hexdigest()
        return self._memo[memo_key]

    def input_hashes(self, spec: RunSpec) -> dict[str, str]:
        """``role -> content hash`` of every file ``spec`` reads."""
        return {role: self.digest(path) for role, path in run_input_files(spec).items()}
