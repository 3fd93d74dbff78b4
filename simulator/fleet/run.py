"""``simulate_fleet(spec) -> RunResult``: a run of replicas behind a router, or of a
disaggregated fleet, a pure function of its RunSpec and seed.

Scenario: build the trace as ``simulate`` does (the run's generator first), then one
server per replica (``simulator.server.build_server``: its own KV pool, allocator, cost
model and scheduler, the schedulers drawing from the run's generator), the router (its
draws from a child of the run's generator, ``Generator.spawn``, which leaves the run's
own draws as they are), replay (``simulator.fleet.replay``) and gather the result
(``simulator.fleet.results``). A ``disaggregation`` section runs
``simulator.fleet.disagg`` instead.

Refused (ConfigError, one line): ``metrics.reducers`` (they reduce one server's time
series; a fleet's has a row per replica and window), ``sticky`` on a trace without
``user_id``.
"""

from __future__ import annotations

import time

import numpy as np

from pagesim.errors import ConfigError
from pagesim.simulator.fleet.replay import replay_fleet
from pagesim.simulator.fleet.results import fleet_result
from pagesim.simulator.fleet.routers import ROUTERS, Router
from pagesim.simulator.fleet.spec import ClusterSpec
from pagesim.simulator.provenance import request_notes
from pagesim.simulator.result import RunResult
from pagesim.simulator.run import cost_notes, trace_of
from pagesim.simulator.server import build_server
from pagesim.simulator.spec import RunSpec
from pagesim.workloads.trace import Trace


def simulate_fleet(
    spec: RunSpec, *, trace: Trace | None = None, progress: bool = False, cost_model=None
) -> RunResult:
    """Run ``spec``'s fleet (module docstring); the arguments are ``simulate``'s
    (``progress`` is not shown for fleets)."""
    wall_start = time.perf_counter()
    if spec.metrics.reducers:
        raise ConfigError(
            f"metrics.reducers ({', '.join(spec.metrics.reducers)}) reduce one server's time "
            "series: leave them out of a fleet's run (cluster.replicas > 1 or disaggregation)"
        )
    rng = np.random.default_rng(spec.seed)
    trace, table_note = trace_of(spec, trace, rng)
    if spec.disaggregation is not None:
        from pagesim.simulator.fleet.disagg import simulate_disaggregated

        result = simulate_disaggregated(spec, trace, rng, cost_model=cost_model)
    else:
        result = _simulate_replicas(spec, trace, rng, cost_model, wall_start)
    result.extra["num_dropped"] = float(sum(trace.dropped.values()))
    result.extra["dropped_share"] = trace.dropped_share
    result.notes.update(request_notes(trace.dropped, result.requests))
    result.notes.update(table_note)
    return result


def _simulate_replicas(
    spec: RunSpec, trace: Trace, rng: np.random.Generator, cost_model, wall_start: float
) -> RunResult:
    num_replicas = spec.cluster.replicas
    servers = [
        build_server(spec, spec.hardware, rng=rng, cost_model=cost_model)
        for _ in range(num_replicas)
    ]
    router = make_router(spec.cluster, num_replicas, rng=rng.spawn(1)[0], trace=trace)
    replay = replay_fleet(
        trace,
        servers,
        router,
        sample_interval_s=spec.metrics.sample_interval_s,
        every_step=spec.metrics.every_step,
        max_sim_time_s=spec.max_sim_time_s,
        check_invariants=spec.check_invariants,
    )
    for server in servers:
        server.scheduler.token_gaps.compact()
    requests = replay.log.frame(trace.table)
    requests["replica"] = replay.replica_of
    result = fleet_result(
        trace,
        requests,
        recorders=replay.recorders,
        num_preemptions=[s.scheduler.num_preemptions for s in servers],
        prefix_counters=[s.allocator.prefix_cache for s in servers],
        token_gaps=[s.scheduler.token_gaps for s in servers],
        end_s=[e.last_event_s for e in replay.engines],
        roles=["replica"] * num_replicas,
        capacities=[s.pool.capacity_slots for s in servers],
        metrics_spec=spec.metrics,
        wall_start=wall_start,
    )
    result.extra["kv_capacity_slots"] = float(sum(s.pool.capacity_slots for s in servers))
    result.notes.update(
        cost_notes(spec, servers[0].cost_model, is_given=servers[0].is_given_cost_model)
    )
    return result


def make_router(
    cluster: ClusterSpec, num_replicas: int, *, rng: np.random.Generator, trace: Trace
) -> Router:
    """``cluster.router`` over ``num_replicas`` (``sticky`` with its fallback), reading the
    trace's ``user_id`` column where it has one."""
    table = trace.table
    user_ids = table["user_id"].to_numpy(dtype=np.int64) if "user_id" in table.columns else None
    # built whatever the router (only sticky uses it): its name is checked either way
    fallback = ROUTERS[cluster.sticky_fallback](num_replicas, rng=rng, user_ids=user_ids)
    return ROUTERS[cluster.router](num_replicas, rng=rng, user_ids=user_ids, fallback=fallback)
