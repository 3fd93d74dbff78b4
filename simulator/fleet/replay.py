"""The fleet's replay: one engine per replica in one SimPy environment, fed by a router.

Scenario::

    router:    reads no replica state (round-robin, random, sticky over such a fallback):
                   every request is placed before the run (``Router.assign``), and each
                   replica's engine replays its own requests with its own arrivals
                   process, exactly as a single server replays a trace;
               reads state (least-outstanding, least-kv, prefix-aware):
                   a router process, at each request's arrival (plus the serving path's
                   front-end delay, as a single engine's arrivals process), asks
                   ``Router.route`` for a replica and pushes the request into its engine
                   (``Engine.push``: add + wake). The engines share the router's
                   ``ArrivalFeed``: the fleet's next arrival bounds when any replica's
                   next request may come, so each replica finishes without yielding only
                   the steps that end before it.
    replicas:  each engine runs its own steps (scheduler, allocator, cost model,
               recorder); a request that ends is logged with its replica.

The router process starts before the engines, so a request arriving at t is in its
replica's waiting queue before any step that starts at t (the single engine's rule).
The run ends when every engine has ended, or at ``max_sim_time_s`` (each replica's
queued and running requests, and the requests not yet routed, are then reported
unfinished).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import simpy

from pagesim.simulator.engine import ArrivalFeed, Engine
from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.request import UNFINISHED, SequenceGroup
from pagesim.simulator.request_log import RequestLog
from pagesim.simulator.run import _cyclic_gc_paused, groups_of
from pagesim.simulator.server import Server
from pagesim.simulator.timeouts import UrgentTimeout
from pagesim.workloads.trace import Trace


@dataclass
class FleetReplay:
    """What a fleet's replay leaves: the log of ended requests, each request's replica
    (-1: never routed), the engines and recorders by replica, and the end time."""

    log: RequestLog
    replica_of: np.ndarray
    engines: list[Engine]
    recorders: list[StepRecorder]
    end_s: float


def replay_fleet(
    trace: Trace,
    servers: list[Server],
    router: Router,
    *,
    sample_interval_s: float,
    every_step: bool,
    max_sim_time_s: float | None,
    check_invariants: bool,
) -> FleetReplay:
    """Replay ``trace`` through ``servers`` behind ``router`` (module docstring)."""
    env = simpy.Environment()
    log = RequestLog()
    num_requests = trace.num_requests
    replica_of = np.full(num_requests, -1, dtype=np.int64)
    recorders = [
        StepRecorder(
            capacity_slots=s.allocator.capacity_slots,
            block_size=s.allocator.block_size,
            sample_interval_s=sample_interval_s,
            every_step=every_step,
        )
        for s in servers
    ]
    front = getattr(servers[0].cost_model, "arrival_delay_s", 0.0)

    def engine(i: int, groups, on_done: Callable, feed: ArrivalFeed | None) -> Engine:
        server = servers[i]
        return Engine(
            env,
            groups,
            server.scheduler,
            server.cost_model.step_time_s,
            recorders[i],
            on_done,
            decode_time_fn=server.cost_model.decode_time_fn,
            max_sim_time_s=max_sim_time_s,
            check_invariants=check_invariants,
            arrival_delay_s=front,
            feed=feed,
        )

    if router.reads_state:
        state = FleetState(
            [0] * len(servers),
            [s.scheduler for s in servers],
            [s.allocator for s in servers],
        )
        feed = ArrivalFeed()
        engines: list[Engine] = []
        routing = _Routing(env, router, state, engines, feed, replica_of, front)
        env.process(routing.run(groups_of(trace.table)))
        engines += [engine(i, None, routing.on_done_of(log, i), feed) for i in range(len(servers))]
        not_arrived = lambda: groups_of(trace.table.iloc[routing.num_routed :])  # noqa: E731
    else:
        replica_of[:] = router.assign(num_requests)
        rows = [np.flatnonzero(replica_of == i) for i in range(len(servers))]
        engines = [
            engine(i, groups_of(trace.table.iloc[rows[i]]), log.add, None)
            for i in range(len(servers))
        ]

        def not_arrived() -> Iterator[SequenceGroup]:
            for e, r in zip(engines, rows, strict=True):
                yield from groups_of(trace.table.iloc[r[e.num_arrived :]])

    end_s = _run(env, engines, log, not_arrived, max_sim_time_s)
    return FleetReplay(log, replica_of, engines, recorders, end_s)


class _Routing:
    """The router process of a router that reads the fleet's state (module docstring)."""

    def __init__(self, env, router, state, engines, feed, replica_of, front_s) -> None:
        self.env, self.router, self.state = env, router, state
        self.engines, self.feed, self.replica_of = engines, feed, replica_of
        self.front_s = front_s
        self.num_routed = 0

    def on_done_of(self, log: RequestLog, i: int) -> Callable[[SequenceGroup], None]:
        outstanding = self.state.outstanding

        def on_done(group: SequenceGroup) -> None:
            log.add(group)
            outstanding[i] -= 1

        return on_done

    def run(self, groups: Iterator[SequenceGroup]):
        env, feed, state, route = self.env, self.feed, self.state, self.router.route
        engines, replica_of, outstanding = self.engines, self.replica_of, self.state.outstanding
        front = self.front_s
        now = env.now
        for group in groups:
            at = group.arrival_s + front
            if at > now:
                delay = at - now
                feed.next_arrival_s = now + delay
                yield UrgentTimeout(env, delay)
                now = env.now
            i = route(group, state)
            replica_of[group.group_id] = i
            outstanding[i] += 1
            self.num_routed += 1
            engines[i].push(group)
        feed.is_done = True
        feed.next_arrival_s = math.inf
        for engine in engines:
            engine.wake()


def _run(
    env: simpy.Environment,
    engines: list[Engine],
    log: RequestLog,
    not_arrived: Callable[[], Iterator[SequenceGroup]],
    max_sim_time_s: float | None,
) -> float:
    """Run every engine to its end or to ``max_sim_time_s``; the run's end time (as
    ``simulator.run._replay`` for one engine)."""
    processes = [e.process for e in engines]
    until = processes[0] if len(processes) == 1 else simpy.AllOf(env, processes)
    if max_sim_time_s is None:
        with _cyclic_gc_paused():
            env.run(until=until)
        return max(e.last_event_s for e in engines)
    with _cyclic_gc_paused():
        env.run(until=max_sim_time_s)
    if all(not p.is_alive for p in processes):
        return max(e.last_event_s for e in engines)
    reason = f"not finished at max_sim_time_s = {max_sim_time_s}"
    for e in engines:
        for group in e.scheduler.stop(reason):
            log.add(group)
    for group in not_arrived():
        group.status = UNFINISHED
        group.reason = f"arrives after max_sim_time_s = {max_sim_time_s}"
        log.add(group)
    return max_sim_time_s
