"""Timestamped CSV traces: the two layouts of the Azure LLM inference trace 2023.

- processed layout: ``arrived_at,num_prefill_tokens,num_decode_tokens`` with
  ``arrived_at`` in seconds from the start of the trace;
- original release: ``TIMESTAMP,ContextTokens,GeneratedTokens`` with ``TIMESTAMP``
  a wall-clock datetime (e.g. ``2023-11-16 18:15:46.6805900``), converted here to
  seconds from the first request.

Rows are kept in file order after a stable sort by time, and arrival times are
shifted so that the first request arrives at 0. A missing file, an empty one or one
with a header only, an unknown layout, a malformed row, or a token count that is text,
negative, not an integer or above ``lengthtable.MAX_TOKENS`` is a :class:`DataError`
naming the file, the line (line 1 is the header) and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.workloads.lengthtable import LengthTable, token_counts
from pagesim.workloads.trace import Trace

LAYOUTS = {
    "azure-2023-processed": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    "azure-2023-original": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
}


def _read_frame(path: Path, *, as_text: bool) -> pd.DataFrame:
    """The file's cells, as text (``as_text``) or with the types read_csv infers."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        if as_text:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
        else:
            # low_memory=False: types from the whole column (no mixed-type chunk warning)
            frame = pd.read_csv(path, skipinitialspace=True, low_memory=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file; expected a CSV header") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed CSV: {str(exc).strip()}") from None
    frame.columns = [c.strip() for c in frame.columns]
    return frame


def _layout_of(path: Path, frame: pd.DataFrame) -> str:
    cols = [c.strip() for c in frame.columns]
    for name, expected in LAYOUTS.items():
        if all(c in cols for c in expected):
            return name
    layouts = "; ".join(",".join(cols) for cols in LAYOUTS.values())
    raise DataError(
        f"{path}: line 1: unknown CSV header {','.join(cols)!r}; expected one of: {layouts}"
    )


def _int_column(path: Path, frame: pd.DataFrame, col: str) -> np.ndarray:
    return token_counts(frame[col], col, lambda row: f"{path}: line {row + 2}")


def _times_s(path: Path, frame: pd.DataFrame, col: str, layout: str) -> np.ndarray:
    raw = frame[col]
    if layout == "azure-2023-original":
        stamps = pd.to_datetime(raw, errors="coerce", format="ISO8601")
        bad = stamps.isna().to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(f"{path}: line {row + 2}: {col} is not a datetime: {raw.iloc[row]!r}")
        ns = stamps.to_numpy().astype("datetime64[ns]").astype(np.int64)
        return (ns - ns.min()) / 1e9
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{path}: line {row + 2}: {col} must be seconds >= 0, got {raw.iloc[row]!r}"
        )
    return values - values.min()


def read_timestamped_csv(path: str | Path) -> LengthTable:
    """Read either Azure layout into a timestamped :class:`LengthTable` sorted by arrival.

    The processed layout's numbers are taken as read_csv parses them (the converter
    ``pd.to_numeric`` uses on text); a file whose columns are not all numbers, or
    whose numbers fail a check, is read again as text, which names the bad cell."""
    path = Path(path)
    frame = _read_frame(path, as_text=False)
    layout = _layout_of(path, frame)
    if len(frame) == 0:
        raise DataError(f"{path}: no rows after the header")
    if all(frame[col].dtype.kind in "iuf" for col in LAYOUTS[layout]):
        try:
            return _length_table(path, frame, layout)
        except DataError:
            pass
    return _length_table(path, _read_frame(path, as_text=True), layout)


def _length_table(path: Path, frame: pd.DataFrame, layout: str) -> LengthTable:
    t_col, p_col, o_col = LAYOUTS[layout]
    arrival_s = _times_s(path, frame, t_col, layout)
    prompt_len = _int_column(path, frame, p_col)
    output_len = _int_column(path, frame, o_col)
    order = np.argsort(arrival_s, kind="stable")
    return LengthTable(
        prompt_len=prompt_len[order],
        output_len=output_len[order],
        arrival_s=arrival_s[order],
        source_note=f"{path.name} ({layout} layout, {len(frame)} rows)",
    )


def load_csv_trace(path: str | Path) -> Trace:
    """A timestamped CSV as a Trace, unfiltered, at its own timestamps (one segment per prompt).

    Rows with a zero-length prompt or output cannot be a trace row (lengths must be
    >= 1): they are a :class:`DataError` here; ``build_trace`` with
    ``name: csv`` filters them instead, and reports the count.
    """
    table = read_timestamped_csv(path)
    from pagesim.workloads.assemble import assemble_trace

    return assemble_trace(
        prompt_len=table.prompt_len,
        output_len=table.output_len,
        arrival_s=table.arrival_s,
        name=Path(path).name,
        source_note=table.source_note,
    )
