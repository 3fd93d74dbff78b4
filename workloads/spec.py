"""Spec sections owned by the workloads layer: which requests, and when they arrive."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pagesim.specbase import Registered
from pagesim.specbase import StrictSpec as _Spec


class LengthDist(_Spec):
    """A synthetic token-length distribution (used by the ``synthetic`` workload).

    fixed: always ``mean``; uniform: integers in [low, high]; lognormal: mean and
    ``cv`` (std / mean); zipf: exponent ``a`` > 1, scaled so the mean is ``mean`` and
    clipped to [low, high].
    """

    dist: Literal["fixed", "uniform", "lognormal", "zipf"] = "fixed"
    mean: float = Field(default=128.0, gt=0)
    cv: float = Field(default=1.0, gt=0)
    a: float = Field(default=2.0, gt=1)
    low: int = Field(default=1, ge=1)
    high: int = Field(default=2048, ge=1)


class WorkloadSpec(_Spec):
    """Which requests, and how they share content.

    ``name`` is a registered workload (``pagesim workload list`` shows them: ``sharegpt``
    (every human->gpt pair), ``sharegpt-first-turn``, ``sharegpt-chat``, ``alpaca``,
    ``alpaca-like`` (synthetic), ``azure-conv``, ``azure-code``, ``synthetic`` (uses
    ``prompt`` / ``output``), ``csv`` (a timestamped CSV at ``path``, either Azure
    2023 layout). ``alpaca``, ``azure-conv`` and ``azure-code`` are external data: they
    read the table that ``pagesim workload prepare NAME --source FILE`` wrote into the
    data folder (``$PAGESIM_DATA``, default ``~/.local/share/pagesim``), or ``path``
    when given. For every table workload ``path`` replaces the table: a prepared
    ``.npz`` or the raw downloaded file; relative paths are from the working
    directory. ``num_requests`` requests are sampled (``replace``:
    with replacement) unless ``duration_s`` is given, in which case requests arrive
    until that time. Filters drop requests whose prompt or output is under
    ``min_len`` tokens, whose prompt exceeds ``max_prompt_len``, or whose prompt +
    output exceeds the run's ``max_model_len``; every drop is counted and reported.
    """

    name: Annotated[str, Registered("pagesim.workloads.registry", "WORKLOADS", "workload")] = (
        "sharegpt"
    )
    path: str | None = None
    num_requests: int | None = Field(default=1000, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    replace: bool = True
    min_len: int = Field(default=4, ge=1)
    max_prompt_len: int | None = Field(default=1024, ge=1)
    n: int = Field(default=1, ge=1)
    beam_width: int = Field(default=1, ge=1)
    shared_prefix_len: int = Field(default=0, ge=0)
    prompt: LengthDist = LengthDist()
    output: LengthDist = LengthDist()

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.n > 1 and self.beam_width > 1:
            raise ValueError("n > 1 and beam_width > 1 cannot be combined")
        return self


class ArrivalSpec(_Spec):
    """When requests arrive.

    poisson: exponential gaps at ``rate_req_s``; gamma: gamma gaps with mean
    1 / ``rate_req_s`` and coefficient of variation ``cv`` (cv > 1 is bursty);
    replay: the trace's own timestamps divided by ``time_scale`` (2 = twice as fast);
    burst: everything at t = 0.
    """

    process: Literal["poisson", "gamma", "replay", "burst"] = "poisson"
    rate_req_s: float | None = Field(default=1.0, gt=0)
    cv: float = Field(default=1.0, gt=0)
    time_scale: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> ArrivalSpec:
        if self.process in ("poisson", "gamma") and self.rate_req_s is None:
            raise ValueError(f"arrivals.rate_req_s is required for process {self.process!r}")
        return self
