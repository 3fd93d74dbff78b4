"""Loading and validating an experiment file, all of it, before anything runs.

Every problem is a :class:`~pagesim.errors.ConfigError` whose message names the
FILE, the PATH in the document (``base.allocator.kind``, ``sweep.grid.allocator.
block_size[2]``, ``charts[0].kind``) and what is allowed there (the allowed keys
for an unknown key, the allowed names for an unknown model / GPU / workload /
allocator / scheduler). Checks, in order: YAML syntax; the experiment schema; each
swept and overridden path names a RunSpec field; the base is a valid RunSpec; each
sweep value is valid on its own; each point is a valid RunSpec whose names are
registered; each chart kind exists. A ``--set`` value that makes the file's valid base
invalid is the flag's error and says so (``--set PATH=VALUE: problem``), not the
file's. :func:`load_experiment` checks the file itself;
``pagesim validate`` and ``pagesim run`` also put each point through ``preflight.py``
(its input files exist, its pool and blocks fit), so that ``validate`` rejects
everything ``run`` would before simulating.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pagesim import yamlio
from pagesim.errors import ConfigError
from pagesim.experiments.model_paths import anchor_model_paths
from pagesim.experiments.paths import apply_overrides
from pagesim.experiments.points import Point, expand_points
from pagesim.experiments.preflight import check_run
from pagesim.experiments.registries import unknown_names
from pagesim.experiments.schema_paths import allowed_keys, check_dotted_path
from pagesim.experiments.spec import ExperimentSpec
from pagesim.simulator.spec import RunSpec
from pagesim.specbase import error_text


def _loc_path(prefix: str, loc: tuple) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "<root>"


def format_errors(exc: ValidationError, model: type[BaseModel], source: str, prefix: str) -> str:
    """``source: path: message`` per problem; an unknown key lists the allowed keys."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            keys = allowed_keys(model, [str(p) for p in loc[:-1] if not isinstance(p, int)])
            msg = f"unknown key; allowed keys: {', '.join(keys)}"
        else:
            msg = error_text(err)
        lines.append(f"{source}: {_loc_path(prefix, loc)}: {msg}")
    return "; ".join(lines)


def read_yaml(path: Path) -> dict[str, Any]:
    """The YAML document in ``path`` (a mapping), or a ConfigError naming the file."""
    doc = yamlio.read(path, "experiment file")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: an experiment file must be a mapping of keys, got {type(doc).__name__}"
        )
    return doc


def _validate_run(doc: dict[str, Any], source: str, prefix: str) -> RunSpec:
    try:
        return RunSpec.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, RunSpec, source, prefix)) from None


def _check_paths(spec: ExperimentSpec, source: str) -> None:
    sweeps = [("sweep", spec.sweep)] + (
        [("quick.sweep", spec.quick.sweep)] if spec.quick.sweep else []
    )
    located = [(f"quick.set.{p}", p) for p in spec.quick.set]
    for where, sweep in sweeps:
        located += [(f"{where}.grid.{p}", p) for p in sweep.grid]
        located += [
            (f"{where}.zip[{i}].{p}", p) for i, group in enumerate(sweep.zip) for p in group
        ]
    for where, dotted_path in located:
        if dotted_path == "seed":
            raise ConfigError(f"{source}: {where}: the seed is set by the top-level 'seeds' list")
        problem = check_dotted_path(RunSpec, dotted_path)
        if problem is not None:
            raise ConfigError(f"{source}: {where}: {problem}")


def _check_sweep_values(spec: ExperimentSpec, source: str) -> None:
    """Each grid value alone, each zip row together: report errors located at the swept path."""
    settings: list[tuple[str, dict[str, Any]]] = []
    for path, values in spec.sweep.grid.items():
        settings += [(f"sweep.grid.{path}[{i}]", {path: v}) for i, v in enumerate(values)]
    for g, group in enumerate(spec.sweep.zip):
        length = len(next(iter(group.values())))
        for i in range(length):
            row = {path: values[i] for path, values in group.items()}
            settings += [(f"sweep.zip[{g}].{{path}}[{i}]", row)]
    for where, row in settings:
        try:
            RunSpec.model_validate(apply_overrides(spec.base, row))
        except ValidationError as exc:
            for err in exc.errors():
                loc_path = ".".join(str(p) for p in err["loc"])
                for path in row:
                    if loc_path == path or loc_path.startswith(path + "."):
                        raise ConfigError(
                            f"{source}: {where.format(path=path)}: {error_text(err)}"
                        ) from None


