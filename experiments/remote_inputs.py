"""A run's input files sent by content, for workers that do not share the driver's files.

On a Ray cluster a run executes on whichever node has a free CPU, where the paths of
its RunSpec mean nothing (a trace CSV beside the experiment file, a table prepared in
the driver's data folder, a relative path) or something else (another copy of the
file). So the Ray executor never lets a worker read an input by path:

- on the driver, :class:`InputPacker` reads every file the run reads
  (:func:`~pagesim.experiments.inputs.run_input_files`, the files whose hashes make the
  cache key: the trace CSV or table file at ``workload.path``, else a table workload's
  prepared or shipped length table, and the profile YAML, given by path or by a shipped
  name, and the model's config.json given by path) once per (resolved path, mtime,
  size), stores its bytes with ``put``
  (``ray.put``) once per distinct content (SHA-256), and gives each run its
  :class:`ShippedFile` list: role, file name, digest, a reference to the bytes, and the
  name the spec gave;
- on the worker, :func:`simulate_shipped` writes each file, under its own file name,
  into a folder private to the worker process (each content once per process; the
  folder is removed when the process exits, and a later worker removes those of dead
  processes), points the spec at those copies (``workload.path``, ``hardware.profile``,
  ``hardware.model``),
  runs ``simulate``, and writes the names the spec gave back wherever the run's texts
  name a copy (a profile is named by its reference in the ``cost_model_profile`` and
  ``cost_model_description`` notes, ``simulator/provenance.py``) and in the message of
  an error.

A table workload read from the data folder (or the package) becomes ``workload.path``
naming the copy of its ``.npz``, which ``workloads.registry.load_rows`` reads as it
reads the prepared table; its ``workload_table`` note (``simulator/provenance.py``) is
then put back as the driver gives it: none for the shipped table, the file's name in
the data folder and its hash for a prepared one. The readers name a file in their notes by its file name
(``csvtrace``, ``sharegpt``, ``alpaca``, ``artifact``), which each copy keeps. So a run
on a worker gives the result the local executor computes from the same bytes, wherever
the files were.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagesim.errors import PagesimError
from pagesim.experiments.inputs import run_input_files
from pagesim.simulator.result import RunResult
from pagesim.simulator.spec import RunSpec


@dataclass(frozen=True)
class ShippedFile:
    """One input of a run, by content: ``ref`` gives its bytes (``get(ref)``)."""

    role: str
    name: str
    digest: str
    ref: Any
    #: how the run names the file: the spec's value, or the table the driver resolved
    original: str
    #: a table the driver resolved by the workload's name (no ``workload.path``): whether
    #: it did, and the ``workload_table`` label the driver gives it (None: the shipped
    #: table, which outputs do not name; ``simulator/provenance.py``)
    resolved_table: bool = False
    table_label: str | None = None


class InputPacker:
    """The driver's side: each distinct input read once and stored once (module doc)."""

    def __init__(self, put: Callable[[bytes], Any]) -> None:
        self._put = put
        self._file_to_stored: dict[tuple[str, int, int], tuple[str, Any]] = {}
        self._digest_to_ref: dict[str, Any] = {}
        self.num_reads = 0

    @property
    def num_stored(self) -> int:
        """How many distinct contents were stored."""
        return len(self._digest_to_ref)

    def pack(self, spec: RunSpec) -> tuple[ShippedFile, ...]:
        """The files ``spec`` reads, by content. A file that is not there is left out (its
        run reads the path and fails as it would locally; preflight reports it first)."""
        shipped = []
        for role, path in run_input_files(spec).items():
            try:
                resolved = path.resolve()
                stat = resolved.stat()
            except OSError:
                continue
            if not resolved.is_file():
                continue
            file_key = (str(resolved), stat.st_mtime_ns, stat.st_size)
            if file_key not in self._file_to_stored:
                data = resolved.read_bytes()
                self.num_reads += 1
                digest = hashlib.sha256(data).hexdigest()
                if digest not in self._digest_to_ref:
                    self._digest_to_ref[digest] = self._put(data)
                self._file_to_stored[file_key] = (digest, self._digest_to_ref[digest])
            digest, ref = self._file_to_stored[file_key]
            original = _original(spec, role, path)
            resolved = role == "workload" and spec.workload.path is None
            label = _table_label(spec) if resolved else None
            shipped.append(ShippedFile(role, path.name, digest, ref, original, resolved, label))
        return tuple(shipped)


def _table_label(spec: RunSpec) -> str | None:
    """The ``workload_table`` label of the table the driver resolves by name (None when
    it is the shipped one)."""
    from pagesim.workloads.registry import table_origin

    origin = table_origin(spec.workload.name, None)
    return None if origin is None else origin[1]


