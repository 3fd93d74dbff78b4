"""Running an experiment: expand, run what is not cached, aggregate, chart, summarise.

``run_experiment(spec, out_dir)`` is the whole of ``pagesim run``. It validates
every point first (or preflights the points ``load_experiment_points`` validated, so
that none is validated twice), checks and locks ``out_dir`` (``outdir.py``), runs the runs
whose result is not in the cache (in parallel, on the chosen executor), then builds
everything in ``out_dir`` from the cache:

    results.csv            one row per point (see aggregate.py), deterministic bytes
    wall_times.csv         sim_wall_s per run (not deterministic, so kept apart)
    replicas.csv           a fleet's runs (cluster.replicas > 1 or disaggregation): one
                           row per run and replica (``RunResult.replicas``)
    timeseries/<run>.csv.gz, requests/<run>.csv.gz   per run (``p003_seed0``),
                           hard links to the cached tables (stored once) where the
                           file system allows, else copies
    <chart>.png            the charts the file asks for
    summary.md             headline numbers, requests lost and why, the step costs'
                           source, and the paper's numbers beside them
    experiment.json        the experiment as run (quick / --set applied)
    runs/<key>/            the cache (see cache.py)
    .pagesim-outputs.json  which of these files pagesim wrote (see outdir.py)

Each run's key is computed once (``cache.run_key`` over the spec and the content
hashes of its input files, each file hashed once), so finishing a run is O(1) and
a sweep of N runs does O(N) bookkeeping. A run that serves no request is an error
naming its point and the cause (every request dropped by the filters or rejected,
with the reasons); a run that loses more than ``LOSS_WARN_SHARE`` of its requests is
reported in ``ExperimentOutput.warnings`` (the CLI prints them on stderr).

A disk that fills (or any error writing a file) stops the run with one line: each run is
stored whole or not at all and each output file is replaced whole or left as it was
(``pagesim.files``), so the runs finished before stay usable and a rerun, once there is
space, simulates only the runs that are missing.

The simulate function is a parameter (default: ``pagesim.simulator.simulate``) so
the runner can be exercised with any function of the same signature.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pagesim.errors import PagesimError
from pagesim.experiments.aggregate import WALL_COLUMN, results_table, with_interval_columns
from pagesim.experiments.cache import (
    REPLICAS_TABLE,
    RunCache,
    canonical_json,
    remove_dead_tmp,
    run_key,
)
from pagesim.experiments.executors import RunFailed, Say, Simulate, execute
from pagesim.experiments.inputs import FileHasher
from pagesim.experiments.outdir import Manifest, OutLock, make_out_dir, remove_if_empty
from pagesim.experiments.outputs import atomic_write_text, write_csv
from pagesim.experiments.points import Point
from pagesim.experiments.spec import ExperimentSpec
from pagesim.experiments.validate import preflight_points, validate_points
from pagesim.files import replaced_atomically
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
    warnings: tuple[str, ...] = ()


#: A run that loses more than this share of its requests (dropped by the workload
#: filters, rejected by the scheduler, or unfinished at the time limit) is reported
#: with a warning.
LOSS_WARN_SHARE = 0.25
TABLES = ("timeseries", "requests")


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


@dataclass(frozen=True)
class _Run:
    point: Point
    seed: int
    spec: RunSpec
    key: str
    #: the interval replicate this run is (None: an experiment without intervals)
    replicate: int | None = None

    @property
    def run_id(self) -> str:
        tail = "" if self.replicate is None else f"_r{self.replicate}"
        return f"{self.point.point_id}_seed{self.seed}{tail}"

    @property
    def keeps_tables(self) -> bool:
        """Whether its per-request and per-step tables are kept: every run, but an
        interval's replicates after the first, which keep their summary only (the interval
        needs their statistics; writing 20 copies of a point's tables would cost more than
        simulating them)."""
        return self.replicate is None or self.replicate == 0


def _replicates(spec: ExperimentSpec) -> list[tuple[int, dict[str, Any] | None, int | None]]:
    """(seed, RunSpec updates, replicate) of every run of a point: the experiment's seeds,
    or with ``intervals`` its replicates (``IntervalSpec``)."""
    iv = spec.intervals
    if iv is None:
        return [(seed, {"seed": seed}, None) for seed in spec.seeds]
    from pagesim.simulator.spec import SpreadSpec

    out = []
    for r in range(iv.replicates):
        seed = spec.seeds[0] + r if "seeds" in iv.sources else spec.seeds[0]
        spread = SpreadSpec(sources=list(iv.sources), replicate=r)
        out.append((seed, {"seed": seed, "spread": spread}, r))
    return out


def _run_all(
    runs: list[_Run],
    cache: RunCache,
    *,
    simulate: Simulate,
    executor: str,
    jobs: int,
    progress: bool | None,
    ray_address: str | None = None,
    say: Say | None = None,
) -> int:
    """Run every run not in the cache; returns how many were computed.

    Each key's number of runs is counted once, so a completion costs O(1).
    """
    from tqdm import tqdm

    key_to_count = Counter(run.key for run in runs if not cache.has(run.key))
    key_to_spec = {run.key: run.spec for run in runs if run.key in key_to_count}
    key_to_tables = {run.key: run.keeps_tables for run in runs if run.key in key_to_count}
    keys = list(key_to_spec)
    specs = [key_to_spec[key] for key in keys]
    num_missing = sum(key_to_count.values())
    disable = None if progress is None else not progress  # None: only on a terminal
    shown = progress if progress is not None else sys.stderr.isatty()
    if shown and executor == "local" and (jobs <= 1 or len(specs) == 1):
        simulate = functools.partial(simulate, progress=True)  # requests done, ETA, per run
    bar = tqdm(total=len(runs), initial=len(runs) - num_missing, unit="run", disable=disable)
    finished = execute(executor, simulate, specs, jobs, ray_address=ray_address, say=say)
    num_stored = 0
    try:
        for index, result in finished:
            try:
                cache.store(keys[index], specs[index], result, tables=key_to_tables[keys[index]])
            except OSError as exc:
                run = next(run for run in runs if run.key == keys[index])
                raise PagesimError(
                    f"{cache.root}: cannot store the run of point {run.point.point_id} seed "
                    f"{run.seed} ({_os_error(exc)}); the {num_stored} run(s) finished before it "
                    "are stored whole: free space and rerun to resume from them"
                ) from None
            num_stored += 1
            bar.update(key_to_count[keys[index]])
    except RunFailed as exc:
        failed = [run for run in runs if run.key == keys[exc.index]]
        where = ", ".join(
            f"point {r.point.point_id} ({r.point.label}) seed {r.seed}" for r in failed
        )
        raise PagesimError(f"{where}: {exc.error}") from None
    finally:
        finished.close()  # on Ctrl-C or an error: cancel queued runs, stop the workers
        bar.close()
    return len(keys)


def _os_error(exc: OSError) -> str:
    """An OSError as a message shows it: what failed, and on which file."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (stored once), else a copy; atomically."""
    with replaced_atomically(target) as tmp:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)


