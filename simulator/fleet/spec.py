"""The fleet's sections of a RunSpec: ``cluster`` (replicas behind a router) and
``disaggregation`` (prefill and decode instances, the KV moved between them).

``cluster.replicas: 1`` with no ``disaggregation`` (the defaults) is one server, run as
it always was. Router names are checked against ``simulator.fleet.routers.ROUTERS``
(one file and one line each); docs/fleets.md has each rule and its source.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from pagesim.specbase import StrictSpec as _Spec


def _check_router(name: str, key: str) -> str:
    from pagesim.simulator.fleet.routers import ROUTERS

    if name not in ROUTERS:
        raise ValueError(f"unknown {key} {name!r}; known: {', '.join(ROUTERS)}")
    return name


class ClusterSpec(_Spec):
    """Replicas of the run's server (each its own scheduler, allocator, KV pool and cost
    model) in one event loop, behind a router that picks a replica for each request when
    it arrives.

    ``router``: ``round-robin``, ``random``, ``least-outstanding``, ``least-kv``,
    ``prefix-aware`` or ``sticky``. ``sticky_fallback``: the router that places a user's
    first request, and every request without a user, under ``sticky``.
    """

    replicas: int = Field(default=1, ge=1)
    router: str = "round-robin"
    sticky_fallback: str = "round-robin"

    @field_validator("router")
    @classmethod
    def _known_router(cls, name: str) -> str:
        return _check_router(name, "cluster.router")

    @field_validator("sticky_fallback")
    @classmethod
    def _known_fallback(cls, name: str) -> str:
        if name == "sticky":
            raise ValueError("cluster.sticky_fallback cannot be 'sticky' itself")
        return _check_router(name, "cluster.sticky_fallback")

    @property
    def is_single(self) -> bool:
        return self.replicas == 1


class StageSpec(_Spec):
    """One stage's instances: their tensor parallelism, how many, and their batch caps.

    The caps default to DistServe's settings (``distserve/api_server/distserve_api_server.py``
    lines 21-26 and ``evaluation/2-benchmark-serving/2-start-api-server.py`` lines 109-114 of
    GitHub ``LLMServe/DistServe``): context stage ``--context-max-batch-size 128``,
    ``--context-max-tokens-per-batch 8192``; decoding stage ``--decoding-max-batch-size
    1024``, ``--decoding-max-tokens-per-batch 65536``. None: the stage's DistServe default.
    """

    tp: int = Field(default=1, ge=1)
    instances: int = Field(default=1, ge=1)
    max_batch_size: int | None = Field(default=None, ge=1)
    max_tokens_per_batch: int | None = Field(default=None, ge=1)


#: DistServe's caps per stage (StageSpec's docstring: the files and lines)
DISTSERVE_CAPS = {"prefill": (128, 8192), "decode": (1024, 65536)}


class KvLinkSpec(_Spec):
    """The link a request's KV crosses from its prefill instance to its decode instance:
    ``bytes / (bus_bw_gbps x 1e9) + latency_us x 1e-6`` per request. ``source`` says
    where the figures come from."""

    bus_bw_gbps: float = Field(gt=0)
    latency_us: float = Field(default=0.0, ge=0)
    source: str = "disaggregation.link"


class DisaggregationSpec(_Spec):
    """Prefill/decode disaggregation as DistServe runs it (docs/fleets.md has each rule's
    file and line): ``prefill`` instances run prompts only and produce the first token;
    the request's KV then moves over ``link`` to a ``decode`` instance, which admits it
    when its memory allows and generates the rest.

    ``link`` None: ``hardware.link``'s bus bandwidth and latency if given, else the GPU
    spec's link bandwidth (NVLink, or PCIe on the parts without it) and 10 us, the figures
    the cost model's all-reduce uses without ``hardware.link`` (``hardware.link``'s docs).
    ``waiting_block_prop_threshold``: a decode instance accepts a migration only while the
    prompt blocks of its waiting requests are below this share of its blocks (DistServe
    ``distserve/llm.py`` line 158, 0.05; ``decoding_stage_scheduler.py`` lines 248-252).
    """

    prefill: StageSpec = StageSpec()
    decode: StageSpec = StageSpec()
    link: KvLinkSpec | None = None
    waiting_block_prop_threshold: float = Field(default=0.05, gt=0, le=1)
