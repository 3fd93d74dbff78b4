"""pagesim.workloads: request traces in — loaders, token lengths, arrivals, sharing.

Public API: :func:`build_trace` (spec + seed -> Trace), :data:`WORKLOADS` (the
registered names), :func:`load_csv_trace`, the raw loaders (``read_sharegpt``,
``read_alpaca``, ``read_timestamped_csv``) and the contract types.
"""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")


from pagesim.workloads.alpaca import read_alpaca
from pagesim.workloads.build import build_trace
from pagesim.workloads.csvtrace import load_csv_trace, read_timestamped_csv
from pagesim.workloads.lengthtable import LengthTable, load_table, save_table
from pagesim.workloads.registry import WORKLOADS, WorkloadSource, get_source
from pagesim.workloads.sharegpt import read_sharegpt
from pagesim.workloads.spec import ArrivalSpec, LengthDist, WorkloadSpec
from pagesim.workloads.trace import TRACE_COLUMNS, Trace

__all__ = [
    "TRACE_COLUMNS", "WORKLOADS", "ArrivalSpec", "LengthDist", "LengthTable", "Trace",
    "WorkloadSource", "WorkloadSpec", "build_trace", "get_source", "load_csv_trace",
    "load_table", "read_alpaca", "read_sharegpt", "read_timestamped_csv", "save_table",
]  # fmt: skip
