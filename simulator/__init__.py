"""pagesim.simulator: the SimPy engine, schedulers, metrics, cost model and specs.

Public API: :func:`simulate` (RunSpec -> RunResult) and :data:`SCHEDULERS`.
"""

from pagesim.simulator.result import METRIC_COLUMNS, REQUEST_COLUMNS, RunResult
from pagesim.simulator.run import simulate
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import RunSpec

__all__ = ["METRIC_COLUMNS", "REQUEST_COLUMNS", "SCHEDULERS", "RunResult", "RunSpec", "simulate"]
