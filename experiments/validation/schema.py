"""A dataset's manifest: the server, its runs and their roles, the headline and the variants.

One schema for every dataset a validation reads (``docs/validation.md`` for how a run is
validated): a shipped dataset's manifest lives in ``experiments/validation/manifests/``, a
user's beside their runs. Written before any closed-loop result is looked at, and read
strictly: an unknown key or a wrong type names the key and the file.

- ``server``: what ran (model by shipped name, Hugging Face id or ``config.json`` path; GPU;
  vLLM release; the ``vllm serve`` flags as one string; TP) and, where the server logged it,
  its KV pool (checked against the pool model, used only by a variant that says so);
- ``reader``: the records' format (``pagesim.records``), ``runs``: where the runs are
  (a glob of run folders or files under the data folder; a run's name is its path there);
- ``roles``: the fit runs (default: none, every run held out);
- ``variants``: the cost models replayed, each with what it changes, the commit that decided
  it and whether it was decided after its runs had been seen (``post_hoc``); exactly one is
  the headline;
- ``goals``: the targets the page scores, each on one cost model's rows of one regime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from pagesim import yamlio
from pagesim.errors import ConfigError
from pagesim.specbase import StrictSpec, format_validation_error

#: where the shipped manifests are
MANIFESTS = Path(__file__).resolve().parent / "manifests"
REGIMES = ("below_saturation", "saturated", "all")


class Match(StrictSpec):
    """How a data folder is recognised as this dataset: a JSON file in it and the values
    of some of its keys (e.g. ``server_config.json``'s ``model`` and ``vllm_version``)."""

    file: str
    keys: dict[str, Any] = Field(default_factory=dict)


class Server(StrictSpec):
    description: str
    model: str
    gpu: str
    vllm_version: str | None = None
    args: str = ""
    tensor_parallel: int = Field(default=1, ge=1)
    #: the GPU blocks the server logged at start-up (None: not logged)
    logged_pool_blocks: int | None = Field(default=None, ge=1)
    logged_pool_source: str = ""


class Variant(StrictSpec):
    """One cost model the runs are replayed under.

    ``rule: unseen`` is the headline rule for a server pagesim has not seen
    (``simulator/costmodel/headline_rule.py``); otherwise ``profile`` names the step profile.
    ``settings`` are RunSpec overrides (dotted paths), ``logged_pool`` replays with the pool
    the server logged, ``serving_fit`` fits a serving path on those runs (they become role
    ``fit`` for this variant)."""

    name: str
    headline: bool = False
    rule: Literal["unseen"] | None = None
    profile: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    logged_pool: bool = False
    serving_fit: list[str] = Field(default_factory=list)
    decided_at: str
    post_hoc: bool = False
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> Variant:
        if self.rule is not None and self.profile is not None:
            raise ValueError(f"variant {self.name!r}: give rule or profile, not both")
        return self


class GoalSpec(StrictSpec):
    """A target: on ``cost_model``'s rows (default the headline) of the runs with ``roles``
    in ``regime``, every ``metric`` ``stat`` error within ±``bound``."""

    metric: Literal["ttft", "tpot", "e2e"]
    stat: Literal["p50", "p90", "mean"] = "p50"
    bound: float = Field(gt=0)
    regime: Literal["below_saturation", "saturated", "all"] = "below_saturation"
    cost_model: str | None = None
    roles: list[Literal["fit", "held_out", "cross_launch"]] = Field(
        default_factory=lambda: ["held_out"]
    )


class DatasetManifest(StrictSpec):
    dataset: str
    title: str
    origin: str
    repository: str
    commit: str
    licence: str = ""
    protocol: str = ""
    match: Match
    reader: str
    runs: str
    server: Server
    fit: list[str] = Field(default_factory=list)
    variants: list[Variant] = Field(min_length=1)
    goals: list[GoalSpec] = Field(default_factory=list)
    saturation_ttft_s: float = Field(default=1.0, gt=0)
    pool_goal: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> DatasetManifest:
        heads = [v.name for v in self.variants if v.headline]
        if len(heads) != 1:
            raise ValueError(f"variants: exactly one must be the headline, got {heads or 'none'}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names must be distinct, got {names}")
        for goal in self.goals:
            if goal.cost_model is not None and goal.cost_model not in names:
                raise ValueError(f"goals: cost_model {goal.cost_model!r} is not one of {names}")
        if any(v.logged_pool for v in self.variants) and self.server.logged_pool_blocks is None:
            raise ValueError("a variant replays the logged pool: give server.logged_pool_blocks")
        return self

    @property
    def headline(self) -> Variant:
        return next(v for v in self.variants if v.headline)


def load_dataset_manifest(path: str | Path) -> DatasetManifest:
    path = Path(path)
    doc = yamlio.read(path, "dataset manifest")
    try:
        return DatasetManifest.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from None


def shipped_manifests() -> list[Path]:
    return sorted(MANIFESTS.glob("*.yaml"))
