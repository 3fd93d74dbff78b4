"""LengthTable: the compact, prepared form of a request dataset, and its file format.

A length table holds one row per candidate request: ``prompt_len`` and
``output_len`` (tokens), optionally ``arrival_s`` (seconds from the first request,
for timestamped production traces) and ``conv_ids`` (the conversation a row
belongs to; rows of one conversation are contiguous and in turn order, which is
what chat workloads need to rebuild each turn's history).

Tables are stored as ``.npz`` files (numpy, compressed, no pickles) next to this
module in ``data/`` and written atomically: a temporary file in the same folder,
then a rename, so an interrupted ``pagesim workload prepare`` never leaves a
half-written table behind.

Token counts are ``int64`` in memory and on disk, and every reader of a raw source
checks them with :func:`token_counts`: an integer from 0 to :data:`MAX_TOKENS` (0 is
a count real data has, e.g. the Alpaca sample's two empty outputs; the workload filters
drop such rows and count them). A count stored in a narrower type would wrap
(4,294,967,396 in int32 is 100) and pass for a valid request.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagesim.columns import integer_column
from pagesim.errors import DataError
from pagesim.files import replaced_atomically

_INT_COLUMNS = ("prompt_len", "output_len", "conv_ids")
#: a token count above this is not a request of any model served today (10 million)
MAX_TOKENS = 10_000_000


def token_counts(cells, column: str, where: Callable[[int], str], what: str | None = None):
    """``cells`` (text or numbers) as int64 token counts from 0 to :data:`MAX_TOKENS`;
    a DataError naming ``where(i)``, the column and the cell otherwise
    (``pagesim.columns.integer_column``; ``what``: how the message states the rule)."""
    return integer_column(
        cells, column, where, low=0, high=MAX_TOKENS, what=what or "a non-negative integer"
    )


@dataclass(frozen=True)
class LengthTable:
    """Token lengths of a dataset's requests (see the module docstring)."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    arrival_s: np.ndarray | None = None
    conv_ids: np.ndarray | None = None
    source_note: str = ""

    def __post_init__(self) -> None:
        n = len(self.prompt_len)
        for name in ("output_len", "arrival_s", "conv_ids"):
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise DataError(f"length table: column {name} has {len(col)} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def is_timestamped(self) -> bool:
        return self.arrival_s is not None


def save_table(table: LengthTable, path: str | Path) -> Path:
    """Write ``table`` to ``path`` (``.npz``) atomically: temp file, then rename."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {
        "prompt_len": np.asarray(table.prompt_len, dtype=np.int64),
        "output_len": np.asarray(table.output_len, dtype=np.int64),
        "source_note": np.array(table.source_note),
    }
    if table.arrival_s is not None:
        arrays["arrival_s"] = np.asarray(table.arrival_s, dtype=np.float64)
    if table.conv_ids is not None:
        arrays["conv_ids"] = np.asarray(table.conv_ids, dtype=np.int64)
    with replaced_atomically(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


def load_table(path: str | Path) -> LengthTable:
    """Read a table written by :func:`save_table`; :class:`DataError` if missing or invalid."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: length table not found")
    try:
        with np.load(path, allow_pickle=False) as npz:
            cols = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable length table ({exc})") from None
    for key in ("prompt_len", "output_len"):
        if key not in cols:
            raise DataError(f"{path}: length table lacks the column {key!r}")
    for key in _INT_COLUMNS:
        if key in cols:
            v = cols[key]
            if not np.issubdtype(v.dtype, np.integer):
                raise DataError(f"{path}: column {key!r} must be integer, got {v.dtype}")
            if (v < 0).any():
                bad = int(np.flatnonzero(v < 0)[0])
                raise DataError(f"{path}: row {bad}: {key} must be >= 0, got {int(v[bad])}")
            if key != "conv_ids" and (v > MAX_TOKENS).any():
                bad = int(np.flatnonzero(v > MAX_TOKENS)[0])
                raise DataError(
                    f"{path}: row {bad}: {key} must be at most {MAX_TOKENS:,}, got {int(v[bad])}"
                )
            cols[key] = v.astype(np.int64)
    note = str(cols["source_note"]) if "source_note" in cols else ""
    return LengthTable(
        prompt_len=cols["prompt_len"],
        output_len=cols["output_len"],
        arrival_s=cols.get("arrival_s"),
        conv_ids=cols.get("conv_ids"),
        source_note=note,
    )
