"""Schedulers, by the name a RunSpec uses (``scheduler.kind``): one file and one line each."""

from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.orca import OrcaScheduler
from pagesim.simulator.schedulers.static import StaticScheduler
from pagesim.simulator.schedulers.vllm import VllmScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm": VllmScheduler,
    "orca": OrcaScheduler,
    "static": StaticScheduler,
}

__all__ = ["SCHEDULERS", "OrcaScheduler", "Scheduler", "StaticScheduler", "VllmScheduler"]
