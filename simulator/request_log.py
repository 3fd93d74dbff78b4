"""RequestLog: what the run decided for each request that ended, as typed columns.

The engine hands every group that ends (finished, rejected, unfinished) to
:meth:`RequestLog.add`; :meth:`RequestLog.frame` then builds the per-request table
(``REQUEST_COLUMNS``; the latency formulas are in ``simulator.summary``). Compiled with
the engine's modules (``pagesim/_native.py``): ``add`` runs once per request.
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import pandas as pd

from pagesim.errors import InvariantError
from pagesim.simulator.request import FINISHED, SequenceGroup
from pagesim.simulator.result import REQUEST_COLUMNS

_NAN = math.nan
#: the per-request columns that are the trace's own (the rest are the run's outcome)
_TRACE_COLUMNS = ("request_id", "arrival_s", "prompt_len", "output_len", "n", "beam_width")


class RequestLog:
    """What the run decided for each request that ended, kept as typed columns until
    :meth:`frame` builds the per-request table (REQUEST_COLUMNS).

    Columns rather than a tuple per row because a run can end a million requests: a
    row tuple cost ~420 bytes (the tuple, six float objects, and the group's ints it
    kept alive) where a typed column costs 8 bytes a value. Only the outcome is kept
    (status, reason, first token and finish times, preemptions, cached tokens); the
    request's own columns are the trace's, and the latencies are derived by numpy with
    the same IEEE operations as the formulas in ``simulator.summary``'s docstring, so
    the table is the same value for value.
    """

    def __init__(self) -> None:
        self._group_ids = array("q")
        self._statuses: list[str] = []
        self._reasons: list[str] = []
        self._first_token_s = array("d")
        self._finish_s = array("d")
        self._num_preemptions = array("q")
        self._num_cached_tokens = array("q")

    def __len__(self) -> int:
        return len(self._group_ids)

    def add(self, group: SequenceGroup) -> None:
        """Record an ended group (the group object can then be dropped)."""
        self._group_ids.append(group.group_id)
        status = group.status
        self._statuses.append(status)
        self._reasons.append(group.reason)
        if status == FINISHED:
            self._first_token_s.append(group.first_token_s)
            self._finish_s.append(group.finish_s)
        else:
            self._first_token_s.append(_NAN)
            self._finish_s.append(_NAN)
        self._num_preemptions.append(group.num_preemptions)
        self._num_cached_tokens.append(group.num_cached_tokens)

    def frame(self, trace_table: pd.DataFrame) -> pd.DataFrame:
        """The REQUEST_COLUMNS table in request_id order; every trace row must have
        ended exactly once (a request is reported, never lost)."""
        num = len(trace_table)
        if num == 0 and not len(self):
            # what pandas makes of no records: object columns, as before
            return pd.DataFrame.from_records([], columns=list(REQUEST_COLUMNS))
        group_ids = np.asarray(self._group_ids)
        counts = np.bincount(group_ids, minlength=num) if len(group_ids) else np.zeros(num)
        if len(counts) != num or not (counts == 1).all():
            raise InvariantError(
                f"{num} requests in the trace, {len(group_ids)} ended: "
                f"{int((counts[:num] == 0).sum())} never ended, "
                f"{int((counts > 1).sum())} ended more than once, "
                f"{max(len(counts) - num, 0)} ids beyond the trace"
            )

        def by_request(values) -> np.ndarray:
            values = np.asarray(values)
            out = np.empty(num, dtype=values.dtype)
            out[group_ids] = values
            return out

        columns = {name: _records_like(trace_table[name].to_numpy()) for name in _TRACE_COLUMNS}
        columns["status"] = by_request(np.array(self._statuses, dtype=object))
        columns["reason"] = by_request(np.array(self._reasons, dtype=object))
        first = columns["first_token_s"] = by_request(self._first_token_s)
        finish = columns["finish_s"] = by_request(self._finish_s)
        arrival, output_len = columns["arrival_s"], columns["output_len"]
        tpot = np.full(num, _NAN)
        np.divide(finish - first, output_len - 1, out=tpot, where=output_len > 1)
        columns["ttft_s"] = first - arrival
        columns["tpot_s"] = tpot
        e2e = columns["e2e_s"] = finish - arrival
        columns["normalized_latency_s_per_tok"] = e2e / output_len
        columns["num_preemptions"] = by_request(self._num_preemptions)
        columns["num_cached_tokens"] = by_request(self._num_cached_tokens)
        assert tuple(columns) == REQUEST_COLUMNS, "request columns drifted from REQUEST_COLUMNS"
        return pd.DataFrame(columns, copy=False)


def _records_like(values: np.ndarray) -> np.ndarray:
    """A trace column as pandas infers it from the column's Python values (ints as
    int64, floats as float64), always a copy (the table must not share the trace's)."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        return values.astype(np.float64)
    return pd.Series(values.tolist()).to_numpy()
