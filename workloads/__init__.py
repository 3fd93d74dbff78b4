"""pagesim.workloads: request traces in — loaders, token lengths, arrivals, sharing.

Public API: :func:`build_trace` (spec + seed -> Trace), :data:`WORKLOADS` (the
registered names), :func:`load_csv_trace`, the raw loaders (``read_sharegpt``,
``read_alpaca``, ``read_timestamped_csv``) and the contract types.
"""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")


from pagesim.lazy import lazy_exports  # noqa: E402 - after the clone check

#: public names -> the module that defines them (imported when first used, so
#: that `pagesim --help` does not pay for the whole layer)
_LAZY = {
    "read_alpaca": "pagesim.workloads.alpaca",
    "build_trace": "pagesim.workloads.build",
    "load_csv_trace": "pagesim.workloads.csvtrace",
    "read_timestamped_csv": "pagesim.workloads.csvtrace",
    "LengthTable": "pagesim.workloads.lengthtable",
    "load_table": "pagesim.workloads.lengthtable",
    "save_table": "pagesim.workloads.lengthtable",
    "WORKLOADS": "pagesim.workloads.registry",
    "WorkloadSource": "pagesim.workloads.registry",
    "get_source": "pagesim.workloads.registry",
    "read_sharegpt": "pagesim.workloads.sharegpt",
    "ArrivalSpec": "pagesim.workloads.spec",
    "LengthDist": "pagesim.workloads.spec",
    "WorkloadSpec": "pagesim.workloads.spec",
    "TRACE_COLUMNS": "pagesim.workloads.trace",
    "Trace": "pagesim.workloads.trace",
}

__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "TRACE_COLUMNS", "WORKLOADS", "ArrivalSpec", "LengthDist", "LengthTable", "Trace",
    "WorkloadSource", "WorkloadSpec", "build_trace", "get_source", "load_csv_trace",
    "load_table", "read_alpaca", "read_sharegpt", "read_timestamped_csv", "save_table",
]  # fmt: skip
