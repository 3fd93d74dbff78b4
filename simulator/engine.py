"""The SimPy engine: an arrivals process feeds the scheduler; an engine process runs steps.

Scenario::

    arrivals:  at each request's arrival_s (plus the serving path's front-end delay, if
               any), add it to the waiting queue; wake the engine
    engine:    loop
                   step = scheduler.schedule(now)      # a Step record: plan, memory, counts
                   if its plan is empty: idle until the next arrival (never polls)
                   yield timeout(cost_model.step_time_s(step.plan))
                   scheduler.finish_step(step, now)
                   recorder.record_step(start, duration, step)

The KV cache is the allocator, a plain object the scheduler calls (not a SimPy
resource).

Same-time ordering (deterministic, tested): arrivals are scheduled with SimPy's
URGENT priority and steps with NORMAL, so requests arriving at time t are in the
waiting queue before a step that ends (and the next one that is scheduled) at t. At
t = 0 the arrivals process starts first, so a burst at 0 is all in the first step.

Fed by a router (``simulator/fleet``): an engine built without ``groups`` has no arrivals
process; a router hands it each request with :meth:`Engine.push` (add + wake), and the
engine reads when the next request may reach it, and whether any more will, from the
:class:`ArrivalFeed` it shares with the router (``feed``). A router that does not know in
advance which replica a request goes to sets the feed's ``next_arrival_s`` to the
fleet's next arrival, which bounds every replica's: a replica then finishes without
yielding only the steps that end before any request arrives anywhere, so a request
routed at time t sees every replica as the one-step-at-a-time loop would leave it at t.

A run ends when every request has arrived and ended (finished or rejected), or at
``max_sim_time_s``: the step in flight is then abandoned and the requests still
queued or running are reported ``unfinished``.

Speed: a SimPy timeout may span everything that cannot change what happens next. A
step that ends before the next arrival and before the time limit cannot be
interleaved with any other event, so the engine finishes it without handing control
to SimPy and goes on to the next step; it yields a timeout only for a step that an
arrival or the time limit may interrupt (or precede), and then one that lands on the
step's end exactly. Step times chain as SimPy would chain them (``t + duration``), so
the result is the same as yielding every step. After any step, when the scheduler says
the next steps are steady decodes (``Scheduler.steady_ticks``: nothing waits or is
swapped out, or for vllm the head of the queue waits for memory; every running group
decodes), the engine runs them as a *decode span* without calling ``schedule()``: per
step one allocator call (bulk append, totals and memory), the cost model's decode
formula and the recorder, and the scheduler's clock ticked once per run of steps; at a
step in which groups finish or a request arrives it asks the scheduler whether the run
stays steady. What a step costs is then O(1) for a decode step with nothing to admit, swap,
fork or finish (see ``schedulers.riders``). A step whose appends copy blocks (the forks of
parallel sampling writing into their shared last block) is a span step too: the
allocator appends, measures and counts the copies in one call
(``KVAllocator.append_all_copying``), and the cost model's general sum prices them.

Debug mode (``check_invariants``): after every ``schedule()`` and ``finish_step()``
the allocator's and the scheduler's invariants are checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import simpy
from simpy.events import Event

from pagesim.errors import InvariantError
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.timeouts import UrgentTimeout, timeout_at


class ArrivalFeed:
    """What an engine knows of the requests still to reach it: when the next one may
    (``next_arrival_s``, a lower bound; inf once none will) and whether none will
    (``is_done``). An engine's own arrivals process keeps its feed; replicas behind a
    router share the router's."""

    __slots__ = ("is_done", "next_arrival_s")

    def __init__(self) -> None:
        self.next_arrival_s = math.inf
        self.is_done = False


