"""Measured per-request records of a real server: the input of validation and of the
serving path's calibration.

A run's records are one table, whatever the format it was read from (the readers are
the other modules of :mod:`pagesim.records`, one a format), with these columns, times
in seconds on the server's or client's clock, the first arrival at 0:

- ``arrival_s``: when the client issued the request;
- ``prompt_len``, ``output_len``: tokens in and out (the output as generated);
- ``first_token_s``: when its first output token was produced;
- ``finish_s``: when its last output token was produced.

So TTFT = first_token − arrival, TPOT = (finish − first_token) / (output − 1) (NaN for
a one-token output), E2E = finish − arrival: the definitions of ``vllm bench serve``,
DistServe's client and pagesim's request table. :func:`check_records` refuses what
cannot be a record (a missing or non-numeric column, a length that is not a positive
integer below :data:`MAX_TOKENS`, a time that is not finite, a first token before its
arrival, a finish before the first token) with one line naming the file, the row and the
column (as the file names it, where the reader says), before anything is computed from
it.

Optional columns (:data:`OPTIONAL_COLUMNS`), where the format has them: ``user_id``
(the conversation a request belongs to) and ``segments`` (its prompt's content, as a
:class:`~pagesim.workloads.trace.Trace` describes it), which :meth:`MeasuredRun.trace`
passes on; and ``failed``.

**Failed requests: one rule for every reader.** A request that failed after it was sent
(timed out, or the server answered with an error) still loaded the server: it stays in
the table and in the replayed trace (its arrival, its prompt and the output tokens it
got, or the reader's stated assumption where the file does not say), with ``failed``
True and no first-token or finish time (NaN: what a file has there is not a
measurement). :meth:`MeasuredRun.latencies` gives NaN for it, so no statistic includes
it (``vcsv.statistic`` and :meth:`MeasuredRun.served_latencies` drop it);
``meta["num_failed"]`` counts them and a validation page says how many. A request the
file shows was never sent is not in the table (the reader counts it in ``meta``). A
format that cannot say whether a failed request reached the server (``vllm bench
serve``'s JSON) keeps refusing it; one whose client drops failures without a trace
(LMBench) says so in ``meta``. Fits that need every request's times (the serving path,
the token-time step ends) call :meth:`MeasuredRun.require_served`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.workloads.lengthtable import MAX_TOKENS

RECORD_COLUMNS = ("arrival_s", "prompt_len", "output_len", "first_token_s", "finish_s")
#: columns a run's table may carry beside :data:`RECORD_COLUMNS` (module docstring)
OPTIONAL_COLUMNS = ("failed", "user_id", "segments")
TIME_COLUMNS = ("first_token_s", "finish_s")


@dataclass(frozen=True)
class MeasuredRun:
    """One real run's per-request records (module docstring) and where they come from."""

    name: str
    dataset: str
    table: pd.DataFrame
    #: the offered request rate (req/s) as the run's name or file states it
    rate_req_s: float
    #: the file(s) read, as given, with their sha256
    sources: tuple[tuple[str, str], ...] = ()
    #: what the file says of the server and the run (model, engine arguments, ...)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        return len(self.table)

    @property
    def served(self) -> np.ndarray:
        """Per row: True unless the request failed (module docstring)."""
        if "failed" not in self.table.columns:
            return np.ones(len(self.table), dtype=bool)
        return ~self.table["failed"].to_numpy(dtype=bool)

    @property
    def num_failed(self) -> int:
        return int((~self.served).sum())

    def require_served(self, purpose: str) -> None:
        """A DataError unless every request was served: ``purpose`` needs their times."""
        if self.num_failed:
            raise DataError(
                f"run {self.name}: {self.num_failed} of {self.num_requests} requests failed "
                f"and have no measured times; {purpose} needs every request's times"
            )

    def latencies(self) -> pd.DataFrame:
        """Per row of the table: ``ttft_s``, ``tpot_s`` (NaN for a one-token output),
        ``e2e_s``; all three NaN for a failed request (module docstring)."""
        t = self.table
        served = self.served
        out = t["output_len"].to_numpy()
        first = np.where(served, t["first_token_s"].to_numpy(dtype=float), np.nan)
        finish = np.where(served, t["finish_s"].to_numpy(dtype=float), np.nan)
        arrival = t["arrival_s"].to_numpy(dtype=float)
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
        return pd.DataFrame({"ttft_s": first - arrival, "tpot_s": tpot, "e2e_s": finish - arrival})

    def served_latencies(self) -> pd.DataFrame:
        """:meth:`latencies` of the served requests only (rows keep the table's index)."""
        return self.latencies()[self.served]

    def trace(self):
        """The run's exact requests as a pagesim Trace (arrivals from the first at 0),
        failed ones included (module docstring), with the prompts' ``segments`` and the
        ``user_id`` column where the run has them."""
        from pagesim.workloads.assemble import assemble_trace

        t = self.table
        return assemble_trace(
            prompt_len=t["prompt_len"].to_numpy(dtype=np.int64),
            output_len=t["output_len"].to_numpy(dtype=np.int64),
            arrival_s=t["arrival_s"].to_numpy(dtype=float),
            segments=t["segments"].tolist() if "segments" in t.columns else None,
            user_id=t["user_id"].to_numpy(dtype=np.int64) if "user_id" in t.columns else None,
            name=self.name,
            source_note=f"{self.dataset} run {self.name} (measured records)",
        )


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _shown(value: Any) -> str:
    """A value as the file has it (numpy scalars as plain numbers)."""
    item = getattr(value, "item", None)
    return repr(item() if callable(item) else value)


