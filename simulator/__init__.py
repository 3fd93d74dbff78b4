"""pagesim.simulator: the SimPy engine, schedulers, metrics, cost model and specs.

Public API: :func:`simulate` (RunSpec -> RunResult) and :data:`SCHEDULERS`.
"""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")


from pagesim.simulator.result import METRIC_COLUMNS, REQUEST_COLUMNS, RunResult
from pagesim.simulator.run import simulate
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import RunSpec

__all__ = ["METRIC_COLUMNS", "REQUEST_COLUMNS", "SCHEDULERS", "RunResult", "RunSpec", "simulate"]
