"""``simulate(spec) -> RunResult``: one run, a pure function of its RunSpec and seed.

Scenario: build the trace (``workloads.build_trace`` with the run's generator, unless
one is given), size the KV pool (``simulator.memory.kv_pool``), make the allocator
(told the workload's shared prefix: segment 0, ``workload.shared_prefix_len`` tokens,
which ``allocator.prefix_caching: pinned`` pins), the cost model and the scheduler,
replay the trace on the SimPy engine (``simulator.engine``), and turn the observations into a RunResult. One
``numpy.random.default_rng(spec.seed)`` is made here and passed down: first to trace
building, then to the scheduler (beam choices). The summary then gets the vLLM-named
metrics (``simulator/vllm_metrics.py``; ITL from the inter-token gaps the scheduler
records), and the extra values the ``metrics.reducers`` named (``simulator/reducers.py``).

``extra["pinned_prefix_slots"]`` (runs with ``prefix_caching: pinned`` only) is the
slots the pinned prefix holds for the whole run (inside ``mem_token_frac``).
``extra["num_dropped"]`` counts the requests the workload filters removed (and
``extra["dropped_share"]`` their share of the candidates they examined), and
``notes`` says what the numbers rest on (``simulator.provenance``): why requests
were dropped or rejected, the cost model kind and profile, and the table a table
workload read when it is not the shipped one.

Checked before the run (ConfigError, by ``make_allocator``): a pool the allocator
could never serve a request from (``KVAllocator.pool_problem``: a Max allocator whose
pool is smaller than ``max_model_len``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import simpy

from pagesim.simulator.engine import Engine
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.provenance import (
    pool_notes,
    request_notes,
    step_cost_notes,
    workload_table_notes,
)
from pagesim.simulator.reducers import reduce
from pagesim.simulator.request import UNFINISHED, SequenceGroup
from pagesim.simulator.request_log import RequestLog
from pagesim.simulator.result import RunResult
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.spec import RunSpec
from pagesim.simulator.summary import run_result
from pagesim.simulator.vllm_metrics import vllm_summary
from pagesim.workloads.trace import Trace


def simulate(
    spec: RunSpec, *, trace: Trace | None = None, progress: bool = False, cost_model=None
) -> RunResult:
    """Run ``spec`` (``trace`` replaces the spec's workload) and return its RunResult.
    ``cost_model`` replaces the one ``spec.hardware`` names: any object with
    ``step_time_s``, ``decode_time_fn`` and ``description`` (and ``bind_clock(env)``,
    called with the engine's clock before the replay, where it reads the time: the
    recorded step times of :mod:`.costmodel.recorded`)."""
    from pagesim.simulator.server import build_server

    wall_start = time.perf_counter()
    if not spec.cluster.is_single or spec.disaggregation is not None:
        from pagesim.simulator.fleet.run import simulate_fleet

        return simulate_fleet(spec, trace=trace, progress=progress, cost_model=cost_model)
    rng = np.random.default_rng(spec.seed)
    trace, table_note = trace_of(spec, trace, rng)
    server = build_server(spec, spec.hardware, rng=rng, cost_model=cost_model)
    pool, allocator, cost_model, scheduler = (
        server.pool,
        server.allocator,
        server.cost_model,
        server.scheduler,
    )
    result = run_engine(
        trace,
        scheduler,
        cost_model.step_time_s,
        decode_time_fn=cost_model.decode_time_fn,
        arrival_delay_s=getattr(cost_model, "arrival_delay_s", 0.0),
        sample_interval_s=spec.metrics.sample_interval_s,
        every_step=spec.metrics.every_step,
        max_sim_time_s=spec.max_sim_time_s,
        check_invariants=spec.check_invariants,
        progress=progress,
        wall_start=wall_start,
        bind_clock=getattr(cost_model, "bind_clock", None),
    )
    result.extra["kv_capacity_slots"] = float(pool.capacity_slots)
    if spec.allocator.prefix_caching == "pinned":
        pinned_blocks = getattr(allocator, "pinned_block_ids", ())
        result.extra["pinned_prefix_slots"] = float(len(pinned_blocks) * allocator.block_size)
    result.summary.update(
        vllm_summary(
            result.requests,
            duration_s=result.extra["makespan_s"],
            spec=spec.metrics,
            token_gaps=scheduler.token_gaps,
        )
    )
    for name in spec.metrics.reducers:
        result.extra.update(reduce(result.timeseries, name).as_columns())
    result.extra["num_dropped"] = float(sum(trace.dropped.values()))
    result.extra["dropped_share"] = trace.dropped_share
    result.notes.update(request_notes(trace.dropped, result.requests))
    result.notes.update(pool_notes(spec.hardware.model, pool))
    result.notes.update(cost_notes(spec, cost_model, is_given=server.is_given_cost_model))
    result.notes.update(table_note)
    return result


def trace_of(spec: RunSpec, trace: Trace | None, rng: np.random.Generator) -> tuple[Trace, dict]:
    """The run's trace (``trace`` if given, else the spec's workload built with ``rng``)
    and the note on the table a table workload read."""
    from pagesim.workloads import build_trace

    if trace is not None:
        return trace, {}
    trace = build_trace(spec.workload, spec.arrivals, max_model_len=spec.max_model_len, rng=rng)
    return trace, workload_table_notes(spec.workload, trace)


def cost_notes(spec: RunSpec, cost_model, *, is_given: bool) -> dict[str, str]:
    """What the step costs rest on (``simulator.provenance``), or the description of a
    cost model the caller gave."""
    if is_given:
        return {"cost_model_description": cost_model.description}
    return step_cost_notes(cost_model, spec.hardware.profile)


def run_engine(
    trace: Trace,
    scheduler: Scheduler,
    step_time_s,
    *,
    decode_time_fn=None,
    arrival_delay_s: float = 0.0,
    sample_interval_s: float = 1.0,
    every_step: bool = False,
    max_sim_time_s: float | None = None,
    check_invariants: bool = False,
    progress: bool = False,
    wall_start: float | None = None,
    bind_clock=None,
) -> RunResult:
    """Replay ``trace`` through ``scheduler`` with step durations from ``step_time_s(plan)``
    (and ``decode_time_fn(is_paged=...)(num_seqs, context_sum, num_blocks)``, the same for
    pure decode steps given by their totals, as ``CostModel.decode_time_fn``; default:
    through a plan). ``bind_clock(env)``, where given, is called with the engine's SimPy
    environment before the replay (a cost model that reads the time).

    The part of :func:`simulate` below the factories: tests drive it with small
    allocators and constant step times.
    """
    wall_start = time.perf_counter() if wall_start is None else wall_start
    allocator = scheduler.allocator
    recorder = StepRecorder(
        capacity_slots=allocator.capacity_slots,
        block_size=allocator.block_size,
        sample_interval_s=sample_interval_s,
        every_step=every_step,
    )
    log = RequestLog()
    bar = _progress_bar(trace.num_requests) if progress else None

    def on_done_with_bar(group: SequenceGroup) -> None:
        log.add(group)
        if bar is not None:
            bar.update(1)

    on_done = log.add if bar is None else on_done_with_bar

    env = simpy.Environment()
    if bind_clock is not None:
        bind_clock(env)
    engine = Engine(
        env,
        _groups(trace),
        scheduler,
        step_time_s,
        recorder,
        on_done,
        decode_time_fn=decode_time_fn,
        max_sim_time_s=max_sim_time_s,
        check_invariants=check_invariants,
        arrival_delay_s=arrival_delay_s,
    )
    end_s = _replay(env, engine, trace, scheduler, on_done, max_sim_time_s)
    if bar is not None:
        bar.close()
    # the gaps are final: fold them before the per-request table is built (less at once)
    scheduler.token_gaps.compact()
    return run_result(
        trace,
        log.frame(trace.table),
        recorder,
        end_s=end_s,
        num_preemptions=scheduler.num_preemptions,
        prefix_hit_rate=allocator.prefix_cache.hit_rate,
        wall_start=wall_start,
    )


def _replay(
    env: simpy.Environment,
    engine: Engine,
    trace: Trace,
    scheduler: Scheduler,
    on_done,
    max_sim_time_s: float | None,
) -> float:
    """Run the engine to its end or to ``max_sim_time_s``; returns the run's end time.
    At the time limit, every request not finished (running, waiting, or not yet
    arrived) is reported as unfinished with its reason."""
    if max_sim_time_s is None:
        with _cyclic_gc_paused():
            env.run(until=engine.process)
        return engine.last_event_s
    with _cyclic_gc_paused():
        env.run(until=max_sim_time_s)
    if not engine.process.is_alive:
        return engine.last_event_s
    for group in scheduler.stop(f"not finished at max_sim_time_s = {max_sim_time_s}"):
        on_done(group)
    # requests that had not even arrived by the time limit are reported too
    for group in _groups(trace, start=engine.num_arrived):
        group.status = UNFINISHED
        group.reason = f"arrives after max_sim_time_s = {max_sim_time_s}"
        on_done(group)
    return max_sim_time_s


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the replay (restored after).

    What the engine makes is freed by reference counting: a replay leaves a few hundred
    to a few thousand objects in reference cycles (a 300,000-request burst: about
    6,000, the same with the collector on), which the next collection after the replay
    frees. Meanwhile every full collection would scan every object alive, and a burst
    keeps all its requests alive at once (``docs/performance.md``)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _groups(trace: Trace, start: int = 0) -> Iterator[SequenceGroup]:
    """The trace's requests from row ``start`` on, as fresh groups, one at a time."""
    return groups_of(trace.table.iloc[start:])


def groups_of(t) -> Iterator[SequenceGroup]:
    """A trace table's requests (``t``: the table or some of its rows), as fresh groups,
    one at a time.

    A group keeps its row's segments tuple itself (shared with the trace, not copied:
    a burst puts every request in the waiting queue at once)."""
    cols = zip(
        t["request_id"].tolist(),
        t["arrival_s"].tolist(),
        t["prompt_len"].tolist(),
        t["output_len"].tolist(),
        t["n"].tolist(),
        t["beam_width"].tolist(),
        t["segments"].tolist(),
        strict=True,
    )
    for rid, arrival, prompt, output, n, beam, segments in cols:
        # positional, in the order of SequenceGroup's fields (a compiled class parses
        # keywords slowly, and this runs once per request)
        yield SequenceGroup(
            rid,
            arrival,
            prompt,
            output,
            n,
            beam,
            segments if _is_segments(segments) else tuple(map(tuple, segments)),
        )


def _is_segments(segments) -> bool:
    """Whether a trace cell is already a tuple of tuples (then it can be shared as it is)."""
    if type(segments) is not tuple:
        return False
    for segment in segments:  # noqa: SIM110 (a loop is faster than all(): once a request)
        if type(segment) is not tuple:
            return False
    return True


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc="simulate")
