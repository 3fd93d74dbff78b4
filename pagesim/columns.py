"""Numbers read from tables others wrote: checked cell by cell, one line per fault.

Every reader of external data (workload traces and length tables, operator and iteration
timings, measured records) turns a column of cells into numbers through these, so that
each says the same things the same way: a cell that is text, not finite, not an integer
where one is needed, or outside the range the quantity can have is a
:class:`~pagesim.errors.DataError` naming the place (the caller's ``where(i)``: file and
line, or file and item), the column and the cell as written. Integers come back as
``int64``: a count that fits the range is stored without wrapping (the checks compare
the parsed value, as a float64, against bounds far below 2**53, where every integer is
exact; a 23-digit count parses as about 1e22 and is refused, never rounded into range).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from pagesim.errors import DataError

#: how much of a bad cell a message shows
SHOWN_CHARS = 40


def shown(cell: object) -> str:
    """A cell as a message shows it: its repr, cut to :data:`SHOWN_CHARS`."""
    text = repr(cell.item() if isinstance(cell, np.generic) else cell)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _as_floats(cells: pd.Series) -> np.ndarray:
    """The cells as float64: numbers as they are, text parsed, anything else NaN."""
    if cells.dtype.kind in "iuf":
        return cells.to_numpy(dtype=np.float64)
    if cells.dtype.kind == "b":
        return np.full(len(cells), np.nan)
    as_text = cells.map(lambda c: c.strip() if isinstance(c, str) else c)
    numbers = pd.to_numeric(as_text.where(~as_text.map(_is_bool)), errors="coerce")
    return numbers.to_numpy(dtype=np.float64)


def _is_bool(cell: object) -> bool:
    return isinstance(cell, bool | np.bool_)


def integer_column(
    cells: pd.Series | np.ndarray | list,
    column: str,
    where: Callable[[int], str],
    *,
    low: int,
    high: int,
    what: str | None = None,
) -> np.ndarray:
    """``cells`` as int64, each an integer from ``low`` to ``high``; else a DataError
    ``<where(i)>: <column> must be <what>, got <cell>`` for the first bad cell (``what``:
    default "an integer from LOW to HIGH"), or, for an integer above ``high``,
    ``... must be at most HIGH, got <cell>``."""
    cells = cells if isinstance(cells, pd.Series) else pd.Series(list(cells), dtype=object)
    values = _as_floats(cells)
    is_integer = np.isfinite(values) & (values == np.round(values))
    bad = ~is_integer | (values < low)
    what = what or f"an integer from {low:,} to {high:,}"
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where(i)}: {column} must be {what}, got {shown(cells.iloc[i])}")
    too_big = values > high
    if too_big.any():
        i = int(np.flatnonzero(too_big)[0])
        raise DataError(
            f"{where(i)}: {column} must be at most {high:,}, got {shown(cells.iloc[i])}"
        )
    return values.astype(np.int64)


def number_column(
    cells: pd.Series,
    column: str,
    where: Callable[[int], str],
    *,
    allow_missing: bool = False,
) -> np.ndarray:
    """``cells`` as float64, each a finite number (or, ``allow_missing``, an empty cell:
    NaN); else a DataError ``<where(i)>: <column> must be a number, got <cell>``."""
    values = _as_floats(cells)
    missing = cells.isna().to_numpy() | cells.map(lambda c: isinstance(c, str) and not c.strip())
    bad = ~np.isfinite(values) & ~(np.asarray(missing, dtype=bool) & allow_missing)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = "a finite number" if allow_missing else "a finite number (no empty cells)"
        raise DataError(f"{where(i)}: {column} must be {kind}, got {shown(cells.iloc[i])}")
    return values