def _table_note_as_driver(notes: dict[str, str], spec: RunSpec, file: ShippedFile, copy: str):
    """The worker read a table the driver resolved by name through ``workload.path`` (its
    copy): name it as the driver would, or not at all if the driver's is the shipped one."""
    from pagesim.workloads.registry import table_origin

    note = notes.get("workload_table")
    if note is None:
        return
    if file.table_label is None:
        del notes["workload_table"]
        return
    origin = table_origin(spec.workload.name, copy)
    if origin is not None:
        notes["workload_table"] = note.replace(origin[1], file.table_label, 1)


def _original(spec: RunSpec, role: str, path: Path) -> str:
    if role == "profile" and spec.hardware.profile is not None:
        return spec.hardware.profile
    if role == "model":
        return spec.hardware.model
    if role == "workload" and spec.workload.path is not None:
        return spec.workload.path
    return str(path)


_folder: Path | None = None
_written: dict[tuple[str, str, str], Path] = {}


def copies_parent() -> Path:
    """The folder (of this user, in the temporary folder) holding each process's copies."""
    uid = getattr(os, "getuid", lambda: "user")()
    return Path(tempfile.gettempdir()) / f"pagesim-inputs-{uid}"


def remove_leftovers() -> int:
    """Remove the copies of processes that died without removing them (a Ray worker is
    killed when its job ends); returns how many folders."""
    from pagesim.experiments.cache import remove_dead_tmp

    return remove_dead_tmp(copies_parent())


def _process_folder() -> Path:
    """This process's private folder of copies (made once; removed at exit)."""
    global _folder
    if _folder is None:
        parent = copies_parent()
        parent.mkdir(mode=0o700, exist_ok=True)
        remove_leftovers()
        _folder = Path(tempfile.mkdtemp(prefix=f".tmp-inputs-{os.getpid()}-", dir=parent))
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def materialize(file: ShippedFile, get: Callable[[Any], bytes]) -> Path:
    """The file's copy in this process's folder, under its own name (written once)."""
    key = (file.role, file.digest, file.name)
    path = _written.get(key)
    if path is None or not path.is_file():
        path = _process_folder() / file.role / file.digest[:32] / file.name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{file.name}.part")
        tmp.write_bytes(get(file.ref))
        tmp.replace(path)
        _written[key] = path
    return path


def local_spec(
    spec: RunSpec, files: tuple[ShippedFile, ...], get: Callable[[Any], bytes]
) -> tuple[RunSpec, dict[str, str]]:
    """``spec`` reading the local copies of ``files``, and ``copy path -> original``."""
    workload, hardware = spec.workload, spec.hardware
    copy_to_original = {}
    for file in files:
        copy = str(materialize(file, get))
        copy_to_original[copy] = file.original
        if file.role == "workload":
            workload = workload.model_copy(update={"path": copy})
        elif file.role == "profile":
            hardware = hardware.model_copy(update={"profile": copy})
        elif file.role == "model":
            hardware = hardware.model_copy(update={"model": copy})
        else:  # a role inputs.run_input_files learned and this module did not
            raise PagesimError(f"input role {file.role!r}: no spec field to point at its copy")
    return spec.model_copy(update={"workload": workload, "hardware": hardware}), copy_to_original


def _named_back(text: str, copy_to_original: dict[str, str]) -> str:
    for copy, original in copy_to_original.items():
        text = text.replace(copy, original)
    return text


def simulate_shipped(
    simulate: Callable[[RunSpec], RunResult],
    spec: RunSpec,
    files: tuple[ShippedFile, ...],
    get: Callable[[Any], bytes] | None = None,
) -> RunResult:
    """The worker's side: ``simulate(spec)`` on local copies of ``files`` (module doc).

    ``get`` turns a reference into the file's bytes (default: ``ray.get``)."""
    if get is None:
        import ray

        get = ray.get
    run_spec, copy_to_original = local_spec(spec, files, get)
    try:
        result = simulate(run_spec)
    except PagesimError as exc:
        exc.args = tuple(
            _named_back(arg, copy_to_original) if isinstance(arg, str) else arg for arg in exc.args
        )
        raise
    for file in files:
        if file.resolved_table:
            _table_note_as_driver(result.notes, spec, file, run_spec.workload.path or "")
    result.notes.update({k: _named_back(v, copy_to_original) for k, v in result.notes.items()})
    result.extra.update(
        {k: _named_back(v, copy_to_original) for k, v in result.extra.items() if isinstance(v, str)}
    )
    return result
