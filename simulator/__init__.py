"""pagesim.simulator: the SimPy engine, schedulers, metrics, cost model and specs.

Public API: :func:`simulate` (RunSpec -> RunResult) and :data:`SCHEDULERS`.
"""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")


from pagesim.lazy import lazy_exports  # noqa: E402 - after the clone check

#: public names -> the module that defines them (imported when first used, so
#: that `pagesim --help` does not pay for the whole layer)
_LAZY = {
    "METRIC_COLUMNS": "pagesim.simulator.result",
    "REQUEST_COLUMNS": "pagesim.simulator.result",
    "RunResult": "pagesim.simulator.result",
    "simulate": "pagesim.simulator.run",
    "SCHEDULERS": "pagesim.simulator.schedulers",
    "RunSpec": "pagesim.simulator.spec",
}

__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = ["METRIC_COLUMNS", "REQUEST_COLUMNS", "SCHEDULERS", "RunResult", "RunSpec", "simulate"]
