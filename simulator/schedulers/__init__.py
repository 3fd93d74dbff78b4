"""Schedulers, by the name a RunSpec uses (``scheduler.kind``): one file and one line each."""

from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.orca import OrcaScheduler
from pagesim.simulator.schedulers.static import StaticScheduler
from pagesim.simulator.schedulers.vllm import VllmScheduler
from pagesim.simulator.schedulers.vllm_paper import VllmPaperScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm": VllmScheduler,
    "vllm-paper": VllmPaperScheduler,
    "orca": OrcaScheduler,
    "static": StaticScheduler,
}

__all__ = [
    "SCHEDULERS",
    "OrcaScheduler",
    "Scheduler",
    "StaticScheduler",
    "VllmPaperScheduler",
    "VllmScheduler",
]
