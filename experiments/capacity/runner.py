"""Running a capacity search: rounds of simulations, on the local executor or Ray.

Every point searches at once (:mod:`.search`): a round simulates each unfinished point's
next rate at every seed, through :func:`~pagesim.experiments.executors.execute` (in this
process with one job, a process pool with more, or Ray, as ``pagesim run`` runs a sweep;
on Ray one session holds every round, and the mix goes to the workers by content as any
trace file does). A progress bar counts the runs. Each rate's requests are judged by
:mod:`.slo` and the outcome kept as an :class:`Evaluation`.

The output folder is checked, locked and owned as ``pagesim run``'s is
(:mod:`~pagesim.experiments.outdir`): a file pagesim did not write there is never
overwritten; a rerun into the same folder replaces the files its previous run wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagesim.errors import ConfigError
from pagesim.experiments.capacity.search import Precision, RateSearch
from pagesim.experiments.capacity.setup import MIX_NAME, Point, Source, num_gpus
from pagesim.experiments.capacity.slo import Slo, passes, statistic

VARIANT = "capacity"


@dataclass(frozen=True)
class Evaluation:
    """One point at one rate: each statistic pooled over the seeds, each seed's own, and
    whether the rate passed."""

    point: int
    rate: float
    stats: dict[str, float]
    per_seed: dict[str, list[float]]
    passed: bool
    num_requests: int
    num_unserved: int


@dataclass
class Outcome:
    """Everything the report needs."""

    source: Source
    slo: Slo
    precision: Precision
    seeds: list[int]
    points: list[Point]
    searches: list[RateSearch]
    evaluations: list[Evaluation] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    cost_models: list[str] = field(default_factory=list)

    def at(self, point: int, rate: float | None) -> Evaluation | None:
        for e in self.evaluations:
            if e.point == point and e.rate == rate:
                return e
        return None


def spec_for(doc: dict[str, Any], point: Point, rate: float, seed: int, where: str):
    """The RunSpec of ``point`` at ``rate`` and ``seed``."""
    from pagesim.experiments.paths import apply_overrides
    from pagesim.simulator.spec import run_spec_from_dict

    values = {**point.values, "arrivals.rate_req_s": float(rate), "seed": seed}
    return run_spec_from_dict(apply_overrides(doc, values), where)


def _check_points(doc: dict[str, Any], points: list[Point], start: float) -> tuple[list, list]:
    """Each point validated and preflighted once (at the start rate): its GPU count and
    cost model's name."""
    from pagesim.experiments.preflight import check_run

    gpus, names = [], []
    for point in points:
        where = f"capacity point {point.label!r}"
        spec = spec_for(doc, point, start, 0, where)
        check_run(spec, where)
        gpus.append(num_gpus(spec))
        names.append(spec.hardware.profile or "analytic")
    return gpus, names


def _judge(outcome: Outcome, index: int, rate: float, runs: list) -> Evaluation:
    slo = outcome.slo
    stats = {name: statistic(slo, name, runs) for name in slo.statistics}
    per_seed = {name: [statistic(slo, name, [r]) for r in runs] for name in slo.statistics}
    passed = all(passes(slo, name, value) for name, value in stats.items())
    requests = sum(len(r.requests) for r in runs)
    unserved = sum(int((r.requests["status"] != "finished").sum()) for r in runs)
    return Evaluation(index, rate, stats, per_seed, passed, requests, unserved)


def _rounds(outcome: Outcome, doc: dict[str, Any], run_round, bar) -> None:
    """Search every point until each is done (module docstring)."""
    from pagesim.experiments.executors import RunFailed

    seeds = outcome.seeds
    while True:
        todo = [(i, s.next_rate()) for i, s in enumerate(outcome.searches)]
        todo = [(i, rate) for i, rate in todo if rate is not None]
        if not todo:
            return
        specs = [
            spec_for(
                doc, outcome.points[i], rate, seed, f"capacity point {outcome.points[i].label!r}"
            )
            for i, rate in todo
            for seed in seeds
        ]
        bar.total = (bar.total or 0) + len(specs)
        bar.refresh()
        results: dict[int, Any] = {}
        try:
            for index, result in run_round(specs):
                results[index] = result
                bar.update(1)
        except RunFailed as exc:
            i, rate = todo[exc.index // len(seeds)]
            raise ConfigError(
                f"capacity point {outcome.points[i].label!r} at {rate:.4g} req/s, seed "
                f"{seeds[exc.index % len(seeds)]}: {exc.error}"
            ) from None
        for k, (i, rate) in enumerate(todo):
            runs = [results[k * len(seeds) + j] for j in range(len(seeds))]
            evaluation = _judge(outcome, i, rate, runs)
            outcome.evaluations.append(evaluation)
            outcome.searches[i].record(rate, evaluation.passed)
        bar.set_postfix_str(
            "; ".join(
                f"{p.label}: {s.passing or 0:.3g}-{s.failing or float('inf'):.3g}"
                for p, s in zip(outcome.points, outcome.searches, strict=True)
            )[:80]
        )


def run_capacity(
    source: Source,
    slo: Slo,
    points: list[Point],
    precision: Precision,
    seeds: list[int],
    out_dir: Path,
    *,
    executor: str = "local",
    jobs: int | None = None,
    ray_address: str | None = None,
    progress: bool | None = None,
    say=None,
    write=None,
) -> Outcome:
    """Search every point (module docstring) and write the report into ``out_dir`` with
    ``write(outcome, out_dir) -> [file names]`` (:func:`.report.write_report`)."""
    import contextlib
    import sys

    from tqdm import tqdm

    from pagesim.experiments.capacity.report import planned_files, write_report
    from pagesim.experiments.executors import execute, ray_session
    from pagesim.experiments.outdir import Manifest, OutLock, make_out_dir, remove_if_empty
    from pagesim.experiments.runner import default_jobs, default_simulate

    if not seeds:
        raise ConfigError("--seeds: at least one")
    jobs = jobs if jobs is not None else default_jobs()
    write = write or write_report
    outcome = Outcome(
        source,
        slo,
        precision,
        seeds,
        points,
        [RateSearch(source.start_rate, precision) for _ in points],
    )
    created = make_out_dir(out_dir)
    try:
        with OutLock(out_dir):
            manifest = Manifest(out_dir)
            planned = planned_files(source)
            manifest.check(VARIANT, planned)
            manifest.claim(VARIANT, planned)
            mix_path = out_dir / MIX_NAME
            if source.mix is not None:
                from pagesim.experiments.outputs import atomic_write_text

                atomic_write_text(mix_path, source.mix.to_csv(index=False))
            doc = source.doc_for(mix_path.resolve())
            outcome.gpus, outcome.cost_models = _check_points(doc, points, source.start_rate)
            simulate = default_simulate()
            session = (
                ray_session(ray_address, jobs, say)
                if executor == "ray"
                else contextlib.nullcontext()
            )
            disable = None if progress is None else not progress
            with (
                session,
                tqdm(total=0, unit="run", desc="capacity", disable=disable, file=sys.stderr) as bar,
            ):
                _rounds(
                    outcome,
                    doc,
                    lambda specs: execute(
                        executor, simulate, specs, jobs, ray_address=ray_address, say=say
                    ),
                    bar,
                )
            written = write(outcome, out_dir)
            manifest.replace(VARIANT, written)
    except BaseException:
        remove_if_empty(created)
        raise
    return outcome
