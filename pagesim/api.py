"""The notebook API: ``pagesim.simulate`` and ``pagesim.sweep``, in memory, as DataFrames.

    import pagesim
    run = pagesim.simulate({"workload": {"num_requests": 500}, "arrivals": {"rate_req_s": 2}})
    run.summary_frame            # one row: every metric of the run
    run.requests, run.timeseries # per request, per step window

    table = pagesim.sweep(
        {"workload": {"num_requests": 500}},
        grid={"allocator.kind": ["paged", "max"], "arrivals.rate_req_s": [1, 2, 4]},
        seeds=[0, 1],
    )                            # one row per point: the swept values, then the metrics

``simulate`` takes a RunSpec document (a dict, as an experiment file's ``base``), a
``RunSpec``, or a path to a YAML file holding one; keyword ``overrides`` set dotted paths
(``simulate(doc, overrides={"allocator.block_size": 32})``). ``sweep`` expands a grid
(every combination) and ``zip`` groups (paths varied together) as an experiment file's
``sweep`` does, runs every point at every seed, and returns ``results.csv``'s table
(the mean over seeds, and ``*_ci95`` half-widths when there are several), with nothing
written to disk. Both validate strictly, with the messages ``pagesim validate`` prints.

Started in the folder *above* a clone, Python imports the clone's folder as a namespace
package named ``pagesim`` instead of the installed one, and none of pagesim's own code
runs: ``from pagesim import simulate`` then fails with Python's "unknown location"
message. Each layer's ``__init__`` checks for it, so ``import pagesim.simulator`` (or any
layer) stops with one line saying what happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


def _run_doc(spec: Any, overrides: dict[str, Any] | None) -> dict[str, Any]:
    from pagesim import yamlio
    from pagesim.experiments.paths import apply_overrides
    from pagesim.simulator.spec import RunSpec

    if spec is None:
        doc: dict[str, Any] = {}
    elif isinstance(spec, RunSpec):
        doc = spec.model_dump(mode="json")
    elif isinstance(spec, str | Path):
        doc = yamlio.read(Path(spec), "run spec")
    elif isinstance(spec, dict):
        doc = spec
    else:
        raise TypeError(
            f"simulate: expected a dict, a RunSpec or a YAML path, got {type(spec).__name__}"
        )
    return apply_overrides(dict(doc), overrides or {})


def simulate(spec: Any = None, *, overrides: dict[str, Any] | None = None, progress: bool = False):
    """One run (module docstring); its RunResult: ``requests`` and ``timeseries``
    DataFrames, the ``summary`` dict and ``summary_frame`` (one row)."""
    from pagesim.experiments.preflight import check_run
    from pagesim.simulator import simulate as run_spec
    from pagesim.simulator.spec import run_spec_from_dict

    doc = _run_doc(spec, overrides)
    run = run_spec_from_dict(doc, "simulate")
    check_run(run, "simulate")
    return run_spec(run, progress=progress)


def sweep(
    base: Any = None,
    *,
    grid: dict[str, list[Any]] | None = None,
    zip: list[dict[str, list[Any]]] | None = None,  # noqa: A002 - the experiment file's key
    seeds: list[int] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Every point of the sweep at every seed (module docstring): ``results.csv``'s table."""
    from pagesim.experiments.aggregate import results_table
    from pagesim.experiments.validate import parse_experiment, validate_points
    from pagesim.simulator import simulate as run_spec

    doc = {
        "name": "sweep",
        "base": _run_doc(base, None),
        "sweep": {"grid": dict(grid or {}), "zip": list(zip or [])},
        "seeds": list(seeds if seeds is not None else [0]),
    }
    spec = parse_experiment(doc, "sweep")
    jobs = [
        (point, run, seed) for point, run in validate_points(spec, "sweep") for seed in spec.seeds
    ]
    if progress:
        from tqdm import tqdm

        jobs = tqdm(jobs, unit="run")
    rows: dict[int, dict[str, Any]] = {}
    values: dict[int, list[dict[str, Any]]] = {}
    for point, run, seed in jobs:
        result = run_spec(run.model_copy(update={"seed": seed}))
        rows.setdefault(
            point.index, {"point": point.point_id, "label": point.label, **point.path_to_value}
        )
        values.setdefault(point.index, []).append({**result.extra, **result.summary})
    order = sorted(rows)
    return results_table([rows[i] for i in order], [values[i] for i in order])
