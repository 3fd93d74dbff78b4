"""RunSpec: everything one simulation needs, validated strictly.

A run is a pure function of its RunSpec (the seed included): same spec, same bytes
out. Specs are frozen pydantic models: an unknown key or a wrong type is an error
that names the key (``extra="forbid"``, ``strict=True``; pagesim reads YAML numbers as YAML 1.2 does,
so ``1e3`` is the float 1000.0, refused by integer keys with a message). Names of models, GPUs and workloads are
checked against their registries by the layers that own them when a run is built.

Sections (each a field of RunSpec, and a prefix for sweeps, e.g.
``allocator.block_size``): ``workload``, ``arrivals``, ``hardware``, ``allocator``,
``scheduler``, ``metrics``, ``server``, ``cluster`` and ``disaggregation`` (a fleet:
``simulator/fleet/spec.py``), plus ``seed``, ``max_model_len``, ``max_sim_time_s``,
``check_invariants``.

Plug-in names (``scheduler.kind``, ``allocator.kind``, ``allocator.placement``) are
checked against the dicts that register the plug-ins, and which allocators a
scheduler runs on comes from the two classes (``Scheduler.needs_paged`` and
``KVAllocator.is_paged``; ``kv_interface``, the verbs they speak, on both): adding a
plug-in is one file and one line in its dict.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError
from pagesim.simulator.fleet.spec import ClusterSpec, DisaggregationSpec
from pagesim.simulator.schedulers.spec import SchedulerSpec
from pagesim.specbase import StrictSpec as _Spec
from pagesim.specbase import format_validation_error
from pagesim.workloads.spec import ArrivalSpec, LengthDist, WorkloadSpec

__all__ = [
    "AllocatorSpec",
    "ArrivalSpec",
    "ClusterSpec",
    "DisaggregationSpec",
    "HardwareSpec",
    "LengthDist",
    "LinkSpec",
    "MetricsSpec",
    "RunSpec",
    "SchedulerSpec",
    "ServerSpec",
    "SloSpec",
    "SpreadSpec",
    "WorkloadSpec",
    "pairing_problem",
    "run_spec_from_dict",
]


class LinkSpec(_Spec):
    """The GPU-to-GPU link as the server's own all-reduce measures it, for tensor parallelism.

    pagesim prices each of a layer's two all-reduces of the step's T x hidden activations as
    ``2 (TP - 1) / TP x bytes / bus_bw + latency``: the ring formula by which NCCL's
    ``all_reduce_perf`` (nccl-tests) reports its ``busbw``, so its figures go here as they are
    printed: ``bus_bw_gbps`` the bus bandwidth at the sizes a step moves (megabytes), and
    ``latency_us`` the time of a small all-reduce. Without ``hardware.link`` the GPU spec's link
    bandwidth (NVLink, or PCIe on the RTX parts) and 10 us are used. ``source`` says where the
    figures come from; the cost model's description repeats it. ``pagesim calibrate link LOG``
    fits both on an ``all_reduce_perf`` log and prints this block.
    """

    bus_bw_gbps: float = Field(gt=0)
    latency_us: float = Field(ge=0)
    source: str = "hardware.link"


class HardwareSpec(_Spec):
    """The model and the GPU(s) it is served on, and how big the KV pool is.

    ``model`` is a shipped name (``pagesim list``), a Hugging Face id of one
    (``meta-llama/Llama-3.1-8B-Instruct``), or the path of a model's ``config.json`` (a dense
    decoder: ``simulator/hf_config.py``), resolved relative to the experiment or manifest
    file that gives it; the model's name (the config's ``_name_or_path``, else the path) is
    what the run's notes and pages name.

    The KV budget is ``gpu_memory_utilization`` × GPU memory × TP − weights −
    activation reserve (``simulator/memory.py``; with ``server.vllm_version``, as that
    release sizes it: ``simulator/vllm_pool.py``), unless given directly as
    ``kv_budget_gib`` or ``kv_slots`` (the paper's Table 1 budgets), which override.
    ``gpu_memory_utilization`` left out is the named release's default (0.92 from vLLM
    0.21.0, 0.9 before), or 0.9 without a release. ``profile`` is a profile YAML path or
    a shipped profile name; None uses the analytic (roofline) profile of ``gpu``.
    ``link`` is the server's measured all-reduce at tensor parallelism (:class:`LinkSpec`).
    ``kv_cache_dtype`` is vLLM's ``--kv-cache-dtype``: ``auto`` stores K and V in the
    model's dtype; the fp8 forms (1 byte) halve a 16-bit model's KV bytes per token, so the
    same budget holds twice the tokens (``simulator/memory.py``). Only the pool's size
    follows it: step costs stay as the profile priced them.

    OPT-13B on one A100-40GB: the paper's text gives 15.7K slots (``kv_slots: 15728``);
    its artifact's memory analyser (``cacheflow/models/memory_analyzer.py``) gave 998
    blocks of 16 (``kv_slots: 15968``): (0.95 x 42,505,273,344 B of GPU memory - 25.7 GB
    of weights - 0.5 GB of activations for 2560 batched tokens - 1 GiB of workspace)
    / 13,107,200 B per 16-token block. The artifact's swap space was 20 GiB
    (``allocator.swap_space_gib: 20``).
    """

    model: str = "opt-13b"
    gpu: str = "a100-40gb"
    tensor_parallel: int = Field(default=1, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_budget_gib: float | None = Field(default=None, gt=0)
    kv_slots: int | None = Field(default=None, ge=1)
    profile: str | None = None
    link: LinkSpec | None = None
    kv_cache_dtype: Literal[
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"
    ] = "auto"

    @model_validator(mode="after")
    def _check(self) -> HardwareSpec:
        if self.kv_budget_gib is not None and self.kv_slots is not None:
            raise ValueError("give at most one of hardware.kv_budget_gib and hardware.kv_slots")
        return self


class ServerSpec(_Spec):
    """The serving engine's release (``simulator/vllm_releases.py``, docs/vllm_versions.md).

    ``vllm_version`` (e.g. ``"0.23.0"``): the release's rules apply where pagesim models
    them (its KV pool sizing, scheduler defaults and step rules); None keeps pagesim's
    own defaults. A named release runs vLLM's V1 engine (``scheduler.kind: vllm-v1``), and
    its steps run as that release runs them (``simulator/costmodel/release.py``): CUDA graphs
    (padding a step to the next captured size) unless ``enforce_eager`` (vLLM's
    ``--enforce-eager``), and the host's time per step overlapping the GPU's under async
    scheduling, added without it. ``host_profile`` (a shipped profile name or a path) is the
    profile whose ``step_overhead`` is that host time; None: the step profile's own
    ``step_overhead`` where its sum holds one, else none. Both need a version."""

    vllm_version: str | None = None
    enforce_eager: bool = False
    host_profile: str | None = None

    @field_validator("vllm_version")
    @classmethod
    def _check_version(cls, version: str | None) -> str | None:
        if version is not None:
            from pagesim.simulator.vllm_releases import check_modelled

            try:
                check_modelled(version)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("server.vllm_version: ")) from None
        return version

    @model_validator(mode="after")
    def _check_needs_version(self) -> ServerSpec:
        for key, is_set in (
            ("enforce_eager", self.enforce_eager),
            ("host_profile", self.host_profile is not None),
        ):
            if is_set and self.vllm_version is None:
                raise ValueError(
                    f"server.{key} is a rule of a named vLLM release's steps: give "
                    "server.vllm_version too"
                )
        return self


class SloSpec(_Spec):
    """Service-level objectives of ``request_goodput`` (as ``vllm bench serve --goodput``):
    a finished request is good when its TTFT, TPOT and end-to-end latency are each at
    most the bound given (a bound left out is not checked; TPOT counts as 0 for a
    one-token output)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2el_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None:
            raise ValueError("slo needs at least one of ttft_ms, tpot_ms, e2el_ms")
        return self


