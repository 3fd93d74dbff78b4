"""Expanding an experiment's sweep into points, and points × seeds into runs.

A *point* is one combination of swept values (``p000``, ``p001``, ... in product
order: zip groups first, in file order, then grid axes, the last axis varying
fastest). A *run* is a point at one seed; its RunSpec is the base document with
the point's values and ``seed`` applied. Expansion is pure and deterministic.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from pagesim.experiments.paths import apply_overrides
from pagesim.experiments.spec import LABEL_SEPARATOR, ExperimentSpec


@dataclass(frozen=True)
class Point:
    """One sweep combination: ``path_to_value`` in swept-path order, and its label."""

    index: int
    path_to_value: dict[str, Any]
    label: str
    run_doc: dict[str, Any]

    @property
    def point_id(self) -> str:
        return f"p{self.index:03d}"


@dataclass(frozen=True)
class Run:
    """One simulation: a point at a seed (``run_id`` names its output files)."""

    point: Point
    seed: int
    run_doc: dict[str, Any]

    @property
    def run_id(self) -> str:
        return f"{self.point.point_id}_seed{self.seed}"


def _axes(spec: ExperimentSpec) -> list[list[dict[str, Any]]]:
    """Each axis as its list of ``{path: value}`` settings (a zip group is one axis)."""
    axes = []
    for group in spec.sweep.zip:
        length = len(next(iter(group.values())))
        axes.append([{path: values[i] for path, values in group.items()} for i in range(length)])
    for path, values in spec.sweep.grid.items():
        axes.append([{path: value} for value in values])
    return axes


def _label(spec: ExperimentSpec, path_to_value: dict[str, Any]) -> str:
    """The values of ``label_by``, else of the first zip group, else of every swept path,
    joined by ``+``."""
    if spec.label_by is not None:
        paths = list(spec.label_by)
    else:
        paths = list(spec.sweep.zip[0]) if spec.sweep.zip else list(spec.sweep.grid)
    return LABEL_SEPARATOR.join(str(path_to_value[p]) for p in paths) or spec.name


def expand_points(spec: ExperimentSpec) -> list[Point]:
    """Every point of the sweep, in a fixed order (one point for an empty sweep)."""
    points = []
    for index, combo in enumerate(itertools.product(*_axes(spec))):
        path_to_value: dict[str, Any] = {}
        for setting in combo:
            path_to_value.update(setting)
        run_doc = apply_overrides(spec.base, path_to_value)
        points.append(Point(index, path_to_value, _label(spec, path_to_value), run_doc))
    return points


def expand_runs(spec: ExperimentSpec) -> list[Run]:
    """Every (point, seed) pair, points outermost."""
    return [
        Run(point, seed, {**point.run_doc, "seed": seed})
        for point in expand_points(spec)
        for seed in spec.seeds
    ]