def _floats(cells: pd.Series) -> np.ndarray:
    """The cells as float64; text parsed, a bool (JSON ``true``) or anything else NaN."""
    if cells.dtype.kind == "b":
        return np.full(len(cells), np.nan)
    if cells.dtype.kind in "iuf":
        return cells.to_numpy(dtype=float)
    plain = cells.where(~cells.map(lambda c: isinstance(c, bool | np.bool_)))
    return pd.to_numeric(plain, errors="coerce").to_numpy(dtype=float)


def _failed(df: pd.DataFrame, source: str) -> np.ndarray:
    if "failed" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    failed = df["failed"]
    if failed.dtype.kind != "b":
        raise DataError(f"{source}: the 'failed' column must be boolean, got {failed.dtype}")
    return failed.to_numpy(dtype=bool)


def _extra_columns(df: pd.DataFrame, table: pd.DataFrame, source: str, rows: np.ndarray) -> None:
    """Copy ``user_id`` and ``segments`` into ``table``, checked."""
    if "user_id" in df.columns:
        users = _floats(df["user_id"])
        bad = np.flatnonzero(~np.isfinite(users) | (users < 0) | (users != np.round(users)))
        if len(bad):
            i = bad[0]
            raise DataError(
                f"{source}: row {rows[i]}, user_id {_shown(df['user_id'].iloc[i])} is not an "
                "integer >= 0"
            )
        table["user_id"] = users.astype(np.int64)
    if "segments" in df.columns:
        segments = df["segments"].tolist()
        for i, (segs, length) in enumerate(zip(segments, table["prompt_len"], strict=True)):
            if sum(n for _, n in segs) != length:
                raise DataError(
                    f"{source}: row {rows[i]}: its segments cover {sum(n for _, n in segs)} "
                    f"tokens, its prompt has {length}"
                )
        column = np.empty(len(segments), dtype=object)
        column[:] = segments
        table["segments"] = column


def check_records(
    df: pd.DataFrame,
    source: str,
    *,
    rows: np.ndarray | None = None,
    fields: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The canonical table from ``df`` (its RECORD_COLUMNS and any OPTIONAL_COLUMNS),
    checked (module docstring), sorted by arrival (stable), arrivals from 0. ``rows``:
    each row's number in the file (for messages; default 1, 2, ...); ``fields``: the
    file's name of a column, where it differs (for messages). A ``failed`` row's times
    are not checked and become NaN."""
    if len(df) == 0:
        raise DataError(f"{source}: no records")
    rows = np.arange(1, len(df) + 1) if rows is None else np.asarray(rows)
    fields = dict(fields or {})

    def name(col: str) -> str:
        return fields.get(col, col)

    failed = _failed(df, source)
    out: dict[str, np.ndarray] = {}
    for col in RECORD_COLUMNS:
        if col not in df.columns:
            raise DataError(f"{source}: missing column {name(col)!r}")
        values = _floats(df[col])
        checked = ~failed if col in TIME_COLUMNS else np.ones(len(df), dtype=bool)
        bad = np.flatnonzero(~np.isfinite(values) & checked)
        if len(bad):
            i = bad[0]
            raise DataError(
                f"{source}: row {rows[i]}, column {name(col)!r}: {_shown(df[col].iloc[i])} is "
                "not a finite number"
            )
        if col in ("prompt_len", "output_len"):
            bad = np.flatnonzero(
                (values < 1) | (values > MAX_TOKENS) | (values != np.round(values))
            )
            if len(bad):
                i = bad[0]
                raise DataError(
                    f"{source}: row {rows[i]}, column {name(col)!r}: {_shown(df[col].iloc[i])} "
                    f"is not a token count (an integer from 1 to {MAX_TOKENS:,})"
                )
            out[col] = values.astype(np.int64)
        else:
            out[col] = np.where(checked, values, np.nan)
    for early, late in (("arrival_s", "first_token_s"), ("first_token_s", "finish_s")):
        bad = np.flatnonzero(out[late] < out[early])
        if len(bad):
            i = bad[0]
            raise DataError(
                f"{source}: row {rows[i]}, column {name(late)!r}: {_shown(out[late][i])} is "
                f"before its {name(early)} {_shown(out[early][i])}"
            )
    table = pd.DataFrame(out)
    if "failed" in df.columns:
        table["failed"] = failed
    _extra_columns(df, table, source, rows)
    order = np.argsort(table["arrival_s"].to_numpy(), kind="stable")
    table = table.iloc[order].reset_index(drop=True)
    start = table["arrival_s"].iloc[0]
    for col in ("arrival_s", *TIME_COLUMNS):
        table[col] = table[col] - start
    return table
