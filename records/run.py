"""Measured per-request records of a real server: the input of validation and of the
serving path's calibration.

A run's records are one table, whatever the format it was read from (the readers are in
:mod:`.record_readers`), with these columns, times in seconds on the server's or client's
clock, the first arrival at 0:

- ``arrival_s``: when the client issued the request;
- ``prompt_len``, ``output_len``: tokens in and out (the output as generated);
- ``first_token_s``: when its first output token was produced;
- ``finish_s``: when its last output token was produced.

So TTFT = first_token − arrival, TPOT = (finish − first_token) / (output − 1) (0 for a
one-token output), E2E = finish − arrival: the definitions of ``vllm bench serve``,
DistServe's client and pagesim's request table. :func:`check_records` refuses what
cannot be a record (a missing or non-numeric column, a length that is not a positive
integer below :data:`MAX_TOKENS`, a time that is not finite, a first token before its
arrival, a finish before the first token) with one line naming the file, the row and the
column, before anything is computed from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.workloads.lengthtable import MAX_TOKENS

RECORD_COLUMNS = ("arrival_s", "prompt_len", "output_len", "first_token_s", "finish_s")


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

    def latencies(self) -> pd.DataFrame:
        """Per request: ``ttft_s``, ``tpot_s`` (NaN for a one-token output), ``e2e_s``."""
        t = self.table
        out = t["output_len"].to_numpy()
        decode = (t["finish_s"] - t["first_token_s"]).to_numpy()
        tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), np.nan)
        return pd.DataFrame(
            {
                "ttft_s": (t["first_token_s"] - t["arrival_s"]).to_numpy(),
                "tpot_s": tpot,
                "e2e_s": (t["finish_s"] - t["arrival_s"]).to_numpy(),
            }
        )

    def trace(self):
        """The run's exact requests as a pagesim Trace (arrivals from the first at 0)."""
        from pagesim.workloads.assemble import assemble_trace

        t = self.table
        return assemble_trace(
            prompt_len=t["prompt_len"].to_numpy(dtype=np.int64),
            output_len=t["output_len"].to_numpy(dtype=np.int64),
            arrival_s=t["arrival_s"].to_numpy(dtype=float),
            name=self.name,
            source_note=f"{self.dataset} run {self.name} (measured records)",
        )


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shown(value: Any) -> str:
    """A value as the file has it (numpy scalars as plain numbers)."""
    item = getattr(value, "item", None)
    return repr(item() if callable(item) else value)


def check_records(df: pd.DataFrame, source: str, *, rows: np.ndarray | None = None) -> pd.DataFrame:
    """The canonical table from ``df`` (its RECORD_COLUMNS), checked (module docstring),
    sorted by arrival (stable), arrivals from 0. ``rows``: each row's number in the file
    (for messages; default 1, 2, ...)."""
    if len(df) == 0:
        raise DataError(f"{source}: no records")
    rows = np.arange(1, len(df) + 1) if rows is None else np.asarray(rows)
    out: dict[str, np.ndarray] = {}
    for col in RECORD_COLUMNS:
        if col not in df.columns:
            raise DataError(f"{source}: missing column {col!r}")
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            i = bad[0]
            raise DataError(
                f"{source}: row {rows[i]}, column {col!r}: {_shown(df[col].iloc[i])} is not a finite number"
            )
        if col in ("prompt_len", "output_len"):
            bad = np.flatnonzero(
                (values < 1) | (values > MAX_TOKENS) | (values != np.round(values))
            )
            if len(bad):
                i = bad[0]
                raise DataError(
                    f"{source}: row {rows[i]}, column {col!r}: {_shown(df[col].iloc[i])} is not a "
                    f"token count (an integer from 1 to {MAX_TOKENS:,})"
                )
            out[col] = values.astype(np.int64)
        else:
            out[col] = values
    for early, late in (("arrival_s", "first_token_s"), ("first_token_s", "finish_s")):
        bad = np.flatnonzero(out[late] < out[early])
        if len(bad):
            i = bad[0]
            raise DataError(
                f"{source}: row {rows[i]}, column {late!r}: {_shown(out[late][i])} is before its "
                f"{early} {_shown(out[early][i])}"
            )
    table = pd.DataFrame(out)
    order = np.argsort(table["arrival_s"].to_numpy(), kind="stable")
    table = table.iloc[order].reset_index(drop=True)
    start = table["arrival_s"].iloc[0]
    for col in ("arrival_s", "first_token_s", "finish_s"):
        table[col] = table[col] - start
    return table