class MetricsSpec(_Spec):
    """What the run records and reports.

    A time series sampled every ``sample_interval_s`` of simulated time
    (time-weighted means within each window), or every step when ``every_step``
    (memory then grows with the number of steps). Beside pagesim's own metrics, the
    summary carries ``vllm bench serve``'s (docs/metrics.md): ``percentiles`` are the
    ``p<q>_*_ms`` columns it adds (vLLM's ``--metric-percentiles``, default 99; kept
    sorted), and ``slo``, when given, adds ``request_goodput``. An experiment usually
    sets both at its top level (``percentiles:``, ``slo:``) for all its runs.

    ``reducers`` names reductions of the time series to add to the run's metrics
    (``simulator/reducers.py``, docs/metrics.md): ``time-weighted`` (pagesim's own,
    the summary's memory fractions), ``artifact-fig2``, ``artifact-fig13``,
    ``artifact-fig15`` (as the PagedAttention artifact's plots average: plain means
    over scheduler steps in a window of time; these need ``every_step: true``). Each
    adds columns prefixed with its name (``artifact_fig2_mem_token_frac``, ...,
    ``artifact_fig2_num_steps``), so every number says which reducer made it; a run
    with no step in a reducer's window is an error.
    """

    sample_interval_s: float = Field(default=1.0, gt=0)
    every_step: bool = False
    percentiles: list[float] = Field(default_factory=lambda: [99.0], min_length=1)
    slo: SloSpec | None = None
    reducers: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_reducers(self) -> MetricsSpec:
        from pagesim.simulator.reducers import REDUCERS

        unknown = [name for name in self.reducers if name not in REDUCERS]
        if unknown:
            raise ValueError(
                f"unknown reducer {unknown[0]!r} in metrics.reducers; known: {', '.join(REDUCERS)}"
            )
        if len(set(self.reducers)) != len(self.reducers):
            raise ValueError(f"metrics.reducers must be distinct, got {self.reducers}")
        per_step = [name for name in self.reducers if REDUCERS[name].needs_every_step]
        if per_step and not self.every_step:
            raise ValueError(
                f"metrics.reducers {', '.join(per_step)} average over scheduler steps: "
                "set metrics.every_step: true"
            )
        return self

    @field_validator("percentiles")
    @classmethod
    def _check_percentiles(cls, percentiles: list[float]) -> list[float]:
        if any(not 0 <= q <= 100 for q in percentiles) or len(set(percentiles)) != len(percentiles):
            raise ValueError(f"percentiles must be distinct and in [0, 100], got {percentiles}")
        return sorted(percentiles)


