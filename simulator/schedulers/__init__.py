"""Schedulers, by the name a RunSpec uses (``scheduler.kind``): one file and one line each."""

from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.orca import OrcaScheduler
from pagesim.simulator.schedulers.static import StaticScheduler
from pagesim.simulator.schedulers.vllm import VllmScheduler
from pagesim.simulator.schedulers.vllm_paper import VllmPaperScheduler
from pagesim.simulator.schedulers.vllm_v1 import VllmV1Scheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm": VllmScheduler,
    "vllm-paper": VllmPaperScheduler,
    "vllm-v1": VllmV1Scheduler,
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
    "VllmV1Scheduler",
]
