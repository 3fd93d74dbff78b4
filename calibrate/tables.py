"""Reading the CSV tables calibration takes in: its own measurements, and the
operator and iteration timings others published (Vidur, Splitwise).

One reader for all of them, so that each says the same things the same way: a file
that is missing, is not a CSV table, or lacks a column the caller needs is a
``DataError`` naming the file (and the column).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pagesim.errors import DataError


def read_table(path: str | Path, required: Sequence[str], what: str = "") -> pd.DataFrame:
    """The CSV table at ``path``, which must have the columns ``required``; ``what`` says
    what the file should be (it follows "file not found")."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found" + (f" ({what})" if what else ""))
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a CSV table: {exc}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]!r}; required: {list(required)}")
    return df
