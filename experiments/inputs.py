"""The files a run reads, and their content hashes (part of the run's cache key).

A run reads at most these files besides its spec: ``workload.path`` (the trace CSV
of workload ``csv``, or the file that replaces a table workload's table), else the
prepared length table of a table workload (in the data folder, else the shipped
one; see ``workloads.registry``) and the
cost-model profile (``hardware.profile``, a path or a shipped name). Editing any of
them at the same path changes the run's key, so ``pagesim run`` never answers from
the cache with numbers computed from the old contents.

The Ray executor sends these same files to its workers by content
(``remote_inputs.py``), which points each role's spec field at the worker's copy: a new
role needs its field there too.

:class:`FileHasher` hashes each distinct file once per invocation: it remembers
the digest by (resolved path, mtime, size), so a sweep of a thousand runs over one
trace reads the trace once, not a thousand times.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pagesim.simulator.spec import RunSpec

_CHUNK_BYTES = 1 << 20


def run_input_files(spec: RunSpec) -> dict[str, Path]:
    """``role -> path`` of every file ``spec`` reads (roles: ``workload``, ``profile``)."""
    from pagesim.simulator.costmodel.factory import PROFILE_FILE_NAME, shipped_profiles_dir
    from pagesim.workloads.registry import WORKLOADS

    files: dict[str, Path] = {}
    source = WORKLOADS.get(spec.workload.name)
    if source is not None and source.kind != "synthetic" and spec.workload.path is not None:
        files["workload"] = Path(spec.workload.path)  # replaces a table workload's table
    elif source is not None and source.kind == "table" and source.table_path is not None:
        files["workload"] = source.table_path
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
