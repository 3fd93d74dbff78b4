"""Writing output files whole or not at all (temp file + rename), deterministically."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pandas as pd

from pagesim.experiments.cache import FLOAT_FORMAT


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A plain CSV (floats with round-trip precision, NaN as ``nan``, ``\\n`` line ends)."""
    text = frame.to_csv(index=False, float_format=FLOAT_FORMAT, na_rep="nan", lineterminator="\n")
    atomic_write_text(path, text)
