"""What a dataset's reader hands the pipeline: runs with their settings and roles, and
the cost models to replay them under."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pagesim.records.run import MeasuredRun


@dataclass(frozen=True)
class ValidationRun:
    """One real run, the settings its server ran with and its role in the validation."""

    run: MeasuredRun
    #: which launch of the server (a set of settings) it ran under
    launch: str
    #: fit | held_out | cross_launch (vcsv.ROLES)
    role: str
    #: the RunSpec document of its replay, but ``hardware.profile`` (the cost model's)
    settings: dict[str, Any]
    #: why the run has its launch (the manifest's evidence)
    evidence: str = ""
    #: the requests to replay, when the records alone do not give them (token ids)
    trace: Any = None
    #: what the dataset's reader keeps about the run (pools, names)
    info: dict[str, Any] = field(default_factory=dict)
    #: the requests drawn again from the run's own generator with another seed (the
    #: intervals' ``seeds`` source); None where the records fix the requests
    redraw: Callable[[int], Any] | None = None

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def rate(self) -> float:
        return self.run.rate_req_s


@dataclass(frozen=True)
class CostModelChoice:
    """A cost model the runs are replayed under: a profile reference (None: analytic)."""

    name: str
    profile: str | None
    headline: bool = False
    #: what the page says of it (its description is added by the pipeline)
    note: str = ""
    #: a profile per run, where each run needs its own (its GPU's, its model's)
    per_run: dict[str, str | None] = field(default_factory=dict)
    #: builds a run's cost model object instead of a profile's (``simulate``'s
    #: ``cost_model``: the run's recorded step times, ``costmodel/recorded.py``)
    make: Callable[[ValidationRun], Any] | None = None
    #: the runs it replays (None: every run), for a cost model built for some of them
    runs: frozenset[str] | None = None
    #: chosen after a replay of these runs had been seen: its rows' role is ``post_hoc``
    post_hoc: bool = False
    #: scheduler settings it replays with instead of the run's (a variant's rule, e.g.
    #: ``{"async_scheduling": True}``)
    scheduler: dict[str, Any] = field(default_factory=dict)
    #: per run, hardware settings it replays with instead of the run's (a variant's link,
    #: e.g. ``{"link": {...}}``)
    hardware: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: RunSpec settings (dotted paths) it replays every run with, over the run's own
    #: (a manifest variant's: ``server.host_profile``, ``hardware.kv_slots``, ...)
    settings: dict[str, Any] = field(default_factory=dict)
    #: runs something of this cost model was fitted on: their rows' role is ``fit``
    fit_runs: frozenset[str] = frozenset()

    def profile_for(self, run: str) -> str | None:
        return self.per_run.get(run, self.profile)

    def replays(self, run: str) -> bool:
        return self.runs is None or run in self.runs

    def role(self, vrun: ValidationRun) -> str:
        """The role of this cost model's rows for ``vrun`` (vcsv.ROLES)."""
        if self.post_hoc:
            return "post_hoc"
        return "fit" if vrun.name in self.fit_runs else vrun.role


@dataclass
class Study:
    """A dataset read and ready to replay."""

    dataset: str
    title: str
    runs: list[ValidationRun]
    cost_models: list[CostModelChoice]
    #: the command that regenerates the page, as the page prints it
    command: str = ""
    #: dataset-specific page sections (markdown lines), filled by the reader
    sections: list[str] = field(default_factory=list)
    #: the reader's own objects the page sections need (fits, pools)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the TTFT p50 (s) whose crossing defines saturation
    saturation_ttft_s: float = 1.0
    #: how intervals are made (the manifest's ``intervals``; None: no intervals)
    intervals: Any = None

    @property
    def headline(self) -> CostModelChoice:
        return next(c for c in self.cost_models if c.headline)
