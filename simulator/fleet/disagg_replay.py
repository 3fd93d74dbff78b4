"""The disaggregated fleet's replay: the events between its instances
(``simulator.fleet.disagg``'s module docstring has the rules and their sources)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from pagesim.simulator.engine import ArrivalFeed, Engine
from pagesim.simulator.fleet.stages import DecodeStage, PrefillStage
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.request import FINISHED, UNFINISHED, WAITING, SequenceGroup
from pagesim.simulator.request_log import RequestLog
from pagesim.simulator.run import _cyclic_gc_paused, groups_of
from pagesim.simulator.server import Server
from pagesim.simulator.timeouts import UrgentTimeout
from pagesim.workloads.trace import Trace


def _least_loaded(load: list[int]) -> int:
    """simdistserve ``base/scheduler.py`` lines 19-24: ``min`` over the queues, so ties go
    to the first instance."""
    return min(range(len(load)), key=load.__getitem__)


class DisaggregatedReplay:
    """One run of a disaggregated fleet (``run``), and what it leaves: the log, each
    request's instance, the engines and recorders (prefill instances first)."""

    def __init__(
        self,
        trace: Trace,
        prefills: list[Server],
        decodes: list[Server],
        *,
        transfer_s: Callable[[int], float],
        waiting_block_prop_threshold: float,
        sample_interval_s: float,
        every_step: bool,
        max_sim_time_s: float | None,
        check_invariants: bool,
    ) -> None:
        self.env = env = simpy.Environment()
        self.trace, self.transfer_s, self.max_sim_time_s = trace, transfer_s, max_sim_time_s
        self.log = RequestLog()
        self.replica_of = np.full(trace.num_requests, -1, dtype=np.int64)
        servers = prefills + decodes
        self.num_prefill = len(prefills)
        self.recorders = [
            StepRecorder(
                capacity_slots=s.allocator.capacity_slots,
                block_size=s.allocator.block_size,
                sample_interval_s=sample_interval_s,
                every_step=every_step,
            )
            for s in servers
        ]
        self.prefill_load, self.decode_load = [0] * len(prefills), [0] * len(decodes)
        self.held = [0] * len(prefills)
        #: requests neither migrated to a decode instance nor ended yet
        self.num_pending = trace.num_requests
        self.num_routed = 0
        self.is_routing_done = False
        #: each request's copy in the fleet now, until it is logged (for the time limit)
        self.live: dict[int, SequenceGroup] = {}
        self.at_prefill: dict[int, tuple[int, SequenceGroup]] = {}
        self.num_migrations, self.migration_s_sum = 0, 0.0
        self.front_s = getattr(servers[0].cost_model, "arrival_delay_s", 0.0)
        self.feeds = [ArrivalFeed() for _ in servers]
        for feed in self.feeds:
            feed.next_arrival_s = -math.inf  # never a quiet interval (module docstring)
        env.process(self._route(groups_of(trace.table)))
        self.engines: list[Engine] = []
        for k, server in enumerate(servers):
            if k >= self.num_prefill:
                stage = server.scheduler
                assert isinstance(stage, DecodeStage)
                stage.start_migration = self._migration_starter(k - self.num_prefill)
                stage.waiting_block_prop_threshold = waiting_block_prop_threshold
            self.engines.append(
                Engine(
                    env,
                    None,
                    server.scheduler,
                    server.cost_model.step_time_s,
                    self.recorders[k],
                    self._prefill_done(k) if k < self.num_prefill else self._decode_done(k),
                    decode_time_fn=server.cost_model.decode_time_fn,
                    max_sim_time_s=max_sim_time_s,
                    check_invariants=check_invariants,
                    arrival_delay_s=self.front_s,
                    feed=self.feeds[k],
                )
            )

    # ---- the requests' way through the fleet --------------------------------------------
    def _route(self, groups):
        env, front = self.env, self.front_s
        now = env.now
        for group in groups:
            at = group.arrival_s + front
            if at > now:
                yield UrgentTimeout(env, at - now)
                now = env.now
            copy = SequenceGroup(
                group.group_id, group.arrival_s, group.prompt_len, 1, 1, 1, group.segments
            )
            i = _least_loaded(self.prefill_load)
            self.prefill_load[i] += 1
            self.live[group.group_id] = copy
            self.replica_of[group.group_id] = i
            self.num_routed += 1
            self.engines[i].push(copy)
        self.is_routing_done = True
        self._check_done()

    def _prefill_done(self, i: int) -> Callable[[SequenceGroup], None]:
        def done(group: SequenceGroup) -> None:
            self.prefill_load[i] -= 1
            gid = group.group_id
            if group.status != FINISHED:  # rejected on its prefill instance
                self.live.pop(gid)
                self.log.add(group)
                self.num_pending -= 1
                self._check_done()
                return
            self.held[i] += 1
            self.at_prefill[gid] = (i, group)
            trace_row = self.trace.table
            d = SequenceGroup(
                gid,
                group.arrival_s,
                group.prompt_len,
                int(trace_row["output_len"].iat[gid]),
                1,
                1,
                group.segments,
            )
            d.num_generated = 1
            d.first_token_s = d.last_token_s = group.first_token_s
            d.num_cached_tokens = group.num_cached_tokens
            d.num_preemptions = group.num_preemptions
            d.status = WAITING
            if d.output_len == 1:  # nothing to decode: the first token ends it
                d.status, d.finish_s = FINISHED, group.first_token_s
                self._release(i, gid)
                self.live.pop(gid)
                self.log.add(d)
                self.num_pending -= 1
                self._check_done()
                return
            j = _least_loaded(self.decode_load)
            self.decode_load[j] += 1
            self.live[gid] = d
            self.replica_of[gid] = self.num_prefill + j
            self.engines[self.num_prefill + j].push(d)

        return done

    def _migration_starter(self, j: int) -> Callable[[SequenceGroup, float], None]:
        def start(group: SequenceGroup, now_s: float) -> None:
            duration_s = self.transfer_s(group.prompt_len)
            self.num_migrations += 1
            self.migration_s_sum += duration_s
            event = self.env.timeout(now_s + duration_s - self.env.now)
            event.callbacks.append(lambda _: self._migrated(j, group))

        return start

    def _migrated(self, j: int, group: SequenceGroup) -> None:
        self._release(*self.at_prefill[group.group_id][:1], group.group_id)
        engine = self.engines[self.num_prefill + j]
        stage = engine.scheduler
        assert isinstance(stage, DecodeStage)
        stage.migration_ended(group)
        engine.notify()
        self.num_pending -= 1
        self._check_done()

    def _release(self, i: int, gid: int) -> None:
        _, copy = self.at_prefill.pop(gid)
        stage = self.engines[i].scheduler
        assert isinstance(stage, PrefillStage)
        stage.release(copy)
        self.held[i] -= 1
        self.engines[i].notify()
        self._check_done()

    def _decode_done(self, k: int) -> Callable[[SequenceGroup], None]:
        def done(group: SequenceGroup) -> None:
            self.decode_load[k - self.num_prefill] -= 1
            self.live.pop(group.group_id)
            self.log.add(group)

        return done

    def _check_done(self) -> None:
        if not self.is_routing_done:
            return
        for i in range(self.num_prefill):
            feed = self.feeds[i]
            if not feed.is_done and self.held[i] == 0:
                feed.is_done = True
                self.engines[i].wake()
        if self.num_pending == 0:
            for k in range(self.num_prefill, len(self.engines)):
                if not self.feeds[k].is_done:
                    self.feeds[k].is_done = True
                    self.engines[k].wake()

    # ---- the run -----------------------------------------------------------------------
    def run(self) -> None:
        env = self.env
        processes = [e.process for e in self.engines]
        limit = self.max_sim_time_s
        with _cyclic_gc_paused():
            env.run(until=simpy.AllOf(env, processes) if limit is None else limit)
        if limit is None or all(not p.is_alive for p in processes):
            return
        reason = f"not finished at max_sim_time_s = {limit}"
        for engine in self.engines:
            engine.scheduler.stop(reason)
        for gid in sorted(self.live):
            group = self.live[gid]
            if group.is_riding:
                group.stop_riding()
            group.status, group.reason = UNFINISHED, reason
            self.log.add(group)
        for group in groups_of(self.trace.table.iloc[self.num_routed :]):
            group.status = UNFINISHED
            group.reason = f"arrives after max_sim_time_s = {limit}"
            self.log.add(group)

    @property
    def end_s(self) -> list[float]:
        return [e.last_event_s for e in self.engines]
