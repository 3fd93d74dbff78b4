"""Writing output files whole or not at all (temp file + rename), deterministically."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagesim.experiments.cache import FLOAT_FORMAT
from pagesim.files import atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_text", "write_csv"]


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A plain CSV (floats with round-trip precision, NaN as ``nan``, ``\\n`` line ends)."""
    text = frame.to_csv(index=False, float_format=FLOAT_FORMAT, na_rep="nan", lineterminator="\n")
    atomic_write_text(path, text)