def _sweep_location(spec: ExperimentSpec, dotted_path: str, value: Any) -> str | None:
    if dotted_path in spec.sweep.grid:
        return f"sweep.grid.{dotted_path}[{spec.sweep.grid[dotted_path].index(value)}]"
    for g, group in enumerate(spec.sweep.zip):
        if dotted_path in group:
            return f"sweep.zip[{g}].{dotted_path}[{group[dotted_path].index(value)}]"
    return None


def validate_points(
    spec: ExperimentSpec, source: str, *, preflight: bool = True
) -> list[tuple[Point, RunSpec]]:
    """Every point validated as a full RunSpec with registered names, and (``preflight``)
    checked by ``preflight.py``: its files exist, its pool and blocks fit."""
    _check_paths(spec, source)
    _validate_run(spec.base, source, "base")
    _check_sweep_values(spec, source)
    validated = []
    for point in expand_points(spec):
        values = ", ".join(f"{p}={v}" for p, v in point.path_to_value.items())
        run_spec = _validate_run(point.run_doc, f"{source}: point {point.point_id} ({values})", "")
        for dotted_path, name, allowed, why in unknown_names(run_spec.model_dump(mode="json")):
            where = _sweep_location(spec, dotted_path, name) or f"base.{dotted_path}"
            if why is not None:
                raise ConfigError(f"{source}: {where}: {why.removeprefix(dotted_path + ': ')}")
            raise ConfigError(
                f"{source}: {where}: unknown name {name!r}; allowed: {', '.join(allowed)}"
            )
        validated.append((point, run_spec))
    return preflight_points(validated, source) if preflight else validated


def preflight_points(
    validated: list[tuple[Point, RunSpec]], source: str
) -> list[tuple[Point, RunSpec]]:
    """``validated`` (points :func:`validate_points` gave), each checked by
    ``preflight.py``: its files exist, its pool and blocks fit."""
    for point, run_spec in validated:
        values = ", ".join(f"{p}={v}" for p, v in point.path_to_value.items())
        named = f"point {point.point_id} ({values})" if values else "base"
        check_run(run_spec, f"{source}: {named}")
    return validated


def _check_charts(spec: ExperimentSpec, source: str) -> None:
    from pagesim.experiments.charts import CHART_KINDS

    stem_to_index: dict[str, int] = {}
    for i, chart in enumerate(spec.charts):
        stem = chart.file or chart.kind
        if stem in stem_to_index:
            raise ConfigError(
                f"{source}: charts[{i}].file: {stem!r} is also the file of "
                f"charts[{stem_to_index[stem]}]; give each chart a distinct 'file'"
            )
        stem_to_index[stem] = i
        axes = [("x", chart.x), ("series", chart.series), ("facet", chart.facet)]
        if chart.kind == "heatmap":
            axes.append(("y", chart.y))
        for role, column in axes:
            if column is not None and "." in column and column not in spec.sweep.swept_paths:
                raise ConfigError(
                    f"{source}: charts[{i}].{role}: {column!r} is not swept; swept paths: "
                    f"{', '.join(spec.sweep.swept_paths) or '(none)'}"
                )
        if chart.kind not in CHART_KINDS:
            raise ConfigError(
                f"{source}: charts[{i}].kind: unknown chart kind {chart.kind!r}; "
                f"allowed: {', '.join(sorted(CHART_KINDS))}"
            )


