"""Names a RunSpec may use, from the registries the other layers own.

Each layer keeps its plug-ins in a plain dict (``pagesim.workloads.WORKLOADS``,
``pagesim.workloads.arrivals.ARRIVAL_PROCESSES``, ``pagesim.allocators.ALLOCATORS``
and ``...contiguous.PLACEMENTS``, ``pagesim.simulator.SCHEDULERS``,
``pagesim.simulator.model_gpu_specs.MODELS`` / ``GPUS``). They are imported lazily, and a
registry a layer does not provide (yet) is reported as unavailable rather than
guessed: name checks against it are then left to the layer that owns it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Registry:
    """One registry: what it lists, the RunSpec path it checks, where it lives."""

    title: str
    dotted_path: str
    module: str
    attribute: str

    def names(self) -> list[str] | None:
        """The registered names, sorted; None when the owning layer does not provide them."""
        try:
            module = importlib.import_module(self.module)
            registry = getattr(module, self.attribute)
        except (ImportError, AttributeError):
            return None
        return sorted(str(name) for name in registry)


REGISTRIES = (
    Registry("models", "hardware.model", "pagesim.simulator.model_gpu_specs", "MODELS"),
    Registry("GPUs", "hardware.gpu", "pagesim.simulator.model_gpu_specs", "GPUS"),
    Registry("workloads", "workload.name", "pagesim.workloads", "WORKLOADS"),
    Registry("allocators", "allocator.kind", "pagesim.allocators", "ALLOCATORS"),
    Registry("schedulers", "scheduler.kind", "pagesim.simulator", "SCHEDULERS"),
    Registry("placements", "allocator.placement", "pagesim.allocators.contiguous", "PLACEMENTS"),
    Registry(
        "arrival processes", "arrivals.process", "pagesim.workloads.arrivals", "ARRIVAL_PROCESSES"
    ),
)


def unknown_names(run_doc: dict) -> list[tuple[str, str, list[str]]]:
    """``(dotted_path, name, allowed_names)`` for each registered name ``run_doc`` misuses.

    ``run_doc`` is a validated RunSpec dumped to a dict (defaults filled in).
    """
    problems = []
    for registry in REGISTRIES:
        allowed = registry.names()
        if allowed is None:
            continue
        section, key = registry.dotted_path.split(".")
        name = run_doc[section][key]
        if name not in allowed:
            problems.append((registry.dotted_path, name, allowed))
    return problems