def _place_run_tables(runs: list[_Run], cache: RunCache, out_dir: Path) -> list[str]:
    names = []
    for table in TABLES:
        (out_dir / table).mkdir(parents=True, exist_ok=True)
        for run in runs:
            if not run.keeps_tables:
                continue
            name = f"{table}/{run.run_id}.csv.gz"
            _link_or_copy(cache.folder(run.key) / f"{table}.csv.gz", out_dir / name)
            names.append(name)
    return names


#: the folder of each run's ``vllm bench serve``-shaped result (``--vllm-json``)
VLLM_JSON_DIR = "vllm_bench"


def _write_vllm_json(runs: list[_Run], cache: RunCache, out_dir: Path) -> list[str]:
    """Each run (that keeps its tables) as ``vllm bench serve --save-detailed`` writes a
    result: ``vllm_bench/<run>.json``, from the cached tables and summary."""
    import json
    from types import SimpleNamespace

    from pagesim.simulator.vllm_metrics import vllm_bench_result

    (out_dir / VLLM_JSON_DIR).mkdir(parents=True, exist_ok=True)
    names = []
    for run in runs:
        if not run.keeps_tables:
            continue
        folder = cache.folder(run.key)
        summary, extra = cache.load_summary(run.key)
        requests = pd.read_csv(folder / "requests.csv.gz", keep_default_na=False, na_values=[""])
        result = SimpleNamespace(requests=requests, summary=summary, extra=extra)
        doc = vllm_bench_result(result, run.spec.metrics, label=f"pagesim {run.run_id}")
        name = f"{VLLM_JSON_DIR}/{run.run_id}.json"
        atomic_write_text(out_dir / name, json.dumps(doc, indent=1) + "\n")
        names.append(name)
    return names


