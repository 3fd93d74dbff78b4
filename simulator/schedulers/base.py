"""What every scheduler shares: the queues, the step record, and a group's progress.

A scheduler owns the request queues and talks to memory only through the allocator
interface (``allocators/base.py``). The engine drives it with two calls per step::

    step = scheduler.schedule(now_s)       # who runs, which slots; a Step record
    ... the step takes cost_model.step_time_s(step.plan) seconds ...
    scheduler.finish_step(step, now_s)     # tokens generated, forks, finishes, frees

``schedule`` returns a :class:`Step`: the BatchPlan (what the cost model needs), the
memory breakdown the step runs in, and the counts the metrics record (groups in the
batch, queue lengths, blocked or not, prefix-cache hits). The scheduler remembers which
groups it put in the step. Groups that end (finished, rejected) are collected and
handed to the metrics with :meth:`drain_done`.

Progress of a group after a step, the same for every scheduler:

- one token per sequence (the prefill step generates the first token);
- after the first prefill of a request with ``n`` > 1 samples, the prompt's sequence
  forks ``n - 1`` times (vLLM v0: the prompt is computed once);
- beam search keeps ``beam_width`` beams every step. With no model to score them,
  the parent of each of the ``beam_width`` candidates is drawn from the run's seeded
  generator by the ancestry model (``schedulers/ancestry.py``): uniformly, with
  replacement, among the current beams (``scheduler.beam_keep_prob`` = 0, the
  default), or, with probability ``beam_keep_prob``, a candidate is its own beam's
  continuation. As in the paper's prototype, a parent chosen c times continues as the
  first of them and forks c - 1 children; parents never chosen are freed first
  (a contiguous allocator forks into the regions they leave). The coalescing ancestry
  (beams share long prefixes) is what the paper's beam-sharing savings come from;
- when the group has generated ``output_len`` tokens it is finished (no forks on the
  last step) and, unless the scheduler holds memory longer, its sequences are freed.

Within a step, groups are finished (and their memory freed) in the batch's order:
the prompts prefilled, in admission order; then the decoding groups by arrival; then
groups swapped in during the step, by arrival. The order matters: it decides which
blocks the LIFO free list and the prefix cache's evictor hand out next.

Speed. Schedulers whose running groups all decode in every step (``rides_clock``:
vllm, orca) keep those groups on a :class:`DecodeClock` (``simulator.request``): a step
ticks it once instead of advancing each group, a heap says at which tick each group
finishes, the allocator appends one slot to every sequence in bulk
(``can_append_all`` / ``append_slot_all``) and the plan's totals come from the
allocator's running totals (``decode_totals``). A decode step then costs O(1) plus the
groups that need work of their own (finishing, forking, beams). When the bulk
condition does not hold, the scheduler takes the per-group path of the same rule.
A step's beam groups draw their parents ahead, together (``ancestry.UniformDraws``:
the values of one ``rng.integers`` call each, from 32-bit values the generator gives
out in chunks), a drawn row's outcome is remembered (a width-4 step has 256), and each
group frees and forks in one allocator call (``free_and_fork``) in which a child takes
the id of a beam freed in the same step: a paged allocator then keeps the beams in its
running totals and leaves the copy of a shared last block to the next bulk append.

Steady runs. A step whose decisions the next steps would repeat exactly (a bulk decode
of every running group, nothing to admit, swap in or advance by hand) is *steady*;
:meth:`Scheduler.steady_ticks` says for how many steps, up to the next finish. A
decode step sets it from its own decisions (``schedule``); a step after which groups
finished, forked or started riding sets it when :meth:`Scheduler._steady_after_advance`
holds (nothing waits, nothing is swapped out; for vllm also: nothing is swapped out
and the head of the queue waits for memory, and a request that arrives behind such a
head leaves the run steady). The engine runs those steps through
:meth:`Scheduler.tick`, :meth:`Scheduler.finish_due` and the allocator's
``append_all_measured``, without calling ``schedule``; a step whose appends copy
blocks goes through ``append_all_copying`` (the same append, with its copies counted
for the cost model and the recorder). The allocator refuses (None) when a swap or an
earlier copy waits to be drained, or memory runs short for the bulk path; such a step
goes through ``schedule``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from operator import attrgetter
from typing import Any, ClassVar, Final

import numpy as np
from mypy_extensions import mypyc_attr

from pagesim.allocators.base import (
    AllocRequest,
    DecodeTotals,
    KVAllocator,
    MemoryUsage,
)
from pagesim.allocators.status import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.plan import BatchPlan, Prefill
from pagesim.simulator.request import (
    FINISHED,
    REJECTED,
    RUNNING,
    SWAPPED,
    UNFINISHED,
    WAITING,
    DecodeClock,
    SequenceGroup,
)
from pagesim.simulator.schedulers.ancestry import BeamPlan, UniformDraws, beam_parents, beam_plan
from pagesim.simulator.spec import SchedulerSpec
from pagesim.simulator.token_gaps import TokenGaps

#: beam steps with more possible parent draws than this (beams ** width; width 5 has
#: 3,125) are planned each time instead of remembered, so memory stays bounded
MAX_REMEMBERED_BEAM_PLANS: Final = 4096


def reservation_never_fits_reason(
    kind: str, prompt_len: int, output_len: int, num_seqs: int, capacity_slots: int
) -> str:
    return (
        f"a {kind} reservation for prompt {prompt_len} + output {output_len} "
        f"(x{num_seqs} sequences) can never fit the {capacity_slots}-slot KV pool"
    )


def too_many_seqs_reason(num_seqs: int, max_num_seqs: int) -> str:
    return f"{num_seqs} sequences exceed scheduler.max_num_seqs = {max_num_seqs}"


def _batch_order(work: tuple[int, int, SequenceGroup]) -> tuple[int, int]:
    return work[0], work[1]


#: FCFS sort key, a group's ``group_id``: request ids are in arrival order (trace
#: contract). An attribute getter, not a function: it keys every preemption's visit.
by_arrival: Callable[[SequenceGroup], int] = attrgetter("group_id")


class Step:
    """What one ``schedule()`` decided, for the engine, the cost model and the metrics.

    ``plan`` is empty when nothing can run now; ``usage_slots`` is the memory breakdown
    the step (or the idle period) runs in, as ``KVAllocator.usage_slots`` gives it, of a
    pool of ``capacity_slots`` (``usage``: as a MemoryUsage); the queue lengths are taken
    after the schedule; ``num_groups`` counts the groups in the batch (prefills and
    decodes) and ``num_decode_groups`` those decoding; ``is_blocked``: a request waited
    for memory it could not get; ``prefix_hit_tokens``: prompt tokens served from the
    prefix cache to the groups admitted now. (A plain class, not a named tuple: compiled,
    the one made every step is built without Python's tuple constructor.)
    """

    __slots__ = (
        "plan",
        "capacity_slots",
        "usage_slots",
        "num_groups",
        "num_decode_groups",
        "num_waiting",
        "num_running",
        "num_swapped",
        "is_blocked",
        "prefix_hit_tokens",
    )

    def __init__(
        self,
        plan: BatchPlan,
        capacity_slots: int,
        usage_slots: tuple[int, int, int, int, int, int],
        num_groups: int,
        num_decode_groups: int,
        num_waiting: int,
        num_running: int,
        num_swapped: int,
        is_blocked: bool,
        prefix_hit_tokens: int = 0,
    ) -> None:
        self.plan = plan
        self.capacity_slots = capacity_slots
        self.usage_slots = usage_slots
        self.num_groups = num_groups
        self.num_decode_groups = num_decode_groups
        self.num_waiting = num_waiting
        self.num_running = num_running
        self.num_swapped = num_swapped
        self.is_blocked = is_blocked
        self.prefix_hit_tokens = prefix_hit_tokens

    @property
    def usage(self) -> MemoryUsage:
        return MemoryUsage(self.capacity_slots, *self.usage_slots)

    @property
    def is_empty(self) -> bool:
        return self.plan.is_empty

    @property
    def has_work(self) -> bool:
        """Requests are still queued, running or swapped out after this schedule."""
        return bool(self.num_waiting or self.num_running or self.num_swapped)


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class Scheduler(ABC):
    """Base of the vllm / orca / static schedulers (see the module docstring)."""

    kind: ClassVar[str] = "abstract"
    #: the allocators it can run on: paged (True) or contiguous (False); and why
    needs_paged: ClassVar[bool] = True
    pairing_note: ClassVar[str] = ""
    #: whether its running groups all decode in every step (module docstring: speed)
    rides_clock: ClassVar[bool] = False
    #: after a step that was not steady and in which no group finished, forked or
    #: started riding, ask :meth:`_steady_after_advance` too (off: such a step is
    #: always followed by a ``schedule()``; the tests compare the two)
    steady_after_plain_step: ClassVar[bool] = True

    def __init__(
        self,
        spec: SchedulerSpec,
        allocator: KVAllocator,
        *,
        max_model_len: int,
        rng: np.random.Generator,
    ) -> None:
        self.spec = spec
        self.allocator = allocator
        self.max_model_len = max_model_len
        self.rng = rng
        self._beam_keep_prob = spec.beam_keep_prob
        #: the spec's caps and preemption mode, read once (a pydantic model's field is
        #: read through its class's ``__getattr__`` hook, at every admission check)
        self.max_num_seqs = spec.max_num_seqs
        self.max_num_batched_tokens = spec.max_num_batched_tokens
        self.preemption_mode = spec.preemption_mode
        #: the allocator's constants, read once (each step's record carries them)
        self._capacity_slots = allocator.capacity_slots
        self._block_size = allocator.block_size
        self._is_paged = allocator.is_paged
        #: the uniform parents' draws (``beam_keep_prob`` = 0): ``rng.integers`` calls'
        #: values, the generator read ahead (``ancestry.UniformDraws``)
        self._uniform = UniformDraws(rng)
        #: the beam steps of the current ``_advance``, planned ahead, by group (by
        #: identity: no id is boxed for the look-up)
        self._beam_plan_by_group: dict[SequenceGroup, BeamPlan] = {}
        #: beam plans by (beams, width), then by parents drawn, the parents of slots
        #: 0, 1, ... as the digits of a number in base ``beams`` (``_beam_plans_of``)
        self._beam_plans: dict[tuple[int, int], dict[int, BeamPlan]] = {}
        self.waiting: deque[SequenceGroup] = deque()
        #: running groups in the order they (re)started running
        self.running: dict[SequenceGroup, None] = {}
        self.swapped: list[SequenceGroup] = []
        self.num_preemptions = 0
        self.clock = DecodeClock()
        #: running groups that do not ride the clock (each advanced at the end of a step)
        self._individual: dict[SequenceGroup, None] = {}
        self._num_running_seqs = 0
        self._finish_events: list[tuple[int, int, int, SequenceGroup]] = []
        self._ride_id_by_group: dict[int, int] = {}
        self._next_ride_id = 0
        #: what the last schedule() put in the step (see finish_step)
        self._prefilled: list[SequenceGroup] = []
        self._swapped_in: list[SequenceGroup] = []
        self._ticks = False
        #: the last schedule() was a bulk decode whose decisions repeat (see steady_ticks)
        self._steady = False
        #: whether a request waited for memory in the step that set ``_steady``
        self._steady_blocked = False
        #: every inter-token gap, for vLLM's ITL statistics (simulator/token_gaps.py)
        self.token_gaps = TokenGaps()
        #: riders since before the last tick share its time as their last token's
        self._num_riders = 0
        self._last_tick_s = 0.0
        #: riders that joined since the last tick (their last token is their own)
        self._fresh_riders: dict[SequenceGroup, None] = {}
        self._done: list[SequenceGroup] = []
        self._next_seq_id = 0
        #: prompt tokens served from the prefix cache, per group admitted in this schedule()
        self._prefill_cached: dict[int, int] = {}
        #: times memory was given back to the allocator (``free``, ``free_and_fork``,
        #: ``swap_out``): nothing else lets more of it be free
        self._num_frees = 0
        #: the last admission check's (group, tokens generated, ``alloc_request(-1)``)
        self._checked_request: tuple[SequenceGroup, int, AllocRequest] | None = None
        self._init_state()

    def _init_state(self) -> None:  # noqa: B027 - a hook, empty here
        """A subclass's own state, set up at the end of ``__init__`` (so that every
        scheduler is built with the base's arguments); an override calls this first."""

    # ---- the engine's interface -----------------------------------------------------

    def add(self, group: SequenceGroup) -> None:
        """A request arrives: it joins the tail of the waiting queue."""
        group.status = WAITING
        self.waiting.append(group)
        self._steady = False  # the next schedule() considers it

    @abstractmethod
    def schedule(self, now_s: float) -> Step:
        """Choose the next step's batch; an empty plan means nothing can run now."""

    def finish_step(self, step: Step, now_s: float) -> None:
        """Every group in the step generated one token per sequence (module docstring)."""
        work = [(0, i, g) for i, g in enumerate(self._prefilled)] if self._prefilled else []
        if self._ticks:
            self.tick(now_s)
            swapped_in = {g.group_id for g in self._swapped_in} if self._swapped_in else ()
            for group in self._pop_due_riders():
                group_id = group.group_id
                work.append((2 if group_id in swapped_in else 1, group_id, group))
            if len(self._individual) > len(self._prefilled):
                prefilled = {g.group_id for g in self._prefilled}
                for group in self._individual:
                    group_id = group.group_id
                    if group_id not in prefilled:
                        work.append((2 if group_id in swapped_in else 1, group_id, group))
            if len(work) > 1:
                work.sort(key=_batch_order)
        if self._swapped_in:
            self._swapped_in = []
        if not work:
            # e.g. a step that preempted: nothing changed since, so the rule that decides
            # after an advance decides here too whether the next schedule() is steady
            if not self._steady and self.steady_after_plain_step:
                self._steady_blocked = False
                self._steady = self._steady_after_advance(False)
            return
        self._prefilled = []
        self._advance(work, now_s)

    def _pop_due_riders(self) -> list[SequenceGroup]:
        """The riders whose last token came at this tick (the heap's current entries)."""
        ticks = self.clock.ticks
        events = self._finish_events
        due = []
        if events and events[0][0] <= ticks:
            ride_ids = self._ride_id_by_group
            while events and events[0][0] <= ticks:
                _, group_id, ride_id, group = heappop(events)
                if ride_ids.get(group_id) == ride_id:
                    due.append(group)
        return due

    def finish_due(self, now_s: float) -> bool:
        """After :meth:`tick` in a steady run: finish the riders that are done, as
        ``finish_step`` would (in arrival order); True if any was. The run stays steady
        (:meth:`steady_ticks` counts on) when :meth:`_steady_after_finish` says so."""
        due = self._pop_due_riders()
        if not due:
            return False
        if len(due) == 1:
            self._advance([(1, due[0].group_id, due[0])], now_s)
        else:
            self._advance(sorted([(1, g.group_id, g) for g in due]), now_s)
        return True

    def _steady_after_advance(self, ended: bool) -> bool:
        """Whether the next ``schedule()``, after groups finished, forked or started
        riding, is a steady decode (:meth:`steady_ticks`) with nothing blocked: yes for a
        scheduler whose groups ride the clock when nothing waits and nothing is swapped
        out (nothing to admit or bring back: every running group appends a slot and
        decodes). ``ended``: a group finished or was rejected in the advance (its memory
        is free again). A scheduler whose rules differ overrides this (False is always
        safe); one that answers True with a request blocked sets ``_steady_blocked``."""
        return self.rides_clock and not self.waiting and not self.swapped

    def steady_counts(self) -> tuple[int, tuple[int, int, int], bool]:
        """For a steady run's steps: the groups decoding, the queue lengths (waiting,
        running, swapped) and whether a request waits for memory, as a ``schedule()``
        now would put them in its ``Step``."""
        num_running = len(self.running)
        return (
            num_running,
            (len(self.waiting), num_running, len(self.swapped)),
            self._steady_blocked,
        )

    def _advance(self, work: list[tuple[int, int, SequenceGroup]], now_s: float) -> None:
        """Finish, generate, fork or start riding, in the batch's order (``work`` sorted);
        the next step is steady only if :meth:`_steady_after_advance` says so."""
        num_done = len(self._done)
        if not self._beam_keep_prob:
            self._draw_beam_parents(work)
        rides_clock = self.rides_clock
        for _, _, group in work:
            if group.clock is not None:  # a rider at its last token
                self._finish_group(group, now_s)
                continue
            self._generate_token(group, now_s)
            if group.is_done:
                self._finish_group(group, now_s)
            elif rides_clock and group.beam_width == 1:
                del self._individual[group]
                self._ride(group)
        self._steady_blocked = False
        self._steady = self._steady_after_advance(len(self._done) != num_done)

    def steady_ticks(self) -> int:
        """After a decode step: how many more steps would repeat its decisions exactly,
        as long as every sequence can take a slot in bulk (the allocator answers each
        step) and nothing arrives (the engine watches): every group rides the clock,
        nothing is swapped out, and the head of the queue (if any) stays blocked, since
        memory only shrinks and the batch does not change, up to and including the step
        in which the next group finishes. 0: none. The engine runs those steps with
        :meth:`tick` and, at the last, :meth:`finish_due` (``Engine`` decode spans)."""
        if not self._steady or self._individual:
            return 0
        events = self._finish_events
        while events and self._ride_id_by_group.get(events[0][1]) != events[0][2]:
            heappop(events)
        if not events:
            return 0
        return events[0][0] - self.clock.ticks

    def tick(self, now_s: float) -> None:
        """Every rider generates a token at ``now_s`` (a decode step ended): one gap for
        those that ticked at the last tick too, one each for those that joined since.
        The engine calls it alone for the steps of a steady run (:meth:`steady_ticks`)."""
        self.clock.ticks += 1
        fresh = self._fresh_riders
        num_old = self._num_riders - len(fresh)
        if num_old:
            self.token_gaps.add_run(now_s - self._last_tick_s, num_old)
        if fresh:
            for group in fresh:
                self.token_gaps.add(now_s - group.last_token_s)
            fresh.clear()
        self._last_tick_s = now_s

    def tick_run(self, ends_s: list[float]) -> None:
        """:meth:`tick` at each time of ``ends_s`` in turn (the steps of a steady run),
        in one call: the same clock and the same gaps."""
        start = 0
        if self._fresh_riders:
            self.tick(ends_s[0])
            start = 1
            if len(ends_s) == 1:
                return
        self.clock.ticks += len(ends_s) - start
        if self._num_riders:
            self.token_gaps.add_tick_runs(
                self._last_tick_s, ends_s[start:] if start else ends_s, self._num_riders
            )
        self._last_tick_s = ends_s[-1]

    def _finish_group(self, group: SequenceGroup, now_s: float) -> None:
        self._stop_running(group)
        self._finish(group, now_s)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def drain_done(self) -> list[SequenceGroup]:
        """Groups that ended (finished or rejected) since the last call."""
        done = self._done
        if done:
            self._done = []
        return done

    def stop(self, reason: str) -> list[SequenceGroup]:
        """The run is over (time limit): every group still queued or running is unfinished."""
        left = sorted([*self.waiting, *self.running, *self.swapped], key=by_arrival)
        for group in left:
            if group.is_riding:
                group.stop_riding()
            group.status = UNFINISHED
            group.reason = reason
        self.waiting.clear()
        self.running = {}
        self.swapped = []
        return left

    def check_invariants(self) -> None:
        """Queues are disjoint and consistent with each group's status and the allocator."""
        seen: set[int] = set()
        for queue, status in (
            (self.waiting, WAITING),
            (self.running, RUNNING),
            (self.swapped, SWAPPED),
        ):
            for group in queue:
                if group.status != status:
                    raise InvariantError(
                        f"group {group.group_id} in {status} queue has status {group.status}"
                    )
                if group.group_id in seen:
                    raise InvariantError(f"group {group.group_id} is in two queues")
                seen.add(group.group_id)
        for group in self.waiting:
            if group.seq_ids or group.is_riding:
                raise InvariantError(
                    f"waiting group {group.group_id} holds sequences {group.seq_ids} "
                    f"or rides the clock"
                )
        if self._num_running_seqs != sum(g.max_num_seqs for g in self.running):
            raise InvariantError("running sequence count out of date")
        if not set(self._individual) <= set(self.running):
            raise InvariantError("a group advanced individually is not running")
        for group in (*self.running, *self.swapped):
            if sorted(self.allocator.seq_ids(group.group_id)) != sorted(group.seq_ids):
                raise InvariantError(
                    f"group {group.group_id} has sequences {group.seq_ids}, the allocator "
                    f"{self.allocator.seq_ids(group.group_id)}"
                )
        for group in self.running:
            if group.is_riding == (group in self._individual):
                raise InvariantError(f"group {group.group_id} rides and is advanced by hand")
            if group.is_done:
                continue
            for seq_id in group.seq_ids:
                held = self.allocator.num_slots(seq_id)
                if held not in (group.num_context_tokens - 1, group.num_context_tokens):
                    raise InvariantError(
                        f"seq {seq_id} of group {group.group_id} holds {held} slots, "
                        f"context is {group.num_context_tokens}"
                    )

    # ---- helpers for subclasses -------------------------------------------------------

    def _start_running(self, group: SequenceGroup) -> None:
        """``group`` holds its memory and is in the batch from this step on."""
        group.status = RUNNING
        self.running[group] = None
        self._num_running_seqs += group.max_num_seqs
        if self.rides_clock and group.beam_width == 1 and group.num_generated > 0:
            self._ride(group)
        else:
            self._individual[group] = None

    def _stop_running(self, group: SequenceGroup) -> None:
        del self.running[group]
        self._num_running_seqs -= group.max_num_seqs
        if group.clock is not None:
            self._stop_riding(group)
        else:
            del self._individual[group]

    def _ride(self, group: SequenceGroup) -> None:
        clock = self.clock
        group.ride(clock)
        self._num_riders += 1
        self._fresh_riders[group] = None
        ride_id = self._next_ride_id
        self._next_ride_id = ride_id + 1
        group_id = group.group_id
        self._ride_id_by_group[group_id] = ride_id
        done_at = clock.ticks + group.output_len - group.num_generated
        heappush(self._finish_events, (done_at, group_id, ride_id, group))

    def _stop_riding(self, group: SequenceGroup) -> None:
        if group in self._fresh_riders:
            del self._fresh_riders[group]
        else:
            group.last_token_s = self._last_tick_s  # it ticked at the last tick
        self._num_riders -= 1
        group.stop_riding()
        del self._ride_id_by_group[group.group_id]

    def _new_seq_id(self, group: SequenceGroup) -> int:
        seq_id = self._next_seq_id
        self._next_seq_id += 1
        group.seq_ids.append(seq_id)
        return seq_id

    def _free_group(self, group: SequenceGroup) -> None:
        """Free the group's sequences, the newest first (several in one allocator call)."""
        seq_ids = group.seq_ids
        if len(seq_ids) == 1:
            self.allocator.free(seq_ids[0])
        else:
            self.allocator.free_and_fork(seq_ids[::-1], [])
        group.seq_ids = []
        self._num_frees += 1

    def _too_many_seqs(self, group: SequenceGroup) -> bool:
        """``group`` forks into more sequences than ``max_num_seqs`` (it can never run)."""
        return group.max_num_seqs > self.max_num_seqs

    def _reject_if_too_many_seqs(self, group: SequenceGroup) -> bool:
        """Reject the head of ``waiting`` when it forks into more sequences than the cap."""
        if not self._too_many_seqs(group):
            return False
        self.waiting.popleft()
        self._reject(group, too_many_seqs_reason(group.max_num_seqs, self.max_num_seqs))
        return True

    def _admit_head(self) -> AllocStatus:
        """Try the head of the waiting queue against a reserving allocator (Orca, static).

        OK: allocated and running; NEVER: rejected with a reason (the caller moves on);
        LATER: left waiting (head-of-line blocking).
        """
        group = self.waiting[0]
        status = self._admission_status(group)
        if status is AllocStatus.NEVER:
            self.waiting.popleft()
            alloc = self.allocator
            self._reject(
                group,
                reservation_never_fits_reason(
                    alloc.kind,
                    group.prompt_len,
                    group.output_len,
                    group.max_num_seqs,
                    alloc.capacity_slots,
                ),
            )
        elif status is AllocStatus.OK:
            self.waiting.popleft()
            self._allocate(group)
        return status

    def _admission_status(
        self, group: SequenceGroup, req: AllocRequest | None = None
    ) -> AllocStatus:
        """The allocator's answer for ``group``'s admission (``req``: its
        :meth:`_admission_request`, if the caller has it)."""
        true_len = group.output_len if self.allocator.needs_true_output_len else None
        return self.allocator.can_allocate(req or self._admission_request(group), true_len)

    def _admission_request(self, group: SequenceGroup) -> AllocRequest:
        """``group.alloc_request(-1)``, what an admission check asks the allocator: the
        same request while the group waits with the same progress (the head of the
        queue is checked again at many steps), so it is built once and reused."""
        checked = self._checked_request
        num_generated = group.num_generated
        if checked is not None and checked[0] is group and checked[1] == num_generated:
            return checked[2]
        req = group.alloc_request(-1)
        self._checked_request = (group, num_generated, req)
        return req

    def _allocate(self, group: SequenceGroup) -> None:
        """Admit ``group`` (its admission check said OK): one sequence holds the prompt,
        and it is prefilled in this step."""
        seq_id = self._new_seq_id(group)
        true_len = group.output_len if self.allocator.needs_true_output_len else None
        allocation = self.allocator.allocate(group.alloc_request(seq_id), true_len)
        if allocation is None:
            raise InvariantError(
                f"{self.allocator.kind}: can_allocate said OK for group {group.group_id} "
                "but allocate returned None"
            )
        group.num_cached_tokens += allocation.num_cached_tokens
        self._prefill_cached[group.group_id] = allocation.num_cached_tokens
        self._prefilled.append(group)
        self.running[group] = None
        self._num_running_seqs += group.max_num_seqs
        self._individual[group] = None
        group.status = RUNNING

    def _reject(self, group: SequenceGroup, reason: str) -> None:
        """End ``group`` without serving it (it is reported with ``reason``, never lost)."""
        if group.seq_ids:
            self._free_group(group)
        group.status = REJECTED
        group.reason = reason
        self._done.append(group)

    def _finish(self, group: SequenceGroup, now_s: float, *, free: bool = True) -> None:
        if free:
            self._free_group(group)
        group.status = FINISHED
        group.finish_s = now_s
        self._done.append(group)

    def _step(
        self,
        *,
        decode_groups: int,
        decode: DecodeTotals | tuple[int, int, int] = (0, 0, 0),
        is_blocked: bool,
        ticks: bool,
        steady: bool = False,
    ) -> Step:
        """The step's record: the prefills admitted in this schedule(), ``decode_groups``
        groups decoding with ``decode`` = (sequences, context sum, blocks); drains the
        allocator's copies and swaps into the plan. ``ticks``: the step advances the
        groups that ride the clock; ``steady``: see :meth:`steady_ticks`."""
        alloc = self.allocator
        self._ticks = ticks
        self._steady = steady
        self._steady_blocked = is_blocked
        hits = 0
        if self._prefilled:
            pre = Prefill()
            for group in self._prefilled:
                ctx = group.num_prefill_tokens
                cached = self._prefill_cached.pop(group.group_id, 0)
                hits += cached
                pre.add(ctx - cached, ctx)
            prefill = self._prefill_totals(pre)
        else:
            prefill = (0, 0, 0, 0.0)
        transfers = alloc.drain_transfers()
        # every field in order, as the named tuple's constructor builds it (tuple.__new__,
        # without its Python-level __new__: one plan per step)
        plan = tuple.__new__(
            BatchPlan,
            (
                *prefill,
                *decode,
                transfers.num_copied_blocks,
                transfers.num_swapped_in_blocks,
                transfers.num_swapped_out_blocks,
                self._block_size,
                self._is_paged,
            ),
        )
        return Step(
            plan,
            self._capacity_slots,
            alloc.usage_slots(is_blocked),
            prefill[0] + decode_groups,
            decode_groups,
            len(self.waiting),
            len(self.running),
            len(self.swapped),
            is_blocked,
            hits,
        )

    def _prefill_totals(self, pre: Prefill) -> tuple[int, int, int, float]:
        """The plan's prefill fields for the prompts admitted in this schedule() (``pre``:
        their sums); a scheduler whose prefill computes more (vLLM v0.2's padding)
        overrides it."""
        return (pre.num_seqs, pre.num_tokens, pre.context_sum, pre.scores)

    def _append_slots(self, group: SequenceGroup) -> None:
        for seq_id in group.seq_ids:
            self.allocator.append_slot(seq_id)

    def _generate_token(self, group: SequenceGroup, now_s: float) -> None:
        group.num_generated += 1
        if math.isnan(group.first_token_s):  # a recomputed group keeps its first-token time
            group.first_token_s = now_s
        else:
            self.token_gaps.add(now_s - group.last_token_s)
        group.last_token_s = now_s
        if group.is_done:
            return
        if group.beam_width > 1:
            self._beam_step(group)
        elif group.n > 1 and len(group.seq_ids) == 1:
            parent = group.seq_ids[0]
            forks = [(parent, self._new_seq_id(group)) for _ in range(group.n - 1)]
            self.allocator.free_and_fork([], forks)

    def _draw_beam_parents(self, work: list[tuple[int, int, SequenceGroup]]) -> None:
        """The uniform parents (``beam_keep_prob`` = 0) of every beam step ``work`` will
        take, drawn ahead: consecutive groups with the same number of beams and width
        share one draw (``UniformDraws.integers``). numpy draws such values one at a
        time, so they are those of one ``rng.integers(0, beams, size=width)`` call per
        group in batch order (``tests/simulator/test_beam_ancestry.py``); a group with
        one beam draws nothing (a range of one value consumes no random numbers)."""
        batch: list[SequenceGroup] = []
        batch_shape = (0, 0)
        for _, _, group in work:
            width = group.beam_width
            if width == 1 or group.is_riding or group.num_generated + 1 >= group.output_len:
                continue  # no beam step: not beam search, or the token ends the group
            num_beams = len(group.seq_ids)
            if num_beams == 1:
                continue
            if (num_beams, width) != batch_shape:
                if batch:
                    self._plan_beam_steps(batch, batch_shape[0], batch_shape[1])
                batch = []
                batch_shape = (num_beams, width)
            batch.append(group)
        if batch:
            self._plan_beam_steps(batch, batch_shape[0], batch_shape[1])

    def _plan_beam_steps(self, groups: list[SequenceGroup], num_beams: int, width: int) -> None:
        """Draw the parents of ``groups`` (each ``num_beams`` beams, ``width`` slots) in
        one call and keep each group's :func:`beam_plan` for its ``_beam_step``."""
        values = self._uniform.integers(num_beams, len(groups) * width)
        plan_by_group = self._beam_plan_by_group
        if num_beams**width > MAX_REMEMBERED_BEAM_PLANS:
            for i, group in enumerate(groups):
                parents = values[i * width : (i + 1) * width]
                plan_by_group[group] = beam_plan(num_beams, parents)
            return
        plans = self._beam_plans_of(num_beams, width)
        start = 0
        for group in groups:
            end = start + width
            key = 0
            for i in range(start, end):
                key = key * num_beams + values[i]
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = beam_plan(num_beams, values[start:end])
            plan_by_group[group] = plan
            start = end

    def _beam_plans_of(self, num_beams: int, width: int) -> dict[int, BeamPlan]:
        """The :func:`beam_plan` of each parents drawn so far for this many beams and
        slots (a width-4 step has 256 outcomes: plans are remembered, not recounted;
        wider steps, past ``MAX_REMEMBERED_BEAM_PLANS`` outcomes, are counted each time)."""
        plans = self._beam_plans.get((num_beams, width))
        if plans is None:
            plans = self._beam_plans[num_beams, width] = {}
        return plans

    def _beam_step(self, group: SequenceGroup) -> None:
        """The module docstring's beam rule: unchosen beams are freed, a parent chosen c
        times continues and forks c - 1 children (``KVAllocator.free_and_fork``). The ids
        are handled as the objects the lists hold (``Any``: compiled, an ``int`` would be
        unboxed and each store would make a new object)."""
        beams: list[Any] = group.seq_ids
        num_beams = len(beams)
        width = group.beam_width
        plan = self._beam_plan_by_group.get(group)
        if plan is not None:
            del self._beam_plan_by_group[group]
        else:  # not drawn ahead: keep_prob > 0, one beam, or the static scheduler
            if self._beam_keep_prob:  # draws its keeps even for one beam
                parents = beam_parents(self.rng, num_beams, width, self._beam_keep_prob).tolist()
            else:  # uniform (one beam: every slot continues it, and nothing is drawn)
                parents = self._uniform.integers(num_beams, width)
            plan = beam_plan(num_beams, parents)
        freed_positions, kept = plan
        if not freed_positions and num_beams == width:
            return  # every beam continues its own line: nothing is freed or forked
        freed: list[Any] = [beams[i] for i in freed_positions]
        seq_ids: list[Any] = []
        forks: list[tuple[Any, Any]] = []
        beam: Any
        child: Any
        next_seq_id = self._next_seq_id
        num_reused = 0
        for position, num_children in kept:
            beam = beams[position]
            seq_ids.append(beam)
            for _ in range(num_children):
                # a child takes the id of a freed beam while there is one (the i-th fork
                # the i-th freed id: ``KVAllocator.free_and_fork``), else a new one
                if num_reused < len(freed):
                    child = freed[num_reused]
                    num_reused += 1
                else:
                    child = next_seq_id
                    next_seq_id += 1
                forks.append((beam, child))
                seq_ids.append(child)
        self._next_seq_id = next_seq_id
        group.seq_ids = seq_ids
        # the beams not chosen are freed first: a contiguous allocator forks into their regions
        self.allocator.free_and_fork(freed, forks)
        self._num_frees += 1
