"""Reading the CSV tables calibration takes in: its own measurements, and the
operator and iteration timings others published (Vidur, Splitwise, LLMServingSim).

One reader for all of them, so that each says the same things the same way, in one
line naming the file (and the line and column): a file that is missing, empty, not a
CSV table, has a header and no rows (a fit on nothing would leave a term to the
analytic model without saying so), lacks a column the caller needs, or has a cell that
cannot be what its column holds: text in a number column, or an integer column
(a batch size, a token count, a width) whose cell is not an integer in the range the
quantity can have (``integers``; a batch of 10**12 sequences is refused before
anything is built for it). Number columns (``numbers``) may leave a cell empty where a
row does not measure that operator (Vidur's attention table: decode rows have no
prefill time); what a row needs is checked by its reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from pagesim.columns import integer_column, number_column
from pagesim.errors import DataError
from pagesim.workloads.lengthtable import MAX_TOKENS

#: sequences in one step (the published tables reach 128)
MAX_BATCH = 100_000
#: a model dimension: hidden size, heads, FFN width (the largest published: 53,248)
MAX_WIDTH = 1_000_000
#: GPUs in a tensor-parallel group
MAX_TP = 1024
#: ranges of the integer columns the readers share (name -> (low, high))
TOKENS = (0, MAX_TOKENS)
POSITIVE_TOKENS = (1, MAX_TOKENS)
BATCH = (1, MAX_BATCH)
WIDTH = (1, MAX_WIDTH)
TP = (1, MAX_TP)


def read_table(
    path: str | Path,
    required: Sequence[str],
    what: str = "",
    *,
    integers: Mapping[str, tuple[int, int]] | None = None,
    numbers: Sequence[str] = (),
) -> pd.DataFrame:
    """The CSV table at ``path``, which must have the columns ``required`` and at least
    one row; ``integers`` (column -> (low, high)) come back as int64, ``numbers`` (those
    the file has) as float64, empty cells NaN; ``what`` says what the file should be (it
    follows "file not found")."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found" + (f" ({what})" if what else ""))
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file; expected a CSV table with a header") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a CSV table: {' '.join(str(exc).split())}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]!r}; required: {list(required)}")
    if len(df) == 0:
        raise DataError(f"{path}: no rows after the header; nothing to fit")
    line = lambda i: f"{path}: line {i + 2}"  # noqa: E731 - line 1 is the header
    for column, (low, high) in (integers or {}).items():
        df[column] = integer_column(df[column], column, line, low=low, high=high)
    for column in (c for c in numbers if c in df.columns):
        df[column] = number_column(df[column], column, line, allow_missing=True)
    return df
