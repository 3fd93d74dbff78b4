"""ExperimentSpec: the schema of an experiment YAML file.

An experiment is a base RunSpec, a sweep over fields of it (by dotted path), a list
of seeds, a ``quick`` variant for a fast look, and the charts wanted::

    name: memory_waste
    description: KV memory breakdown per allocator (the paper's Figure 2)
    paper_figure: fig2
    base:                      # a RunSpec document (``pagesim validate`` checks it)
      hardware: {model: opt-13b, kv_slots: 15728}
      workload: {name: sharegpt, num_requests: 1000}
      arrivals: {process: poisson, rate_req_s: 2.0}
    sweep:
      grid:                    # cartesian product of these axes
        allocator.block_size: [16, 32]
      zip:                     # each group varies its paths together (equal lengths)
        - scheduler.kind: [orca, orca, orca, vllm]
          allocator.kind: [max, pow2, oracle, paged]
    seeds: [0, 1, 2]
    percentiles: [50, 90, 99]  # the p<q>_*_ms columns of the vLLM-named metrics
    slo: {ttft_ms: 500, tpot_ms: 100}  # adds request_goodput (and the goodput chart)
    quick:
      set: {workload.num_requests: 100}
    charts:
      - {kind: memory_breakdown}

The values of the first zip group, joined by ``+`` (``orca+max``), are a point's
``label`` (without zip groups: all its swept values), or those of the swept paths
``label_by`` lists (``label_by: [scheduler.kind, allocator.kind]`` names a system
whose request rates are zipped with it, so that its points share one label):
charts use it for legends and ``paper_targets.yaml`` keys the paper's numbers by
it. ``percentiles`` and ``slo`` hold for every run: they are copied into each run's
``metrics`` section (``metrics.percentiles``, ``metrics.slo``), where a run computes
its summary, so setting them differently in ``base.metrics`` as well is an error. Strictness comes from :class:`~pagesim.specbase.StrictSpec`: unknown keys and
wrong types are errors; every sweep point is validated as a full RunSpec by
:mod:`pagesim.experiments.validate` before anything runs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pagesim.simulator.spec import SloSpec
from pagesim.specbase import StrictSpec

#: Point labels join the zipped values with this.
LABEL_SEPARATOR = "+"


def _given(value: Any) -> Any:
    """A section without its unset (None) keys, to compare a document with its dump."""
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value


class SweepSpec(StrictSpec):
    """The points to run: the product of every ``grid`` axis and every ``zip`` group.

    ``grid`` maps a dotted RunSpec path to its values; ``zip`` is a list of groups,
    each mapping several paths to value lists of one common length that vary
    together (one axis of the product). An empty sweep is one point: the base.
    """

    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = Field(default_factory=list)

    @field_validator("grid")
    @classmethod
    def _non_empty_axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in grid.items():
            if not values:
                raise ValueError(f"grid axis {path!r} has no values")
        return grid

    @field_validator("zip")
    @classmethod
    def _equal_lengths(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for index, group in enumerate(groups):
            lengths = {path: len(values) for path, values in group.items()}
            if not group or len(set(lengths.values())) != 1 or 0 in lengths.values():
                raise ValueError(
                    f"zip group {index} needs one or more paths with value lists of one "
                    f"common, non-zero length; got lengths {lengths}"
                )
        return groups

    @property
    def swept_paths(self) -> list[str]:
        """Every swept path, zipped groups first (in file order), then grid axes."""
        return [path for group in self.zip for path in group] + list(self.grid)


class QuickSpec(StrictSpec):
    """What ``--quick`` changes: ``set`` overrides base fields by dotted path;
    ``sweep`` and ``seeds``, when given, replace the experiment's own."""

    set: dict[str, Any] = Field(default_factory=dict)
    sweep: SweepSpec | None = None
    seeds: list[int] | None = Field(default=None, min_length=1)

    @field_validator("seeds")
    @classmethod
    def _non_negative_seeds(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None and any(seed < 0 for seed in seeds):
            raise ValueError(f"seeds must be >= 0 (numpy seeds are non-negative), got {seeds}")
        return seeds


class ChartSpec(StrictSpec):
    """One chart to draw from the results (``kind`` names a function in
    :data:`pagesim.experiments.charts.CHART_KINDS`).

    ``x``, ``series`` and ``facet`` are swept paths or results columns (``label``
    included); ``y`` is a metric column (a heatmap's second axis); ``metric`` is a
    heatmap's colour. Each kind has defaults for those it needs; ``file`` is the
    PNG's stem (default: the kind).
    """

    kind: str
    file: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]+$")
    title: str | None = None
    x: str | None = None
    y: str | None = None
    series: str | None = None
    facet: str | None = None
    metric: str | None = None
    log_x: bool = False
    log_y: bool = False