def _num(values: dict[str, Any], name: str) -> float:
    value = values.get(name, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


def _accounting_problems(
    runs: list[_Run], run_values: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """(errors: runs that served no request, warnings: runs that lost too many).

    A run's lost share combines the share of candidates the filters dropped
    (``dropped_share``) with the share of its requests that were rejected.
    """
    errors, warnings = [], []
    for run, values in zip(runs, run_values, strict=True):
        if "num_finished" not in values:
            continue  # a simulate function that does not count requests: nothing to check
        finished = _num(values, "num_finished")
        dropped, rejected = _num(values, "num_dropped"), _num(values, "num_rejected")
        unfinished = _num(values, "num_unfinished")
        num_run = finished + rejected + unfinished
        drop_share = values.get("dropped_share")
        if not isinstance(drop_share, int | float):
            drop_share = dropped / (dropped + num_run) if dropped + num_run else 0.0
        why = []
        if dropped:
            reasons = values.get("dropped_reasons", "?")
            why.append(
                f"{dropped:.0f} ({drop_share:.0%}) of the candidates dropped by the workload "
                f"filters ({reasons})"
            )
        if rejected:
            why.append(f"{rejected:.0f} rejected ({values.get('rejected_reasons', '?')})")
        if unfinished:
            why.append(f"{unfinished:.0f} unfinished at max_sim_time_s")
        where = f"point {run.point.point_id} ({run.point.label}), seed {run.seed}"
        if finished == 0:
            cause = "; ".join(why) or "the workload produced no requests"
            errors.append(f"{where}: no request was served: {cause}")
            continue
        lost = 1 - (1 - drop_share) * (1 - (rejected + unfinished) / num_run)
        if lost > LOSS_WARN_SHARE:
            warnings.append(f"{where}: lost {lost:.0%} of its requests: {'; '.join(why)}")
    return errors, warnings


def _one_line(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more run(s) like it)" if len(problems) > 1 else ""
    return problems[0] + more


#: a fleet's per-replica rows, one file for the experiment (results.csv keeps a row per run)
REPLICAS_CSV = "replicas.csv"


def _has_fleet(runs: list[_Run]) -> bool:
    return any(run.spec.cluster.replicas > 1 or run.spec.disaggregation is not None for run in runs)


def _replica_rows(runs: list[_Run], cache: RunCache) -> pd.DataFrame:
    """Every fleet run's per-replica rows (``RunResult.replicas``), each led by its point,
    label and seed, in the runs' order."""
    frames = []
    for run in runs:
        path = cache.folder(run.key) / REPLICAS_TABLE
        if not path.is_file():
            continue
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        frame.insert(0, "seed", run.seed)
        frame.insert(0, "label", run.point.label)
        frame.insert(0, "point", run.point.point_id)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _planned_outputs(spec: ExperimentSpec, runs: list[_Run], vllm_json: bool = False) -> list[str]:
    names = ["results.csv", "wall_times.csv", "experiment.json", "summary.md"]
    if _has_fleet(runs):
        names.append(REPLICAS_CSV)
    if vllm_json:
        names += [f"{VLLM_JSON_DIR}/{run.run_id}.json" for run in runs if run.keeps_tables]
    names += [
        f"{table}/{run.run_id}.csv.gz" for table in TABLES for run in runs if run.keeps_tables
    ]
    return names + [
        f"{chart.file or chart.kind}.{fmt}" for chart in spec.charts for fmt in ("png", "svg")
    ]


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
    variant: str = "full",
    points: list[tuple[Point, RunSpec]] | None = None,
    vllm_json: bool = False,
    ray_address: str | None = None,
    say: Say | None = None,
) -> ExperimentOutput:
    """Run ``spec`` into ``out_dir``, reusing cached runs; see the module docstring.

    ``progress``: None shows a bar only on a terminal, True always; ``source`` names
    the file in error messages; ``variant`` (``full`` / ``quick``) is recorded in
    the folder's manifest so the two never mix; ``points``: the spec's points as
    ``load_experiment_points`` validated them (then they are only preflighted here);
    ``vllm_json``: also write each run as a ``vllm bench serve`` result
    (``vllm_bench/<run>.json``, :func:`~pagesim.simulator.vllm_metrics.vllm_bench_result`);
    ``ray_address``, ``say``: with ``executor="ray"``, the cluster to join and who is told
    where the runs execute (:func:`~pagesim.experiments.executors.ray_session`).
    """
    if points is None:
        validated = validate_points(spec, source)
    else:
        validated = preflight_points(points, source)
    jobs = jobs if jobs is not None else default_jobs()
    if jobs < 1:
        raise PagesimError(f"--jobs {jobs}: must be at least 1")
    simulate = simulate if simulate is not None else default_simulate()
    hasher = FileHasher()
    runs = []
    for point, point_spec in validated:
        hashes = hasher.input_hashes(point_spec)
        for seed, update, replicate in _replicates(spec):
            run_spec = point_spec.model_copy(update=update)
            runs.append(_Run(point, seed, run_spec, run_key(run_spec, hashes), replicate))
    created = make_out_dir(out_dir)
    try:
        with OutLock(out_dir):
            manifest = Manifest(out_dir)
            manifest.check(variant, _planned_outputs(spec, runs, vllm_json))
            remove_dead_tmp(out_dir)
            for table in TABLES:
                remove_dead_tmp(out_dir / table)
            cache = RunCache(cache_dir if cache_dir is not None else out_dir / "runs")
            cache.clean_leftovers()
            num_computed = _run_all(
                runs, cache, simulate=simulate, executor=executor, jobs=jobs, progress=progress,
                ray_address=ray_address, say=say,
            )  # fmt: skip
            try:
                return _write_outputs(
                    spec, runs, cache, out_dir, manifest, variant, num_computed, vllm_json
                )
            except OSError as exc:
                raise PagesimError(
                    f"{out_dir}: cannot write the outputs ({_os_error(exc)}); every file is "
                    f"written whole or left as it was, and the {len(runs)} run(s) are stored in "
                    f"{cache.root}: free space and rerun to write them (nothing is simulated again)"
                ) from None
    except BaseException:
        remove_if_empty(created)
        raise


def _write_outputs(
    spec: ExperimentSpec,
    runs: list[_Run],
    cache: RunCache,
    out_dir: Path,
    manifest: Manifest,
    variant: str,
    num_computed: int,
    vllm_json: bool = False,
) -> ExperimentOutput:
    from pagesim.experiments.charts import draw_charts
    from pagesim.experiments.summary import write_summary

    run_values = []
    for run in runs:
        summary, extra = cache.load_summary(run.key)
        run_values.append({**extra, **summary})
    errors, warnings = _accounting_problems(runs, run_values)
    if errors:
        raise PagesimError(_one_line(errors))
    manifest.claim(variant, _planned_outputs(spec, runs, vllm_json))
    point_rows, point_to_seed_values, wall_rows = [], [], []
    for i, run in enumerate(runs):
        if i == 0 or run.point is not runs[i - 1].point:
            point = run.point
            point_rows.append(
                {"point": point.point_id, "label": point.label, **point.path_to_value}
            )
            point_to_seed_values.append([])
        point_to_seed_values[-1].append(run_values[i])
        wall_rows.append(
            {
                "point": run.point.point_id,
                "seed": run.seed,
                "run_key": run.key,
                WALL_COLUMN: run_values[i].get(WALL_COLUMN, float("nan")),
            }
        )
    results = results_table(point_rows, point_to_seed_values)
    if spec.intervals is not None:
        results = with_interval_columns(results, point_to_seed_values, spec.intervals, runs)
    write_csv(results, out_dir / "results.csv")
    write_csv(pd.DataFrame(wall_rows), out_dir / "wall_times.csv")
    written = ["results.csv", "wall_times.csv", "experiment.json", "summary.md"]
    if _has_fleet(runs):
        write_csv(_replica_rows(runs, cache), out_dir / REPLICAS_CSV)
        written.append(REPLICAS_CSV)
    written += _place_run_tables(runs, cache, out_dir)
    if vllm_json:
        written += _write_vllm_json(runs, cache, out_dir)
    atomic_write_text(
        out_dir / "experiment.json", canonical_json(spec.model_dump(mode="json")) + "\n"
    )
    chart_paths, chart_problems = draw_charts(spec, results, out_dir)
    write_summary(spec, results, out_dir, chart_paths, chart_problems, warnings)
    written += [p.name for path in chart_paths for p in (path, path.with_suffix(".svg"))]
    manifest.replace(variant, written)
    return ExperimentOutput(
        out_dir,
        results,
        len(runs),
        num_computed,
        tuple(chart_paths),
        tuple(chart_problems),
        tuple(warnings),
    )
