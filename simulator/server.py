"""One server's parts, built from a RunSpec: its KV pool, allocator, cost model and
scheduler (what :func:`~pagesim.simulator.run.simulate` replays a trace through, and what
each replica of a fleet is).

The pool is sized from ``hardware`` (``simulator.memory.kv_pool``): the spec's own, or
a disaggregated stage's copy with the stage's tensor parallelism. The allocator is told
the workload's shared prefix (segment 0, ``workload.shared_prefix_len`` tokens, which
``allocator.prefix_caching: pinned`` pins). ``cost_model`` replaces the one ``hardware``
names (``simulate``'s docstring). The scheduler draws from ``rng`` (beam choices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagesim.allocators.base import KVAllocator
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.spec import HardwareSpec, RunSpec
from pagesim.simulator.vllm_releases import resolved_scheduler


@dataclass(frozen=True)
class Server:
    """A server's parts (module docstring); ``is_given_cost_model``: the caller's."""

    pool: Any
    allocator: KVAllocator
    cost_model: Any
    scheduler: Scheduler
    is_given_cost_model: bool


def build_server(
    spec: RunSpec,
    hardware: HardwareSpec,
    *,
    rng: np.random.Generator,
    cost_model=None,
    scheduler_class: type[Scheduler] | None = None,
    pool_batched_tokens: int | None = None,
) -> Server:
    """The server ``spec`` describes on ``hardware`` (``scheduler_class`` in place of
    ``scheduler.kind``'s, and ``pool_batched_tokens`` in place of
    ``scheduler.max_num_batched_tokens`` for the activations the pool leaves room for,
    for a disaggregated stage)."""
    from pagesim.allocators import make_allocator
    from pagesim.simulator.memory import kv_pool
    from pagesim.workloads.assemble import SHARED_PREFIX_SEGMENT_ID

    pool = kv_pool(
        hardware,
        swap_space_gib=spec.allocator.swap_space_gib,
        max_num_batched_tokens=pool_batched_tokens or spec.scheduler.max_num_batched_tokens,
        max_num_seqs=spec.scheduler.max_num_seqs,
        vllm_version=spec.server.vllm_version,
        block_size=spec.allocator.block_size,
        max_model_len=spec.max_model_len,
    )
    allocator = make_allocator(
        spec.allocator,
        capacity_slots=pool.capacity_slots,
        cpu_capacity_slots=pool.cpu_capacity_slots,
        max_model_len=spec.max_model_len,
        shared_prefix=(SHARED_PREFIX_SEGMENT_ID, spec.workload.shared_prefix_len),
    )
    is_given = cost_model is not None
    if not is_given:
        from pagesim.simulator.costmodel.release import with_release_rules

        cost_model = with_release_rules(step_cost_model(spec, hardware), spec, hardware)
    scheduler = (scheduler_class or SCHEDULERS[spec.scheduler.kind])(
        resolved_scheduler(spec.scheduler, spec.server.vllm_version),
        allocator,
        max_model_len=spec.max_model_len,
        rng=rng,
    )
    return Server(pool, allocator, cost_model, scheduler, is_given)


def step_cost_model(spec: RunSpec, hardware: HardwareSpec):
    """The cost model ``hardware`` names (with the spec's spread of costs, if any)."""
    from pagesim.simulator.costmodel.factory import cost_model_for, make_cost_model, replicate_rng
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    model, gpu = get_model(hardware.model), get_gpu(hardware.gpu)
    if spec.spread is None or spec.spread.sources == ["seeds"]:
        return make_cost_model(hardware, model, gpu)
    return cost_model_for(
        hardware.profile,
        model,
        gpu,
        tensor_parallel=hardware.tensor_parallel,
        spread=(tuple(spec.spread.sources), replicate_rng(spec.seed, spec.spread.replicate)),
        link=hardware.link,
    )
