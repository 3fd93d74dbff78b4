"""The run cache: one folder per finished run, keyed by a hash of its RunSpec and inputs.

A run's key is the SHA-256 of canonical JSON (sorted keys, no spaces) of its full
RunSpec (defaults filled in, the seed included), the pagesim version, a hash of the
sources that compute a run (``inputs.code_hash``: workloads, allocators, simulator) and
the content hash of every file the run reads (``inputs.py``: trace CSV, prepared
table, profile), so a changed field, a new release, an edited engine, scheduler or cost
model, or an edited input file never reuses a stale result. A run's folder holds
``spec.json``, ``summary.json`` (the summary metrics, the ``extra`` values and notes),
``requests.csv.gz`` and ``timeseries.csv.gz``. It is written under a temporary
name (``.tmp-<key>-<pid>-<random>``) and renamed into place: a cached run is whole
or absent, so a sweep killed part-way resumes by running only the runs whose folder
is missing; :meth:`RunCache.clean_leftovers` removes the temporary folders of
processes that died (SIGKILL leaves them).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pandas as pd

from pagesim import __version__
from pagesim.experiments.inputs import code_hash
from pagesim.simulator.result import RunResult
from pagesim.simulator.spec import RunSpec

#: gzip without a timestamp, so the same table is the same bytes; level 1 because a
#: sweep writes two tables per run and level 9 took longer than the runs themselves.
GZIP_OPTIONS = {"method": "gzip", "mtime": 0, "compresslevel": 1}
#: Floats in CSVs: pandas default, the shortest repr that round-trips a float64.
FLOAT_FORMAT: str | None = None


def _plain(value: object) -> object:
    """A numpy scalar as the Python number it holds (JSON has no numpy types)."""
    return value.item() if hasattr(value, "item") else value


def canonical_json(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def run_key(run_spec: RunSpec, input_hashes: dict[str, str] | None = None) -> str:
    """The cache key of a run: hash of its canonical spec, the pagesim version, the hash
    of the code that computes it and the content hashes of the files it reads
    (``role -> sha256``, see ``inputs.py``)."""
    doc = {
        "pagesim": __version__,
        "code": code_hash(),
        "run_spec": run_spec.model_dump(mode="json"),
    }
    if input_hashes:
        doc["inputs"] = input_hashes
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()[:20]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_tmp(folder: Path) -> int:
    """Remove ``.tmp-*-<pid>-*`` entries of ``folder`` whose process is gone; returns how many."""
    if not folder.is_dir():
        return 0
    removed = 0
    for entry in folder.iterdir():
        if not entry.name.startswith(".tmp-"):
            continue
        parts = entry.name.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit() or _pid_alive(int(parts[1])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed += 1
    return removed


#: a fleet's run: one row per replica (``RunResult.replicas``), kept beside its summary
REPLICAS_TABLE = "replicas.csv.gz"


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """A DataFrame as gzip CSV with deterministic bytes."""
    frame.to_csv(path, index=False, compression=GZIP_OPTIONS, float_format=FLOAT_FORMAT)


class RunCache:
    """Finished runs under ``root`` (one folder per run key, see :func:`run_key`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, key: str) -> Path:
        return self.root / key

    def has(self, key: str) -> bool:
        return (self.folder(key) / "summary.json").is_file()

    def clean_leftovers(self) -> int:
        """Remove temporary folders left by processes that died; returns how many."""
        return remove_dead_tmp(self.root)

    def store(self, key: str, run_spec: RunSpec, result: RunResult, *, tables: bool = True) -> Path:
        """Write a run's result atomically (temp folder + rename); returns its folder.
        ``tables`` False keeps its summary only (an interval's later replicates)."""
        final = self.folder(key)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            (tmp / "spec.json").write_text(canonical_json(run_spec.model_dump(mode="json")) + "\n")
            summary = {
                "summary": {k: _plain(v) for k, v in result.summary.items()},
                "extra": {k: _plain(v) for k, v in result.extra.items()},
                "notes": dict(getattr(result, "notes", {})),
            }
            (tmp / "summary.json").write_text(json.dumps(summary, sort_keys=True, indent=1) + "\n")
            if tables:
                write_table(result.requests, tmp / "requests.csv.gz")
                write_table(result.timeseries, tmp / "timeseries.csv.gz")
            if getattr(result, "replicas", None) is not None:
                write_table(result.replicas, tmp / REPLICAS_TABLE)
            try:
                tmp.rename(final)
            except OSError:
                if not (final / "summary.json").is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        return final

    def load_summary(self, key: str) -> tuple[dict[str, float], dict[str, float | str]]:
        """``(summary, extra)`` of a cached run; ``extra`` includes the text ``notes``."""
        doc = json.loads((self.folder(key) / "summary.json").read_text())
        return doc["summary"], {**doc["extra"], **doc.get("notes", {})}
