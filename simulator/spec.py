"""RunSpec: everything one simulation needs, validated strictly.

A run is a pure function of its RunSpec (the seed included): same spec, same bytes
out. Specs are frozen pydantic models: an unknown key or a wrong type is an error
that names the key (``extra="forbid"``, ``strict=True``; pagesim reads YAML numbers as YAML 1.2 does,
so ``1e3`` is the float 1000.0, refused by integer keys with a message). Names of models, GPUs and workloads are
checked against their registries by the layers that own them when a run is built.

Sections (each a field of RunSpec, and a prefix for sweeps, e.g.
``allocator.block_size``): ``workload``, ``arrivals``, ``hardware``, ``allocator``,
``scheduler``, ``metrics``, plus ``seed``, ``max_model_len``, ``max_sim_time_s``,
``check_invariants``, ``engine``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError
from pagesim.specbase import StrictSpec as _Spec
from pagesim.specbase import format_validation_error
from pagesim.workloads.spec import ArrivalSpec, LengthDist, WorkloadSpec

__all__ = [
    "AllocatorSpec",
    "ArrivalSpec",
    "HardwareSpec",
    "LengthDist",
    "MetricsSpec",
    "RunSpec",
    "SchedulerSpec",
    "WorkloadSpec",
    "run_spec_from_dict",
]


class HardwareSpec(_Spec):
    """The model and the GPU(s) it is served on, and how big the KV pool is.

    The KV budget is ``gpu_memory_utilization`` × GPU memory × TP − weights −
    activation reserve, unless given directly as ``kv_budget_gib`` or
    ``kv_slots`` (the paper's Table 1 budgets). ``profile`` is a profile YAML path or
    a shipped profile name; None uses the analytic (roofline) profile of ``gpu``.
    """

    model: str = "opt-13b"
    gpu: str = "a100-40gb"
    tensor_parallel: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_budget_gib: float | None = Field(default=None, gt=0)
    kv_slots: int | None = Field(default=None, ge=1)
    profile: str | None = None

    @model_validator(mode="after")
    def _check(self) -> HardwareSpec:
        if self.kv_budget_gib is not None and self.kv_slots is not None:
            raise ValueError("give at most one of hardware.kv_budget_gib and hardware.kv_slots")
        return self


class SchedulerSpec(_Spec):
    """The batching policy.

    vllm: vLLM v0 (max_num_seqs, max_num_batched_tokens, preemption ``auto`` = recompute
    single-sequence groups and swap multi-sequence ones). orca: iteration-level,
    prefill and decode mixed, no preemption. static: request-level batches of up to
    ``max_batch_size`` (None: as many as memory allows).
    """

    kind: Literal["vllm", "orca", "static"] = "vllm"
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=2560, ge=1)
    preemption_mode: Literal["auto", "recompute", "swap"] = "auto"
    max_batch_size: int | None = Field(default=None, ge=1)


class MetricsSpec(_Spec):
    """What the run records: a time series sampled every ``sample_interval_s`` of
    simulated time (time-weighted means within each window), or every step when
    ``every_step`` (memory then grows with the number of steps)."""

    sample_interval_s: float = Field(default=1.0, gt=0)
    every_step: bool = False


class RunSpec(_Spec):
    workload: WorkloadSpec = WorkloadSpec()
    arrivals: ArrivalSpec = ArrivalSpec()
    hardware: HardwareSpec = HardwareSpec()
    allocator: AllocatorSpec = AllocatorSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    metrics: MetricsSpec = MetricsSpec()
    seed: int = Field(default=0, ge=0)
    max_model_len: int = Field(default=2048, ge=1)
    max_sim_time_s: float | None = Field(default=None, gt=0)
    check_invariants: bool = False
    #: "fast": the event-driven engine (simulator.fastengine) where it applies, else the
    #: step engine; "step": the SimPy step-by-step reference. Same results either way.
    engine: Literal["step", "fast"] = "fast"

    @model_validator(mode="after")
    def _check(self) -> RunSpec:
        sched, alloc = self.scheduler.kind, self.allocator.kind
        if sched == "vllm" and alloc != "paged":
            raise ValueError(f"scheduler 'vllm' needs allocator 'paged', got {alloc!r}")
        if sched in ("orca", "static") and alloc == "paged":
            raise ValueError(
                f"scheduler {sched!r} needs a contiguous allocator (max, pow2 or oracle): "
                "it never preempts, so a paged pool could run out under a running request"
            )
        return self


def run_spec_from_dict(doc: dict[str, Any], source: str = "<spec>") -> RunSpec:
    """Validate a plain dict (e.g. parsed YAML) into a RunSpec, with a readable error."""
    from pydantic import ValidationError

    try:
        return RunSpec.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
