"""The SimPy engine: an arrivals process feeds the scheduler; an engine process runs steps.

Scenario::

    arrivals:  at each request's arrival_s, add it to the waiting queue; wake the engine
    engine:    loop
                   plan = scheduler.schedule(now)
                   if the plan is empty: idle until the next arrival (never polls)
                   yield timeout(cost_model.step_time_s(plan))
                   scheduler.finish_step(plan, now)

The KV cache is the allocator, a plain object the scheduler calls (not a SimPy
resource).

Same-time ordering (deterministic, tested): arrivals are scheduled with SimPy's
URGENT priority and steps with NORMAL, so requests arriving at time t are in the
waiting queue before a step that ends (and the next one that is scheduled) at t. At
t = 0 the arrivals process starts first, so a burst at 0 is all in the first step.

A run ends when every request has arrived and ended (finished or rejected), or at
``max_sim_time_s``: the step in flight is then abandoned and the requests still
queued or running are reported ``unfinished``.

This engine is the reference: ``RunSpec.engine = "fast"`` runs the same semantics in
``simulator.fastengine`` (no SimPy, O(1) work per decode step) where it applies, and
the differential tests hold the two to the same results.

Debug mode (``check_invariants``): after every ``schedule()`` and ``finish_step()``
the allocator's and the scheduler's invariants are checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import simpy
from simpy.events import URGENT, Event

from pagesim.errors import InvariantError
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler


class _UrgentTimeout(Event):
    """A timeout processed before NORMAL events of the same time (arrivals before steps)."""

    def __init__(self, env: simpy.Environment, delay: float):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)


class Engine:
    """One simulation: arrivals + engine processes over a scheduler and a cost model.

    ``groups`` yields requests in arrival order (made lazily, so memory grows with the
    requests in flight, not the trace); ``on_done`` receives every group that ends.
    """

    def __init__(
        self,
        env: simpy.Environment,
        groups: Iterator[SequenceGroup],
        scheduler: Scheduler,
        step_time_s: Callable[..., float],
        recorder: StepRecorder,
        on_done: Callable[[SequenceGroup], None],
        *,
        check_invariants: bool = False,
    ):
        self.env = env
        self.scheduler = scheduler
        self.step_time_s = step_time_s
        self.recorder = recorder
        self.on_done = on_done
        self.check = check_invariants
        self.is_arrivals_done = False
        self.num_arrived = 0
        #: end of the last completed step or idle period (the run's end when it drains)
        self.last_event_s = 0.0
        self._wakeup: Event | None = None
        env.process(self._arrivals(groups))
        self.process = env.process(self._loop())

    def _arrivals(self, groups: Iterator[SequenceGroup]):
        env = self.env
        for group in groups:
            if group.arrival_s > env.now:
                yield _UrgentTimeout(env, group.arrival_s - env.now)
            self.scheduler.add(group)
            self.num_arrived += 1
            if self._wakeup is not None:
                self._wakeup.succeed()
                self._wakeup = None
        self.is_arrivals_done = True
        if self._wakeup is not None:
            self._wakeup.succeed()
            self._wakeup = None

    def _loop(self):
        env, sched, alloc, rec = self.env, self.scheduler, self.scheduler.allocator, self.recorder
        while True:
            start_s = env.now
            plan = sched.schedule(start_s)
            if plan.is_empty and sched.has_work:
                # the step only preempted (by recompute): the freed memory admits now
                self._collect_done()
                plan = sched.schedule(start_s)
            self._collect_done()
            if self.check:
                alloc.check_invariants()
                sched.check_invariants()
            usage = alloc.usage(sched.target_len_by_seq, sched.is_blocked)
            if plan.is_empty:
                if self.is_arrivals_done and not sched.has_work:
                    self.last_event_s = start_s
                    return
                if self.is_arrivals_done:
                    raise InvariantError(
                        f"{sched.kind} scheduler is stuck at t={start_s:.3f}s: "
                        f"{len(sched.waiting)} waiting, {len(sched.running)} running, "
                        f"{len(sched.swapped)} swapped, and nothing can run"
                    )
                self._wakeup = env.event()
                yield self._wakeup
                rec.record_idle(start_s, env.now - start_s, usage)
                self.last_event_s = env.now
                continue
            hits_before = alloc.prefix_cache.hit_tokens
            queues = (len(sched.waiting), len(sched.running), len(sched.swapped))
            duration_s = self.step_time_s(plan)
            yield env.timeout(duration_s)
            sched.finish_step(plan, env.now)
            self._collect_done()
            if self.check:
                alloc.check_invariants()
                sched.check_invariants()
            rec.record_step(
                start_s,
                duration_s,
                plan,
                usage,
                num_groups=sched.num_step_groups,
                num_decode_groups=sched.num_decode_groups,
                queues=queues,
                prefix_hit_tokens=alloc.prefix_cache.hit_tokens - hits_before,
            )
            self.last_event_s = env.now

    def _collect_done(self) -> None:
        for group in self.scheduler.drain_done():
            self.on_done(group)