class IntervalSpec(StrictSpec):
    """Intervals around every point (``docs/intervals.md``): each point runs ``replicates``
    times, replicate r one draw of the ``sources`` of spread (``seeds``: the seed is
    ``seeds[0] + r``; ``cost``, ``serving``: the profile's residuals, ``RunSpec.spread``);
    ``results.csv`` gets ``<metric>_lo`` / ``<metric>_hi``, the replicates' central
    ``nominal`` range, widened by the conformal factor the point's profile records for that
    coverage (``intervals:`` in the profile), raw where it records none."""

    nominal: float = Field(default=0.9, gt=0, lt=1)
    replicates: int = Field(default=20, ge=2)
    sources: list[Literal["seeds", "cost", "serving"]] = Field(
        default_factory=lambda: ["seeds", "cost", "serving"], min_length=1
    )


class ExperimentSpec(StrictSpec):
    """An experiment file: see the module docstring for an example."""

    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    description: str = ""
    paper_figure: str | None = None
    base: dict[str, Any] = Field(default_factory=dict)
    sweep: SweepSpec = SweepSpec()
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    quick: QuickSpec = QuickSpec()
    charts: list[ChartSpec] = Field(default_factory=list)
    percentiles: list[float] | None = Field(default=None, min_length=1)
    slo: SloSpec | None = None
    intervals: IntervalSpec | None = None
    label_by: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _label_paths_are_swept(self) -> ExperimentSpec:
        if self.label_by is None:
            return self
        sweeps = [("sweep", self.sweep)]
        if self.quick.sweep is not None:
            sweeps.append(("quick.sweep", self.quick.sweep))
        for where, sweep in sweeps:
            unswept = [p for p in self.label_by if p not in sweep.swept_paths]
            if unswept:
                raise ValueError(
                    f"label_by names paths {where} does not sweep: {unswept} "
                    f"(swept: {sweep.swept_paths})"
                )
        return self

    @model_validator(mode="before")
    @classmethod
    def _metrics_into_base(cls, doc: Any) -> Any:
        """Copy ``percentiles`` and ``slo`` into ``base.metrics`` (the runs read them there)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("base", {}), dict):
            return doc
        moved = {key: doc[key] for key in ("percentiles", "slo") if doc.get(key) is not None}
        if not moved:
            return doc
        base = dict(doc.get("base", {}))
        metrics = base.get("metrics", {})
        if not isinstance(metrics, dict):
            return doc
        for key, value in moved.items():
            if key in metrics and _given(metrics[key]) != _given(value):  # equal: a re-read dump
                raise ValueError(
                    f"{key} is given both at the top level and in base.metrics; keep one"
                )
        base["metrics"] = {**metrics, **moved}
        return {**doc, "base": base}

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        if any(seed < 0 for seed in seeds):
            raise ValueError(f"seeds must be >= 0 (numpy seeds are non-negative), got {seeds}")
        return seeds

    def quick_variant(self) -> ExperimentSpec:
        """This experiment with the ``quick`` overrides applied (used by ``--quick``)."""
        from pagesim.experiments.paths import apply_overrides

        return self.model_copy(
            update={
                "base": apply_overrides(self.base, self.quick.set),
                "sweep": self.quick.sweep if self.quick.sweep is not None else self.sweep,
                "seeds": self.quick.seeds if self.quick.seeds is not None else self.seeds,
            }
        )
