"""The run cache: one folder per finished run, keyed by a hash of its RunSpec.

A run's key is the SHA-256 of canonical JSON (sorted keys, no spaces) of its full
RunSpec (defaults filled in, the seed included) and the pagesim version, so a
changed field or a new release never reuses a stale result. A run's folder holds
``spec.json``, ``summary.json`` (the summary metrics and the ``extra`` values),
``requests.csv.gz`` and ``timeseries.csv.gz``. It is written under a temporary
name and renamed into place: a cached run is whole or absent, so a sweep killed
part-way resumes by running only the runs whose folder is missing.
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


def run_key(run_spec: RunSpec) -> str:
    """The cache key of a run: hash of its canonical spec and the pagesim version."""
    payload = canonical_json({"pagesim": __version__, "run_spec": run_spec.model_dump(mode="json")})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """A DataFrame as gzip CSV with deterministic bytes."""
    frame.to_csv(path, index=False, compression=GZIP_OPTIONS, float_format=FLOAT_FORMAT)


class RunCache:
    """Finished runs under ``root`` (one folder per run key)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, run_spec: RunSpec) -> Path:
        return self.root / run_key(run_spec)

    def has(self, run_spec: RunSpec) -> bool:
        return (self.folder(run_spec) / "summary.json").is_file()

    def store(self, run_spec: RunSpec, result: RunResult) -> Path:
        """Write a run's result atomically (temp folder + rename); returns its folder."""
        final = self.folder(run_spec)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            (tmp / "spec.json").write_text(canonical_json(run_spec.model_dump(mode="json")) + "\n")
            summary = {
                "summary": {k: _plain(v) for k, v in result.summary.items()},
                "extra": {k: _plain(v) for k, v in result.extra.items()},
            }
            (tmp / "summary.json").write_text(json.dumps(summary, sort_keys=True, indent=1) + "\n")
            write_table(result.requests, tmp / "requests.csv.gz")
            write_table(result.timeseries, tmp / "timeseries.csv.gz")
            try:
                tmp.rename(final)
            except OSError:
                if not (final / "summary.json").is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        return final

    def load_summary(self, run_spec: RunSpec) -> tuple[dict[str, float], dict[str, float]]:
        """``(summary, extra)`` of a cached run."""
        doc = json.loads((self.folder(run_spec) / "summary.json").read_text())
        return doc["summary"], doc["extra"]
