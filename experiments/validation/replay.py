"""Replaying a measured run through pagesim: its exact requests, its server's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pagesim.errors import DataError
from pagesim.experiments.validation.study import CostModelChoice, ValidationRun


@dataclass(frozen=True)
class Replay:
    """One run replayed under one cost model: per-request latencies, and the run's steps."""

    requests: pd.DataFrame
    timeseries: pd.DataFrame
    description: str
    kv_blocks: int
    #: the cost model object, where the choice built one (``CostModelChoice.make``)
    cost_model: Any = field(default=None, compare=False)


def replay(vrun: ValidationRun, cost: CostModelChoice, *, every_step: bool = True) -> Replay:
    """``vrun``'s requests through pagesim with its settings and ``cost``'s profile."""
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in vrun.settings.items()}
    doc["hardware"] = {
        **doc.get("hardware", {}),
        **cost.hardware.get(vrun.name, {}),
        "profile": cost.profile_for(vrun.name),
    }
    if cost.scheduler:
        doc["scheduler"] = {**doc.get("scheduler", {}), **cost.scheduler}
    if cost.settings:
        from pagesim.experiments.paths import apply_overrides

        doc = apply_overrides(doc, dict(cost.settings))
    doc["metrics"] = {**doc.get("metrics", {}), "every_step": every_step}
    spec = run_spec_from_dict(doc, f"{vrun.run.dataset} {vrun.name} replay")
    model = cost.make(vrun) if cost.make is not None else None
    result = simulate(
        spec, trace=vrun.trace if vrun.trace is not None else vrun.run.trace(), cost_model=model
    )
    req = result.requests
    lost = req[req["status"] != "finished"]
    if len(lost):
        raise DataError(
            f"{vrun.name}: {len(lost)} requests not finished in the replay "
            f"({lost['reason'].iloc[0]})"
        )
    return Replay(
        requests=req,
        timeseries=result.timeseries,
        description=result.notes.get("cost_model_description", ""),
        kv_blocks=int(result.extra["kv_capacity_slots"]) // spec.allocator.block_size,
        cost_model=model,
    )
