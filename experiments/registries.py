"""Names a RunSpec may use, from the registries the other layers own.

Each layer keeps its plug-ins in a plain dict (``pagesim.workloads.WORKLOADS``,
``pagesim.workloads.arrivals.ARRIVAL_PROCESSES``, ``pagesim.allocators.ALLOCATORS``
and ``...contiguous.PLACEMENTS``, ``pagesim.simulator.SCHEDULERS``,
``pagesim.simulator.model_catalog.SHIPPED_NAMES`` (which also accepts Hugging Face ids and
config paths) / ``model_gpu_specs.GPUS``). They are imported lazily, and a
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
    #: a function of ``module`` that says why a name not in the registry is refused (None:
    #: it is accepted), for registries that take more than their names (``hardware.model``
    #: also takes Hugging Face ids and config.json paths)
    problem: str | None = None

    def names(self) -> list[str] | None:
        """The registered names, sorted; None when the owning layer does not provide them."""
        try:
            module = importlib.import_module(self.module)
            registry = getattr(module, self.attribute)
        except (ImportError, AttributeError):
            return None
        return sorted(str(name) for name in registry)


REGISTRIES = (
    Registry(
        "models",
        "hardware.model",
        "pagesim.simulator.model_catalog",
        "SHIPPED_NAMES",
        problem="model_reference_problem",
    ),
    Registry("GPUs", "hardware.gpu", "pagesim.simulator.model_gpu_specs", "GPUS"),
    Registry("workloads", "workload.name", "pagesim.workloads", "WORKLOADS"),
    Registry("allocators", "allocator.kind", "pagesim.allocators", "ALLOCATORS"),
    Registry("schedulers", "scheduler.kind", "pagesim.simulator", "SCHEDULERS"),
    Registry("placements", "allocator.placement", "pagesim.allocators.contiguous", "PLACEMENTS"),
    Registry(
        "arrival processes", "arrivals.process", "pagesim.workloads.arrivals", "ARRIVAL_PROCESSES"
    ),
)


def unknown_names(run_doc: dict) -> list[tuple[str, str, list[str], str | None]]:
    """``(dotted_path, name, allowed_names, why)`` for each registered name ``run_doc``
    misuses (``why``: the registry's own one-line reason, where it has a ``problem``).

    ``run_doc`` is a validated RunSpec dumped to a dict (defaults filled in).
    """
    problems = []
    for registry in REGISTRIES:
        allowed = registry.names()
        if allowed is None:
            continue
        section, key = registry.dotted_path.split(".")
        name = run_doc[section][key]
        if name in allowed:
            continue
        why = None
        if registry.problem is not None:
            why = getattr(importlib.import_module(registry.module), registry.problem)(name)
            if why is None:
                continue
        problems.append((registry.dotted_path, name, allowed, why))
    return problems
