"""The Trace: the table of requests a simulation replays.

A trace is columnar: one row per request, in arrival order, with these columns
(:data:`TRACE_COLUMNS`):

==============  ========  ==========================================================
column          dtype     meaning
==============  ========  ==========================================================
request_id      int64     0..N-1 in arrival order; the simulator's request identity
arrival_s       float64   arrival time in seconds from the start of the run
prompt_len      int64     prompt tokens (== sum of the segment lengths)
output_len      int64     tokens each sequence of the request generates (the
                          simulator knows it; allocators that may not know it never
                          read it)
n               int64     parallel samples (>= 1)
beam_width      int64     beam width (1 = no beam search); n > 1 and beam_width > 1
                          together is rejected
segments        object    the prompt's content as a tuple of ``(segment_id,
                          num_tokens)`` pairs
==============  ========  ==========================================================

Optional columns (:data:`OPTIONAL_COLUMNS`), present only where the workload has them:

==============  ========  ==========================================================
user_id         int64     the user (conversation, session) a request belongs to,
                          >= 0: what a router's sticky sessions and a multi-round
                          workload's shared history key on
==============  ========  ==========================================================

Sharing is described by content identity, not flags: a shared system prompt or
few-shot prefix is a segment id that many requests start with; a chat turn's prompt
is the conversation's earlier segments plus the new message. Two requests share a
prefix exactly as far as their segment sequences agree. Segment ids are
non-negative ints, unique per distinct piece of content within one trace.

A Trace is immutable by convention: builders return new traces. ``dropped`` records
requests removed by filters (how many and why) so that nothing is lost silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pagesim.errors import DataError

TRACE_COLUMNS = (
    "request_id",
    "arrival_s",
    "prompt_len",
    "output_len",
    "n",
    "beam_width",
    "segments",
)

#: columns a trace may carry beside :data:`TRACE_COLUMNS` (module docstring)
OPTIONAL_COLUMNS = ("user_id",)

Segments = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Trace:
    """A seeded, replayable table of requests (see the module docstring for columns).

    ``name`` says where it came from; ``dropped`` maps a filter reason (e.g.
    ``"prompt_len > 1024"``) to the number of requests it removed; ``source_note``
    carries provenance.
    """

    table: pd.DataFrame
    name: str = "trace"
    dropped: Mapping[str, int] = field(default_factory=dict)
    source_note: str = ""
    #: How many candidate requests the filters examined (rows of the source table,
    #: or synthetic draws); None when no filter ran. ``dropped`` is out of these.
    num_candidates: int | None = None

    @property
    def dropped_share(self) -> float:
        """The share of the candidates the filters dropped (0 when none were examined)."""
        if not self.num_candidates:
            return 0.0
        return sum(self.dropped.values()) / self.num_candidates

    def __post_init__(self) -> None:
        validate_table(self.table, self.name)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def num_requests(self) -> int:
        return len(self.table)

    @property
    def has_arrivals(self) -> bool:
        """True when arrival times are meaningful (not all zero)."""
        return bool(len(self.table)) and bool((self.table["arrival_s"].to_numpy() > 0).any())

    def describe(self) -> dict[str, float | int | str]:
        """Count, mean / median / p99 of prompt and output lengths, and arrival rate."""
        t = self.table
        out: dict[str, float | int | str] = {"name": self.name, "num_requests": len(t)}
        for col in ("prompt_len", "output_len"):
            v = t[col].to_numpy(dtype=np.float64)
            out[f"{col}_mean"] = float(v.mean()) if len(v) else float("nan")
            out[f"{col}_median"] = float(np.median(v)) if len(v) else float("nan")
            out[f"{col}_p99"] = float(np.percentile(v, 99)) if len(v) else float("nan")
            out[f"{col}_max"] = int(v.max()) if len(v) else 0
        if self.has_arrivals and len(t) > 1:
            span = float(t["arrival_s"].iloc[-1] - t["arrival_s"].iloc[0])
            out["span_s"] = span
            out["rate_req_s"] = (len(t) - 1) / span if span > 0 else float("nan")
        for reason, count in self.dropped.items():
            out[f"dropped[{reason}]"] = int(count)
        return out


def validate_table(table: pd.DataFrame, name: str) -> None:
    """Raise :class:`DataError` unless ``table`` is a well-formed trace table."""
    missing = [c for c in TRACE_COLUMNS if c not in table.columns]
    if missing:
        raise DataError(
            f"trace {name!r}: missing columns {missing}; expected {list(TRACE_COLUMNS)}"
        )
    if len(table) == 0:
        return
    for col in ("prompt_len", "output_len", "n", "beam_width"):
        v = table[col].to_numpy()
        if not np.issubdtype(v.dtype, np.integer):
            raise DataError(f"trace {name!r}: column {col!r} must be integer, got {v.dtype}")
        if (v < 1).any():
            bad = int(np.flatnonzero(v < 1)[0])
            raise DataError(f"trace {name!r}: row {bad}: {col} must be >= 1, got {v[bad]}")
    both = (table["n"].to_numpy() > 1) & (table["beam_width"].to_numpy() > 1)
    if both.any():
        bad = int(np.flatnonzero(both)[0])
        raise DataError(f"trace {name!r}: row {bad}: n > 1 and beam_width > 1 together")
    arr = table["arrival_s"].to_numpy(dtype=np.float64)
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise DataError(f"trace {name!r}: arrival_s must be finite and >= 0")
    if (np.diff(arr) < 0).any():
        raise DataError(f"trace {name!r}: rows must be sorted by arrival_s")
    ids = table["request_id"].to_numpy()
    if not np.array_equal(ids, np.arange(len(table))):
        raise DataError(f"trace {name!r}: request_id must be 0..N-1 in row order")
    if "user_id" in table.columns:
        users = table["user_id"].to_numpy()
        if not np.issubdtype(users.dtype, np.integer):
            raise DataError(f"trace {name!r}: column 'user_id' must be integer, got {users.dtype}")
        if (users < 0).any():
            bad = int(np.flatnonzero(users < 0)[0])
            raise DataError(f"trace {name!r}: row {bad}: user_id must be >= 0, got {users[bad]}")
