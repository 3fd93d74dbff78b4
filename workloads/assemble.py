"""Assemble columns into a :class:`Trace`, building the segments column cheaply.

Segment ids: a shared prefix (``shared_prefix_len`` > 0) is segment 0, the common
first segment of every prompt; each request's own content is segment ``1 + row``
(unique per request: two requests never share their own content, even when the
sampler drew the same dataset row twice). Chat workloads pass their own segments
(see ``chat.py``). The per-row tuples are built with one list comprehension over
plain Python ints, which is the cheapest way to fill an object column (about a
second per million rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from pagesim.workloads.trace import Segments, Trace

SHARED_PREFIX_SEGMENT_ID = 0


def own_segments(own_len: np.ndarray, shared_prefix_len: int) -> list[Segments]:
    """Segments for requests that share nothing but an optional common prefix."""
    ids = range(1, len(own_len) + 1)
    lens = own_len.tolist()
    if shared_prefix_len > 0:
        prefix = (SHARED_PREFIX_SEGMENT_ID, int(shared_prefix_len))
        return [(prefix, (i, n)) for i, n in zip(ids, lens, strict=True)]
    return [((i, n),) for i, n in zip(ids, lens, strict=True)]


def assemble_trace(
    *,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    arrival_s: np.ndarray | None,
    segments: Sequence[Segments] | None = None,
    n: int = 1,
    beam_width: int = 1,
    shared_prefix_len: int = 0,
    name: str = "trace",
    source_note: str = "",
    dropped: Mapping[str, int] | None = None,
    num_candidates: int | None = None,
    user_id: np.ndarray | None = None,
) -> Trace:
    """A validated Trace; ``prompt_len`` here excludes the shared prefix, which is prepended.
    ``user_id``: each request's user, where the workload has users (the optional column)."""
    num = len(prompt_len)
    own = np.asarray(prompt_len, dtype=np.int64)
    if segments is None:
        segments = own_segments(own, shared_prefix_len)
    seg_col = np.empty(num, dtype=object)
    seg_col[:] = segments
    arrivals = np.zeros(num) if arrival_s is None else np.asarray(arrival_s, dtype=np.float64)
    table = pd.DataFrame(
        {
            "request_id": np.arange(num, dtype=np.int64),
            "arrival_s": arrivals,
            "prompt_len": own + int(shared_prefix_len),
            "output_len": np.asarray(output_len, dtype=np.int64),
            "n": np.full(num, n, dtype=np.int64),
            "beam_width": np.full(num, beam_width, dtype=np.int64),
            "segments": seg_col,
        }
    )
    if user_id is not None:
        table["user_id"] = np.asarray(user_id, dtype=np.int64)
    return Trace(
        table=table,
        name=name,
        dropped=dict(dropped or {}),
        source_note=source_note,
        num_candidates=num_candidates,
    )
