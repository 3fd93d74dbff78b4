"""Reading files others wrote, safely: text, gzip, CSV headers, JSON, and the bounds a
measured quantity can have.

Every reader of :mod:`pagesim.records` opens its files through these, so that a file
that is not what it should be is one :class:`~pagesim.errors.DataError` line naming it,
never a traceback:

- :func:`read_bytes`: the file's bytes, un-gzipped where it starts with gzip's magic
  bytes (a truncated or corrupt gzip is an error), at most :data:`MAX_TEXT_BYTES`.
- :func:`read_text`: those bytes as UTF-8 text (a UTF-8 byte-order mark is dropped). A
  UTF-16 file (what Windows PowerShell's ``>`` writes: a byte-order mark ``FF FE``, or
  every other byte zero), a binary file (a zero byte in its first
  :data:`SNIFF_BYTES`), an empty file and bytes that are not UTF-8 are each refused
  saying which, and how to fix it.
- :func:`csv_cells`: a CSV's header checked (no repeated column name: pandas would
  rename the second ``a`` to ``a.1`` silently) and its cells as text, for the
  column checks of :mod:`pagesim.columns` to turn into numbers cell by cell. Rows are
  numbered as a spreadsheet shows them: the header is row 1, the first record row 2.
- :func:`load_json`: a JSON document; nesting deep enough to exhaust Python's stack
  (json's ``RecursionError``) is refused, and, where asked, the non-standard
  ``NaN``/``Infinity``.

Bounds, each with the reason it is where it is:

- :data:`MAX_CLOCK_S`: a time read from a clock (an epoch, a monotonic or a perf
  counter) is at most 1e10 s in magnitude. The Unix clock reads 1.7e9 s today and
  reaches 1e10 s in the year 2286; monotonic and performance counters count from boot
  or process start, far less. A larger value (1e300, or microseconds taken for
  seconds past 2286) is not a clock reading, and subtracting two such values would
  leave nothing of a millisecond.
- :data:`MAX_RATE_REQ_S`: a request rate is above 0 and at most a million requests a
  second: the fastest vLLM servers and the fleets pagesim models serve thousands of
  requests a second at most; a larger rate is a unit or typing error.
- Token counts: :data:`pagesim.workloads.lengthtable.MAX_TOKENS` (10 million).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import number_column, shown
from pagesim.errors import DataError

#: the most bytes a text file (or its gzip's content) may hold: about a thousand times
#: the largest per-request file of the shipped datasets' sources (a few MB), and where
#: Python's parsers would need tens of GiB of memory
MAX_TEXT_BYTES = 1 << 30
#: how much of a file is looked at for zero bytes (binary or UTF-16)
SNIFF_BYTES = 8192
#: a clock reading's largest magnitude, in seconds (module docstring)
MAX_CLOCK_S = 1e10
#: the highest request rate a run may state, req/s (module docstring)
MAX_RATE_REQ_S = 1e6
GZIP_MAGIC = b"\x1f\x8b"


def _bounded_read(stream, path: Path, what: str) -> bytes:
    data = stream.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise DataError(
            f"{path}: more than {MAX_TEXT_BYTES >> 20} MiB of {what}: not a run's records "
            "(split it, or check it is the right file)"
        )
    return data


def read_bytes(path: str | Path, what: str = "records") -> bytes:
    """The file's bytes, un-gzipped when it is a gzip (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found ({what})")
    try:
        with path.open("rb") as f:
            head = f.read(2)
            f.seek(0)
            if head != GZIP_MAGIC:
                return _bounded_read(f, path, what)
            with gzip.GzipFile(fileobj=f) as z:
                return _bounded_read(z, path, what)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(
            f"{path}: a truncated or corrupt gzip file ({' '.join(str(exc).split()) or 'ends early'})"
        ) from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None


