"""Prefill/decode disaggregation as DistServe runs it (GitHub ``LLMServe/DistServe``),
in the one SimPy environment: ``disaggregation.prefill.instances`` prefill instances and
``disaggregation.decode.instances`` decode instances, each its own engine, KV pool
(``simulator.memory.kv_pool`` on the hardware with the stage's ``tensor_parallel``),
allocator, cost model (at the stage's TP) and stage scheduler (``fleet.stages``). A
decode instance's pool leaves room for the activations of one token per request of its
largest batch (``decode.max_batch_size``), not for its token cap (65,536 in DistServe's
settings, which counts one input token per decoding request).

Scenario::

    arrival:   the request goes to the prefill instance with the fewest requests
               queued or in prefill, ties to the first (simdistserve
               ``base/scheduler.py`` lines 19-24 and 38-42: ``min`` over
               ``_prefill_ips + len(prefill_queue)``)
    prefill:   FCFS prefill-only steps; the step that ends the prompt produces the first
               token (the request's TTFT ends there); the request keeps its blocks here
    handover:  at that moment the request goes to the decode instance with the fewest
               requests handed to it and not finished (simdistserve ``schedule_decode``,
               lines 44-54: the same ``min`` over the decode queues), which accepts it
               after one of its steps when its memory allows (``DecodeStage``)
    migration: from acceptance, the prompt's KV moves over the link:
               ``prompt_len x KV bytes per token of one prefill GPU's shard / bus
               bandwidth + latency`` (each of the prefill instance's TP GPUs sends its
               own shard over its own link, as DistServe's layer-aligned placement pairs
               the two stages' GPUs: ``distserve/engine.py`` lines 172-193); then the
               prefill instance frees the blocks and the decode instance decodes it
    decode:    FCFS decode steps up to ``decode.max_batch_size`` requests; TPOT and
               E2E count from the first token over the decode instance's steps.

Every engine yields at every step (its feed never promises a quiet interval): handovers
and migrations are events between the instances at times no instance knows in advance.
A prefill instance's feed is done once the arrivals are and its held blocks are freed;
a decode instance's once every request has left the prefill stage.

The per-request table's ``replica`` is the decode instance (prefill instances are
numbered first, then the decode instances: ``RunResult.replicas``' ``role`` says which);
a request that ends on its prefill instance (rejected there) gets the prefill
instance's number.

Refused (ConfigError, one line): a scheduler other than ``vllm`` (the stages are its
prefill-only and decode-only steps), requests with ``n`` > 1 or beam search, a cluster
of several replicas beside it. A non-paged allocator is refused by the RunSpec.
"""

from __future__ import annotations

import time

import numpy as np

from pagesim.errors import ConfigError
from pagesim.simulator.fleet.disagg_replay import DisaggregatedReplay
from pagesim.simulator.fleet.results import fleet_result
from pagesim.simulator.fleet.spec import DISTSERVE_CAPS, StageSpec
from pagesim.simulator.fleet.stages import DecodeStage, PrefillStage
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.result import RunResult
from pagesim.simulator.run import cost_notes
from pagesim.simulator.server import build_server
from pagesim.simulator.spec import RunSpec
from pagesim.workloads.trace import Trace

#: the GPU-to-GPU latency the cost model's all-reduce uses without ``hardware.link``
DEFAULT_LINK_LATENCY_S = 10e-6


def check_disaggregation(spec: RunSpec, trace: Trace) -> None:
    """The refusals of the module docstring, each in one line."""
    if spec.scheduler.kind != "vllm":
        raise ConfigError(
            "disaggregation runs DistServe's FCFS stages on the vllm (v0) scheduler's "
            f"prefill-only and decode-only steps: scheduler.kind must be 'vllm', got "
            f"{spec.scheduler.kind!r}"
        )
    if not spec.cluster.is_single:
        raise ConfigError(
            "disaggregation's prefill and decode instances are the fleet: leave "
            f"cluster.replicas at 1 (got {spec.cluster.replicas})"
        )
    table = trace.table
    if (table["n"] > 1).any() or (table["beam_width"] > 1).any():
        raise ConfigError(
            "disaggregation moves one sequence per request: the trace has requests with "
            "n > 1 or beam_width > 1"
        )