def dry_draw(spec: ExperimentSpec, source: str) -> None:
    """Draw every chart (and its caption) on a stand-in for the results the run will have
    (one row per point: its swept values and label, every metric 1.0), so that what would
    crash a chart after the runs is found before them. A chart that says why it cannot be
    drawn (ChartUnavailable) or reads the run's per-step files is not a crash."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from pagesim.experiments.chart_base import ChartContext, ChartUnavailable
    from pagesim.experiments.charts import CHART_KINDS
    from pagesim.experiments.summary import chart_caption
    from pagesim.simulator.result import METRIC_COLUMNS

    metrics = [*METRIC_COLUMNS, "request_goodput", "mem_sharing_saved_frac"]
    rows = [
        {"point": p.point_id, "label": p.label, **p.path_to_value, **dict.fromkeys(metrics, 1.0)}
        for p in expand_points(spec)
    ]
    ctx = ChartContext(spec, pd.DataFrame(rows), Path("."))
    for i, chart in enumerate(spec.charts):
        try:
            CHART_KINDS[chart.kind](ctx, chart)
            chart_caption(chart, ctx.results)
        except (ChartUnavailable, OSError):
            continue
        except Exception as exc:  # noqa: BLE001 - any other failure is what this finds
            raise ConfigError(
                f"{source}: charts[{i}] ({chart.kind}): would fail when drawn after the runs: "
                f"{type(exc).__name__}: {exc}"
            ) from None


def parse_experiment(doc: dict[str, Any], source: str) -> ExperimentSpec:
    """Validate a parsed document as an ExperimentSpec (schema only)."""
    try:
        return ExperimentSpec.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, ExperimentSpec, source, "")) from None


def load_experiment(
    source: str | Path, *, quick: bool = False, overrides: dict[str, Any] | None = None
) -> ExperimentSpec:
    """Read, check and return an experiment: a file path or a shipped experiment's name.

    ``quick`` applies the file's ``quick`` section; ``overrides`` (``--set``) map
    dotted base paths to values and are applied last. The returned spec has passed
    every check in the module docstring but the preflight.
    """
    return load_experiment_points(source, quick=quick, overrides=overrides)[0]


def set_flags(overrides: dict[str, Any]) -> str:
    """``overrides`` as the command line gave them: ``--set a=1 --set b=x``."""
    return " ".join(f"--set {path}={value}" for path, value in overrides.items())


def _check_override_values(base: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Each ``--set`` value on the file's base alone: one that makes a valid base invalid
    is the flag's error, and is reported as such (``--set PATH=VALUE: problem``), not as
    the file's."""
    try:
        RunSpec.model_validate(base)
    except ValidationError:
        return  # the file's own error, reported with the file's name
    for dotted_path, value in overrides.items():
        try:
            RunSpec.model_validate(apply_overrides(base, {dotted_path: value}))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            where = "" if loc == dotted_path else f"{loc or 'the spec'}: "
            raise ConfigError(
                f"{set_flags({dotted_path: value})}: {where}{error_text(err)}"
            ) from None


def load_experiment_points(
    source: str | Path, *, quick: bool = False, overrides: dict[str, Any] | None = None
) -> tuple[ExperimentSpec, list[tuple[Point, RunSpec]]]:
    """:func:`load_experiment`, and its points validated as RunSpecs (not preflighted):
    what ``run_experiment(..., points=...)`` takes, so that no point is validated twice."""
    from pagesim.experiments.shipped import resolve_experiment

    path = resolve_experiment(source)
    spec = parse_experiment(anchor_model_paths(read_yaml(path), path), str(path))
    _check_paths(spec, str(path))
    if quick:
        spec = spec.quick_variant()
    if overrides:
        swept = spec.sweep.swept_paths
        for dotted_path in overrides:
            problem = check_dotted_path(RunSpec, dotted_path)
            if problem is not None:
                raise ConfigError(f"--set {dotted_path}: {problem}")
            clash = [
                p for p in swept
                if p == dotted_path or p.startswith(dotted_path + ".")
                or dotted_path.startswith(p + ".")
            ]  # fmt: skip
            if clash:
                raise ConfigError(
                    f"--set {dotted_path}: {clash[0]} is swept in {path} (the sweep would "
                    "override it); edit the sweep instead"
                )
        _check_override_values(spec.base, overrides)
        spec = spec.model_copy(update={"base": apply_overrides(spec.base, overrides)})
    points = validate_points(spec, str(path), preflight=False)
    _check_charts(spec, str(path))
    return spec, points