class Engine:
    """One simulation: arrivals + engine processes over a scheduler and a cost model.

    ``groups`` yields requests in arrival order (made lazily, so memory grows with the
    requests in flight, not the trace); ``on_done`` receives every group that ends.
    Without ``groups``, a router feeds the engine (:meth:`push`, ``feed``).
    """

    def __init__(
        self,
        env: simpy.Environment,
        groups: Iterator[SequenceGroup] | None,
        scheduler: Scheduler,
        step_time_s: Callable[..., float],
        recorder: StepRecorder,
        on_done: Callable[[SequenceGroup], None],
        *,
        decode_time_fn: Callable[..., Callable[[int, int, int], float]] | None = None,
        max_sim_time_s: float | None = None,
        check_invariants: bool = False,
        arrival_delay_s: float = 0.0,
        feed: ArrivalFeed | None = None,
    ):
        self.env = env
        #: how long after its arrival a request reaches the scheduler (a serving path's
        #: front-end delay; its latencies still count from the arrival)
        self.arrival_delay_s = arrival_delay_s
        self.scheduler = scheduler
        scheduler.arrival_delay_s = arrival_delay_s
        self.step_time_s = step_time_s
        #: ``CostModel.decode_time_fn``: a pure decode step's time from its totals
        self.decode_time_fn = decode_time_fn or self._decode_time_from_plan
        self.recorder = recorder
        self.on_done = on_done
        self.check = check_invariants
        self.limit_s = math.inf if max_sim_time_s is None else max_sim_time_s
        self.num_arrived = 0
        #: when the next request may arrive, and whether any will (a router's, if fed)
        self.feed = ArrivalFeed() if feed is None else feed
        #: end of the last completed step or idle period (the run's end when it drains)
        self.last_event_s = 0.0
        self._wakeup: Event | None = None
        #: the decode formula by cache kind (``decode_time_fn`` asked once, not per span)
        self._decode_time_by_paged = {
            is_paged: self.decode_time_fn(is_paged=is_paged) for is_paged in (True, False)
        }
        #: the allocator's calls at every step of a decode span, bound once (a plug-in,
        #: called through Python: docs/compiled_modules.md, "Direct calls")
        self._span_calls = (
            scheduler.allocator.append_all_measured,
            scheduler.allocator.append_all_copying,
        )
        if groups is not None:
            env.process(self._arrivals(groups))
        self.process = env.process(self._loop())

    @property
    def is_arrivals_done(self) -> bool:
        return self.feed.is_done

    @property
    def next_arrival_s(self) -> float:
        return self.feed.next_arrival_s

    def _arrivals(self, groups: Iterator[SequenceGroup]):
        env, add = self.env, self.scheduler.add
        feed = self.feed
        front = self.arrival_delay_s
        now = env.now
        for group in groups:
            at = group.arrival_s + front
            if at > now:
                delay = at - now
                feed.next_arrival_s = now + delay
                yield UrgentTimeout(env, delay)
                now = env.now
            add(group)
            self.num_arrived += 1
            if self._wakeup is not None:
                self._wakeup.succeed()
                self._wakeup = None
        feed.is_done = True
        feed.next_arrival_s = math.inf
        self.wake()

    def push(self, group: SequenceGroup) -> None:
        """A router hands the engine a request now: it joins the scheduler's waiting
        queue and the engine wakes if it idles."""
        self.scheduler.add(group)
        self.notify()

    def notify(self) -> None:
        """Something outside the engine changed what its next step may do (a request
        arrived, a disaggregated request's KV arrived or left): a decode span ends with
        the step in flight (it counts as an arrival), and the engine wakes if it idles."""
        self.num_arrived += 1
        if self._wakeup is not None:
            self._wakeup.succeed()
            self._wakeup = None

    def wake(self) -> None:
        """Wake the engine if it idles (it then schedules again, or ends when its feed is
        done and nothing is left)."""
        if self._wakeup is not None:
            self._wakeup.succeed()
            self._wakeup = None

    def _loop(self):
        env, sched, rec, step_time_s = self.env, self.scheduler, self.recorder, self.step_time_s
        alloc = sched.allocator
        feed = self.feed
        t = env.now
        while True:
            step = sched.schedule(t)
            is_empty = step.plan.is_empty
            if is_empty and step.has_work:
                # the step only preempted (by recompute): the freed memory admits now
                self._collect_done()
                step = sched.schedule(t)
                is_empty = step.plan.is_empty
            self._collect_done()
            if self.check:
                alloc.check_invariants()
                sched.check_invariants()
            if is_empty:
                if feed.is_done and not step.has_work:
                    self.last_event_s = t
                    return
                if feed.is_done:
                    raise InvariantError(
                        f"{sched.kind} scheduler is stuck at t={t:.3f}s: "
                        f"{step.num_waiting} waiting, {step.num_running} running, "
                        f"{step.num_swapped} swapped, and nothing can run"
                    )
                self._wakeup = env.event()
                yield self._wakeup
                rec.record_idle(t, env.now - t, step.usage)
                t = self.last_event_s = env.now
                sched.prev_step_start_s = math.inf  # no step ran just before this one
                continue
            duration_s = step_time_s(step.plan)
            end_s = t + duration_s
            if end_s >= feed.next_arrival_s or end_s >= self.limit_s:
                yield timeout_at(env, end_s)
            sched.finish_step(step, end_s)
            self._collect_done()
            if self.check:
                alloc.check_invariants()
                sched.check_invariants()
            rec.record_step(t, duration_s, step)
            sched.prev_step_start_s = t
            t = self.last_event_s = end_s
            num_ticks = sched.steady_ticks()
            if num_ticks > 0:
                t = yield from self._decode_span(t, num_ticks, step.plan.is_paged)

    def _decode_time_from_plan(self, *, is_paged: bool) -> Callable[[int, int, int], float]:
        def time_s(num_seqs: int, context_sum: int, num_blocks: int) -> float:
            plan = BatchPlan(0, 0, 0, 0.0, num_seqs, context_sum, num_blocks, is_paged=is_paged)
            return self.step_time_s(plan)

        return time_s

    def _decode_span(self, t: float, num_ticks: int, is_paged: bool):
        """Up to ``num_ticks`` steady decode steps (``Scheduler.steady_ticks``: the steps
        a ``schedule()`` would plan as bulk decodes of every running group), each through
        the same rules as any step: the allocator's bulk append and usage, the cost
        model, the scheduler's clock (ticked per run of steps), the recorder; without
        building a Step record. A step whose appends copy blocks is priced by the cost
        model's general sum with its copies. At the step in which groups finish or a
        request arrives, the run goes on if the scheduler says it is still steady (with
        the new counts), and ends otherwise; it ends early when the allocator cannot
        append in bulk. Returns the time reached."""
        env, sched = self.env, self.scheduler
        alloc = sched.allocator
        append_all_measured = self._span_calls[0]
        rec = self.recorder
        decode_time_s = self._decode_time_by_paged[is_paged]
        num_groups, queues, blocked = sched.steady_counts()
        num_arrived = self.num_arrived
        feed = self.feed
        horizon_s = min(feed.next_arrival_s, self.limit_s)
        check = self.check
        #: when the last step of the span started (``Scheduler.prev_step_start_s``)
        start_s = sched.prev_step_start_s
        while num_ticks > 0:
            last = num_ticks - 1
            # the ends of steps whose clock tick is deferred: the scheduler ticks them in
            # one call (``Scheduler.tick_run``) before anything reads its clock
            ends: list[float] = []
            # steps before this one end before the horizon and do nothing but decode
            # (under check_invariants, none: every step checks)
            plain_until = 0 if check else last
            for i in range(num_ticks):
                measured = append_all_measured(blocked)
                copied = 0
                if measured is not None:
                    num_seqs, num_slots, num_blocks, usage_slots = measured
                    duration_s = decode_time_s(num_seqs, num_slots, num_blocks)
                else:
                    # the appends copy blocks (forks sharing a last block), or the step
                    # is not a bulk decode (then the per-step path takes it)
                    copying = self._copying_step(blocked, is_paged)
                    if copying is None:
                        if ends:
                            sched.tick_run(ends)
                        self.last_event_s = t
                        sched.prev_step_start_s = start_s
                        return t
                    num_seqs, usage_slots, copied, duration_s = copying
                end_s = t + duration_s
                if i < plain_until and end_s < horizon_s and not copied:
                    ends.append(end_s)
                    rec.record_decode(t, duration_s, num_groups, num_seqs, queues, usage_slots)
                    start_s = t
                    t = end_s
                    continue
                arrived = False
                if end_s >= horizon_s:
                    if ends:  # the time limit may end the run in this yield
                        sched.tick_run(ends)
                        ends = []
                    yield timeout_at(env, end_s)
                    horizon_s = min(feed.next_arrival_s, self.limit_s)
                    # requests arrive only while SimPy runs other processes
                    arrived = self.num_arrived != num_arrived
                ends.append(end_s)
                finished = False
                if i == last or check:
                    sched.tick_run(ends)
                    ends = []
                    if i == last and sched.finish_due(end_s):
                        finished = True
                        self._collect_done()
                    if check:
                        alloc.check_invariants()
                        sched.check_invariants()
                if copied:
                    rec.record_copies(t, copied)
                rec.record_decode(t, duration_s, num_groups, num_seqs, queues, usage_slots)
                start_s = t
                t = end_s
                if arrived or finished:
                    break
            if ends:
                sched.tick_run(ends)
            # a request arrived (the scheduler says whether it changes the next steps:
            # ``Scheduler.add``) or groups finished: go on if the run is still steady
            num_ticks = sched.steady_ticks()
            if num_ticks > 0:
                num_groups, queues, blocked = sched.steady_counts()
                num_arrived = self.num_arrived
        self.last_event_s = t
        sched.prev_step_start_s = start_s
        return t

    def _copying_step(
        self, blocked: bool, is_paged: bool
    ) -> tuple[int, tuple[int, int, int, int, int, int], int, float] | None:
        """A span's step whose appends copy blocks, priced by the cost model's general sum
        with its copies: (sequences, usage in slots, blocks copied, duration), or None when
        the step is not a bulk decode (``_decode_span``)."""
        copying = self._span_calls[1](blocked)
        if copying is None:
            return None
        num_seqs, num_slots, num_blocks, usage_slots, copied = copying
        duration_s = self.step_time_s(
            BatchPlan(
                num_decode_seqs=num_seqs,
                decode_context_sum=num_slots,
                decode_num_blocks=num_blocks,
                num_copied_blocks=copied,
                block_size=self.scheduler.allocator.block_size,
                is_paged=is_paged,
            )
        )
        return num_seqs, usage_slots, copied, duration_s

    def _collect_done(self) -> None:
        done = self.scheduler.drain_done()
        if done:
            on_done = self.on_done
            for group in done:
                on_done(group)