def stage_spec(spec: RunSpec, stage: StageSpec, name: str) -> RunSpec:
    """The RunSpec of one stage's instance: the stage's TP and DistServe's caps."""
    batch, tokens = DISTSERVE_CAPS[name]
    scheduler = spec.scheduler.model_copy(
        update={
            "max_num_seqs": stage.max_batch_size or batch,
            "max_num_batched_tokens": stage.max_tokens_per_batch or tokens,
        }
    )
    hardware = spec.hardware.model_copy(update={"tensor_parallel": stage.tp})
    return spec.model_copy(update={"scheduler": scheduler, "hardware": hardware})


def link_of(spec: RunSpec) -> tuple[float, float, str]:
    """(bytes per second, latency in seconds, source) of the KV link (module docstring)."""
    dis = spec.disaggregation
    if dis.link is not None:
        return dis.link.bus_bw_gbps * 1e9, dis.link.latency_us * 1e-6, dis.link.source
    if spec.hardware.link is not None:
        link = spec.hardware.link
        return link.bus_bw_gbps * 1e9, link.latency_us * 1e-6, link.source
    gpu = get_gpu(spec.hardware.gpu)
    return gpu.nvlink_bw_bytes_s, DEFAULT_LINK_LATENCY_S, f"GPU spec {gpu.name} link"


def transfer_s(spec: RunSpec, prompt_len: int) -> float:
    """The migration of a ``prompt_len``-token prompt's KV (module docstring)."""
    model = get_model(spec.hardware.model)
    tp = spec.disaggregation.prefill.tp
    shard_bytes = (
        2 * model.num_layers * model.num_kv_heads_per_gpu(tp) * model.head_dim * model.dtype_bytes
    )
    bw, latency, _ = link_of(spec)
    return prompt_len * shard_bytes / bw + latency


def simulate_disaggregated(
    spec: RunSpec, trace: Trace, rng: np.random.Generator, *, cost_model=None
) -> RunResult:
    wall_start = time.perf_counter()
    check_disaggregation(spec, trace)
    dis = spec.disaggregation
    prefill_spec = stage_spec(spec, dis.prefill, "prefill")
    decode_spec = stage_spec(spec, dis.decode, "decode")
    prefills = [
        build_server(
            prefill_spec,
            prefill_spec.hardware,
            rng=rng,
            cost_model=cost_model,
            scheduler_class=PrefillStage,
        )
        for _ in range(dis.prefill.instances)
    ]
    decodes = [
        build_server(
            decode_spec,
            decode_spec.hardware,
            rng=rng,
            cost_model=cost_model,
            scheduler_class=DecodeStage,
            pool_batched_tokens=decode_spec.scheduler.max_num_seqs,
        )
        for _ in range(dis.decode.instances)
    ]
    fleet = DisaggregatedReplay(
        trace,
        prefills,
        decodes,
        transfer_s=lambda prompt_len: transfer_s(spec, prompt_len),
        waiting_block_prop_threshold=dis.waiting_block_prop_threshold,
        sample_interval_s=spec.metrics.sample_interval_s,
        every_step=spec.metrics.every_step,
        max_sim_time_s=spec.max_sim_time_s,
        check_invariants=spec.check_invariants,
    )
    fleet.run()
    servers = prefills + decodes
    for server in servers:
        server.scheduler.token_gaps.compact()
    requests = fleet.log.frame(trace.table)
    requests["replica"] = fleet.replica_of
    result = fleet_result(
        trace,
        requests,
        recorders=fleet.recorders,
        num_preemptions=[s.scheduler.num_preemptions for s in servers],
        prefix_counters=[s.allocator.prefix_cache for s in servers],
        token_gaps=[s.scheduler.token_gaps for s in servers],
        end_s=fleet.end_s,
        roles=["prefill"] * len(prefills) + ["decode"] * len(decodes),
        capacities=[s.pool.capacity_slots for s in servers],
        metrics_spec=spec.metrics,
        wall_start=wall_start,
    )
    result.extra["kv_capacity_slots"] = float(sum(s.pool.capacity_slots for s in servers))
    result.extra["num_migrations"] = float(fleet.num_migrations)
    result.extra["migration_s_sum"] = fleet.migration_s_sum
    result.notes.update(
        cost_notes(prefill_spec, prefills[0].cost_model, is_given=prefills[0].is_given_cost_model)
    )
    result.notes["kv_link"] = link_of(spec)[2]
    return result