class SpreadSpec(_Spec):
    """One replicate of an interval (``docs/intervals.md``): which sources of spread vary.

    ``cost``: each kernel term of the profile that keeps held-out residuals is multiplied by
    one draw from them; ``serving``: the serving path's step cost and front-end delay, by
    draws from its fit residuals (``simulator/costmodel/spread.py``); ``seeds``: the run's
    seed varies across replicates (set by whoever makes the replicates, e.g. the runner).
    ``replicate`` picks the draw: the same (seed, replicate) always draws the same."""

    sources: list[Literal["seeds", "cost", "serving"]] = Field(min_length=1)
    replicate: int = Field(default=0, ge=0)


class RunSpec(_Spec):
    workload: WorkloadSpec = WorkloadSpec()
    arrivals: ArrivalSpec = ArrivalSpec()
    hardware: HardwareSpec = HardwareSpec()
    allocator: AllocatorSpec = AllocatorSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    metrics: MetricsSpec = MetricsSpec()
    server: ServerSpec = ServerSpec()
    seed: int = Field(default=0, ge=0)
    max_model_len: int = Field(default=2048, ge=1)
    max_sim_time_s: float | None = Field(default=None, gt=0)
    check_invariants: bool = False
    spread: SpreadSpec | None = None
    cluster: ClusterSpec = ClusterSpec()
    disaggregation: DisaggregationSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> RunSpec:
        if self.disaggregation is not None and self.allocator.kind != "paged":
            raise ValueError(
                "disaggregation moves a request's KV blocks from a prefill instance's paged "
                f"pool to a decode instance's: allocator.kind must be 'paged', got "
                f"{self.allocator.kind!r}"
            )
        reason = pairing_problem(self.scheduler.kind, self.allocator.kind)
        if reason is not None:
            raise ValueError(reason)
        if self.server.vllm_version is not None and self.scheduler.kind != "vllm-v1":
            raise ValueError(
                f"server.vllm_version {self.server.vllm_version!r} runs vLLM's V1 engine: "
                f"scheduler.kind must be 'vllm-v1', got {self.scheduler.kind!r} (leave the "
                "version out to run another scheduler)"
            )
        if self.scheduler.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"scheduler.long_prefill_token_threshold "
                f"({self.scheduler.long_prefill_token_threshold}) cannot be greater than "
                f"max_model_len ({self.max_model_len}) (vLLM V1's rule)"
            )
        return self


def pairing_problem(scheduler_kind: str, allocator_kind: str) -> str | None:
    """Why a scheduler cannot run on an allocator (None: it can), from the registries."""
    from pagesim.allocators.registry import ALLOCATORS
    from pagesim.simulator.schedulers import SCHEDULERS

    sched, alloc = SCHEDULERS[scheduler_kind], ALLOCATORS[allocator_kind]

    def fits(cls) -> bool:
        return cls.is_paged == sched.needs_paged and cls.kv_interface == sched.kv_interface

    if fits(alloc):
        return None
    fitting = sorted(k for k, a in ALLOCATORS.items() if fits(a))
    if sched.kv_interface == "kv-cache-manager":
        need = "vLLM V1's KV cache manager"
    else:
        need = "a paged allocator" if sched.needs_paged else "a contiguous allocator"
    return (
        f"scheduler {scheduler_kind!r} needs {need} ({', '.join(fitting)}), "
        f"got {allocator_kind!r}: {sched.pairing_note}"
    )


def run_spec_from_dict(doc: dict[str, Any], source: str = "<spec>") -> RunSpec:
    """Validate a plain dict (e.g. parsed YAML) into a RunSpec, with a readable error."""
    from pydantic import ValidationError

    try:
        return RunSpec.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
