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
    (every human->gpt pair), ``sharegpt-first-turn``, ``sharegpt-chat``,
    ``sharegpt-paper`` (the PagedAttention artifact's exact ShareGPT lengths),
    ``alpaca``, ``alpaca-5000`` (the Alpaca authors' real 5,000-record sample, which the
    paper experiments use), ``alpaca-like`` (synthetic), ``azure-conv``, ``azure-code``,
    ``synthetic`` (uses ``prompt`` / ``output``), ``csv`` (a timestamped CSV at
    ``path``, either Azure 2023 layout). ``sharegpt-paper``, ``alpaca``, ``alpaca-5000``,
    ``azure-conv`` and ``azure-code`` are external data: they read the table that
    ``pagesim workload prepare NAME --source FILE`` wrote into the data folder
    (``$PAGESIM_DATA``, default ``~/.local/share/pagesim``), or ``path`` when given
    (for ``sharegpt-paper``: the artifact's
    ``datasets/sharegpt_opt_text_completion_length.pkl`` from GitHub
    ``sosp-ae-39/sosp-ae-astra``, read with an unpickler that refuses every global, or
    a CSV ``input_len,output_len``). For every table workload ``path`` replaces the table: a prepared
    ``.npz`` or the raw downloaded file; relative paths are from the working
    directory. ``num_requests`` requests are sampled (``replace``:
    with replacement) unless ``duration_s`` is given, in which case requests arrive
    until that time. Filters drop requests whose prompt or output is under
    ``min_len`` tokens, whose prompt exceeds ``max_prompt_len``, or whose prompt +
    output exceeds the run's ``max_model_len``; every drop is counted and reported.

    ``selection`` says how requests are chosen from a table workload: ``sample``
    (the above), or ``artifact``, the PagedAttention artifact's generator
    (``astra/benchmark/trace.py``): the one filter prompt + output < ``max_model_len``
    (2048 in the paper; rows with an empty output or prompt, which cannot be requests,
    are dropped too and counted), then the kept rows in file order, repeated until there are as
    many as requests, cut to that number, and shuffled. ``min_len``, ``max_prompt_len``
    and ``replace`` do not apply to it (changing them with it is an error); it needs
    a non-chat table workload and generated arrivals (with ``quantized-poisson`` it is
    the artifact's whole request generator).
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
    selection: Literal["sample", "artifact"] = "sample"

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.n > 1 and self.beam_width > 1:
            raise ValueError("n > 1 and beam_width > 1 cannot be combined")
        if self.selection == "artifact":
            # By value, not by "was it given": a dumped spec (experiment.json) re-reads.
            unused = [
                key
                for key in ("min_len", "max_prompt_len", "replace")
                if getattr(self, key) != type(self).model_fields[key].default
            ]
            if unused:
                raise ValueError(
                    "workload.selection 'artifact' applies only prompt + output < max_model_len; "
                    f"leave {', '.join('workload.' + u for u in unused)} at the default"
                )
        return self


class ArrivalSpec(_Spec):
    """When requests arrive.

    poisson: exponential gaps at ``rate_req_s``; gamma: gamma gaps with mean
    1 / ``rate_req_s`` and coefficient of variation ``cv`` (cv > 1 is bursty);
    quantized-poisson: the PagedAttention artifact's arrivals — time cut into quanta
    of ``quantum_s`` (the artifact's 10 ms) over ``workload.duration_s`` (required),
    a Poisson count with mean ``rate_req_s`` × ``quantum_s`` per quantum, every
    request of quantum i arriving at i × ``quantum_s`` (the number of requests is
    random; ``quantum_s`` other than its default is an error with any other process);
    replay: the trace's own timestamps divided by ``time_scale`` (2 = twice
    as fast); burst: everything at t = 0.
    """

    process: Annotated[
        str, Registered("pagesim.workloads.arrivals", "ARRIVAL_PROCESSES", "arrival process")
    ] = "poisson"
    rate_req_s: float | None = Field(default=1.0, gt=0)
    cv: float = Field(default=1.0, gt=0)
    time_scale: float = Field(default=1.0, gt=0)
    quantum_s: float = Field(default=0.01, gt=0)

    @model_validator(mode="after")
    def _check(self) -> ArrivalSpec:
        from pagesim.workloads.arrivals import ARRIVAL_PROCESSES

        if ARRIVAL_PROCESSES[self.process].draws_at_rate and self.rate_req_s is None:
            raise ValueError(f"arrivals.rate_req_s is required for process {self.process!r}")
        default_quantum_s = type(self).model_fields["quantum_s"].default
        if self.quantum_s != default_quantum_s and self.process != "quantized-poisson":
            raise ValueError(
                f"arrivals.quantum_s is read by process 'quantized-poisson' only, "
                f"not by {self.process!r}"
            )
        return self
