"""Running an experiment: expand, run what is not cached, aggregate, chart, summarise.

``run_experiment(spec, out_dir)`` is the whole of ``pagesim run``. It validates
every point first, runs the runs whose result is not in the cache (in parallel, on
the chosen executor), then builds everything in ``out_dir`` from the cache:

    results.csv            one row per point (see aggregate.py), deterministic bytes
    wall_times.csv         sim_wall_s per run (not deterministic, so kept apart)
    timeseries/<run>.csv.gz, requests/<run>.csv.gz   per run (``p003_seed0``)
    <chart>.png            the charts the file asks for
    summary.md             headline numbers, and the paper's beside them
    experiment.json        the experiment as run (quick / --set applied)
    runs/<key>/            the cache (see cache.py)

The simulate function is a parameter (default: ``pagesim.simulator.simulate``) so
the runner can be exercised with any function of the same signature.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pagesim.errors import PagesimError
from pagesim.experiments.aggregate import WALL_COLUMN, results_table
from pagesim.experiments.cache import RunCache, canonical_json, run_key
from pagesim.experiments.executors import Simulate, execute
from pagesim.experiments.outputs import atomic_write_text, write_csv
from pagesim.experiments.points import Point
from pagesim.experiments.spec import ExperimentSpec
from pagesim.experiments.validate import validate_points
from pagesim.simulator.spec import RunSpec


@dataclass(frozen=True)
class ExperimentOutput:
    """What a run of an experiment produced (the files are in ``out_dir``)."""

    out_dir: Path
    results: pd.DataFrame
    num_runs: int
    num_computed: int
    chart_paths: tuple[Path, ...]
    chart_problems: tuple[str, ...]


def default_simulate() -> Simulate:
    try:
        from pagesim.simulator import simulate
    except ImportError:
        raise PagesimError(
            "pagesim.simulator.simulate is not available in this installation; "
            "reinstall pagesim or pass a simulate function"
        ) from None
    return simulate


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _run_all(
    runs: list[tuple[Point, int, RunSpec]],
    cache: RunCache,
    *,
    simulate: Simulate,
    executor: str,
    jobs: int,
    progress: bool | None,
) -> int:
    """Run every run not in the cache; returns how many were computed."""
    from tqdm import tqdm

    missing = [spec for _, _, spec in runs if not cache.has(spec)]
    unique = list({run_key(spec): spec for spec in missing}.values())
    disable = None if progress is None else not progress  # None: only on a terminal
    bar = tqdm(total=len(runs), initial=len(runs) - len(missing), unit="run", disable=disable)
    try:
        for index, result in execute(executor, simulate, unique, jobs):
            cache.store(unique[index], result)
            bar.update(sum(run_key(s) == run_key(unique[index]) for s in missing))
    finally:
        bar.close()
    return len(unique)


def _copy_run_tables(
    runs: list[tuple[Point, int, RunSpec]], cache: RunCache, out_dir: Path
) -> None:
    for table in ("timeseries", "requests"):
        (out_dir / table).mkdir(parents=True, exist_ok=True)
        for point, seed, spec in runs:
            target = out_dir / table / f"{point.point_id}_seed{seed}.csv.gz"
            tmp = target.with_name(f".tmp-{target.name}")
            shutil.copyfile(cache.folder(spec) / f"{table}.csv.gz", tmp)
            tmp.replace(target)


def run_experiment(
    spec: ExperimentSpec,
    out_dir: Path,
    *,
    simulate: Simulate | None = None,
    executor: str = "local",
    jobs: int | None = None,
    cache_dir: Path | None = None,
    progress: bool | None = None,
    source: str = "<experiment>",
) -> ExperimentOutput:
    """Run ``spec`` into ``out_dir``, reusing cached runs; see the module docstring.

    ``progress``: None shows a bar only on a terminal; ``source`` names the file in
    error messages.
    """
    from pagesim.experiments.charts import draw_charts
    from pagesim.experiments.summary import write_summary

    validated = validate_points(spec, source)
    runs = [
        (point, seed, run_spec.model_copy(update={"seed": seed}))
        for point, run_spec in validated
        for seed in spec.seeds
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = RunCache(cache_dir if cache_dir is not None else out_dir / "runs")
    num_computed = _run_all(
        runs,
        cache,
        simulate=simulate if simulate is not None else default_simulate(),
        executor=executor,
        jobs=jobs if jobs is not None else default_jobs(),
        progress=progress,
    )

    point_rows, point_to_seed_values, wall_rows = [], [], []
    for point, _ in validated:
        seed_values = []
        for seed in spec.seeds:
            run_spec = next(s for p, sd, s in runs if p is point and sd == seed)
            summary, extra = cache.load_summary(run_spec)
            seed_values.append({**extra, **summary})
            wall_rows.append(
                {
                    "point": point.point_id,
                    "seed": seed,
                    "run_key": run_key(run_spec),
                    WALL_COLUMN: summary.get(WALL_COLUMN, float("nan")),
                }
            )
        point_rows.append({"point": point.point_id, "label": point.label, **point.path_to_value})
        point_to_seed_values.append(seed_values)
    results = results_table(point_rows, point_to_seed_values)
    write_csv(results, out_dir / "results.csv")
    write_csv(pd.DataFrame(wall_rows), out_dir / "wall_times.csv")
    _copy_run_tables(runs, cache, out_dir)
    atomic_write_text(
        out_dir / "experiment.json", canonical_json(spec.model_dump(mode="json")) + "\n"
    )

    chart_paths, chart_problems = draw_charts(spec, results, out_dir)
    write_summary(spec, results, out_dir, chart_paths, chart_problems)
    return ExperimentOutput(
        out_dir, results, len(runs), num_computed, tuple(chart_paths), tuple(chart_problems)
    )