def first_line(path: str | Path, limit: int = 1 << 16) -> str:
    """The file's first line (gzip or not), from at most ``limit`` bytes; "" for a file
    that cannot be read as text (for the formats' cheap ``recognises``)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.read(2)
            f.seek(0)
            data = gzip.GzipFile(fileobj=f).read(limit) if head == GZIP_MAGIC else f.read(limit)
        return data.decode("utf-8-sig").split("\n", 1)[0].rstrip("\r")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return ""


def text_of(data: bytes, path: str | Path, what: str = "records") -> str:
    """``data`` (the bytes of ``path``) as UTF-8 text, or a DataError saying what it is."""
    if not data.strip():
        raise DataError(f"{path}: empty file (expected {what})")
    head = data[:SNIFF_BYTES]
    utf16 = head.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(head) >= 4 and head.count(b"\x00") * 3 >= len(head) and b"\x00" in head[:2]
    )
    if utf16:
        raise DataError(
            f"{path}: UTF-16 text (what Windows PowerShell's `>` writes), not UTF-8; save it "
            "as UTF-8 (PowerShell: `| Out-File -Encoding utf8`)"
        )
    if b"\x00" in head:
        raise DataError(f"{path}: a binary file (zero bytes in it), not {what} as text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); "
            "save it as UTF-8"
        ) from None


def read_text(path: str | Path, what: str = "records") -> str:
    """The file (gzip or not) as UTF-8 text (module docstring)."""
    return text_of(read_bytes(path, what), path, what)


def csv_header(text: str, path: str | Path) -> list[str]:
    """The CSV's column names (row 1), stripped; a repeated name is an error."""
    first = text.split("\n", 1)[0].rstrip("\r")
    try:
        names = next(csv.reader([first]))
    except (csv.Error, StopIteration) as exc:
        raise DataError(f"{path}: row 1: not a CSV header ({exc})") from None
    names = [n.strip() for n in names]
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise DataError(
                f"{path}: row 1: column {name!r} appears twice (columns {seen[name]} and {i}); "
                "each column must be named once"
            )
        seen[name] = i
    return names


def csv_cells(
    text: str, path: str | Path, required: tuple[str, ...], what: str = "records"
) -> pd.DataFrame:
    """The CSV's cells as text (no inference, empty cells as ``""``), columns stripped,
    after :func:`csv_header`'s check and a check that every ``required`` column is
    there. A row with more cells than the header is an error naming its row."""
    names = csv_header(text, path)
    missing = [c for c in required if c not in names]
    if missing:
        raise DataError(
            f"{path}: row 1: no column {missing[0]!r}; {what} need the columns {list(required)}"
        )
    try:
        frame = pd.read_csv(
            io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file (expected {what})") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: malformed CSV: {' '.join(str(exc).split())}") from None
    if len(frame.columns) != len(names):
        raise DataError(
            f"{path}: row 1: a header pandas reads as {len(frame.columns)} columns, not {len(names)}"
        )
    frame.columns = names
    if frame.index.nlevels > 1 or not isinstance(frame.index, pd.RangeIndex):
        raise DataError(f"{path}: rows with more cells than the header has columns")
    if len(frame) == 0:
        raise DataError(f"{path}: a header and no records (expected {what})")
    return frame


def clock_column(
    cells: pd.Series, column: str, where: Callable[[int], str], *, per_s: float = 1.0
) -> np.ndarray:
    """A column of clock readings in units of ``1 / per_s`` s (``per_s`` 1e6: microseconds),
    as seconds: each cell a finite number of at most :data:`MAX_CLOCK_S` in magnitude."""
    values = number_column(cells, column, where)
    bad = np.abs(values) > MAX_CLOCK_S * per_s
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{where(i)}: {column} must be a clock reading of at most {MAX_CLOCK_S:.0e} s "
            f"in magnitude, got {shown(cells.iloc[i])}"
        )
    return values / per_s


def duration_column(
    cells: pd.Series, column: str, where: Callable[[int], str], *, per_s: float = 1.0
) -> np.ndarray:
    """A column of durations in units of ``1 / per_s`` s, as seconds: each cell a finite
    number from 0 to :data:`MAX_CLOCK_S`."""
    values = number_column(cells, column, where)
    bad = (values < 0) | (values > MAX_CLOCK_S * per_s)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{where(i)}: {column} must be a duration from 0 to {MAX_CLOCK_S:.0e} s, "
            f"got {shown(cells.iloc[i])}"
        )
    return values / per_s


def row_of(path: str | Path) -> Callable[[int], str]:
    """``where(i)`` for :mod:`pagesim.columns`: record ``i`` (0-based) as its spreadsheet row."""
    return lambda i: f"{path}: row {i + 2}"


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def load_json(
    text: str, path: str | Path, what: str = "a JSON document", *, constants: bool = True
) -> Any:
    """``text`` parsed as JSON; malformed, too deeply nested, or (``constants`` False) with
    ``NaN``/``Infinity`` (Python's json writes them; the cells that matter are checked
    finite by the reader): a one-line DataError."""
    try:
        if constants:
            return json.loads(text)
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to be {what}") from None
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None


def check_rate(rate: Any, source: str) -> float:
    """A stated request rate: a number above 0 and at most :data:`MAX_RATE_REQ_S`;
    ``source`` names it (``"result.json: request_rate"``)."""
    ok = isinstance(rate, int | float) and not isinstance(rate, bool)
    if not ok or not 0 < float(rate) <= MAX_RATE_REQ_S:
        raise DataError(
            f"{source} {rate!r} must be a number above 0 and at most {MAX_RATE_REQ_S:,.0f} req/s"
        )
    return float(rate)
