"""The decode clock's riders and the steady runs of steps: how a decode step costs O(1).

``DecodeRiders`` is the base of every scheduler (``Scheduler`` in ``base.py`` adds the
queues and the rules, ``BeamSteps`` in ``beams.py`` the beam step); what is here
decides nothing, it advances the groups the rules put on the clock, and says how many
steps will repeat the last one's decisions.

Riders. Schedulers whose running groups all decode in every step (``rides_clock``:
vllm, orca) keep those groups on a :class:`DecodeClock` (``simulator.request``): a step
ticks it once instead of advancing each group, a heap says at which tick each group
finishes, the allocator appends one slot to every sequence in bulk
(``can_append_all`` / ``append_slot_all``) and the plan's totals come from the
allocator's running totals (``decode_totals``). A decode step then costs O(1) plus the
groups that need work of their own (finishing, forking, beams). When the bulk
condition does not hold, the scheduler takes the per-group path of the same rule.

Steady runs. A step whose decisions the next steps would repeat exactly (a bulk decode
of every running group, nothing to admit, swap in or advance by hand) is *steady*;
:meth:`DecodeRiders.steady_ticks` says for how many steps, up to the next finish. A
decode step sets it from its own decisions (``schedule``); a step after which groups
finished, forked or started riding sets it when :meth:`Scheduler._steady_after_advance`
holds (nothing waits, nothing is swapped out; for vllm also: nothing is swapped out
and the head of the queue waits for memory, and a request that arrives behind such a
head leaves the run steady). The engine runs those steps through
:meth:`DecodeRiders.tick_run`, :meth:`DecodeRiders.finish_due` and the allocator's
``append_all_measured``, without calling ``schedule``; a step whose appends copy
blocks goes through ``append_all_copying`` (the same append, with its copies counted
for the cost model and the recorder). The allocator refuses (None) when a swap or an
earlier copy waits to be drained, or memory runs short for the bulk path; such a step
goes through ``schedule``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from heapq import heappop, heappush

from mypy_extensions import mypyc_attr

from pagesim.simulator.request import DecodeClock, SequenceGroup
from pagesim.simulator.token_gaps import TokenGaps


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass its subclasses
class DecodeRiders(ABC):
    """The groups riding the decode clock, their finishes, and the steady runs (module
    docstring)."""

    def __init__(self) -> None:
        self.clock = DecodeClock()
        #: running groups that do not ride the clock (each advanced at the end of a step)
        self._individual: dict[SequenceGroup, None] = {}
        self._finish_events: list[tuple[int, int, int, SequenceGroup]] = []
        self._ride_id_by_group: dict[int, int] = {}
        self._next_ride_id = 0
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

    @abstractmethod
    def _advance(self, work: list[tuple[int, int, SequenceGroup]], now_s: float) -> None:
        """Finish, generate, fork or start riding the groups of ``work`` (``Scheduler``)."""

    # ---- riding the clock -------------------------------------------------------------
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

    # ---- steady runs (the engine's decode spans) --------------------------------------
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

    def finish_due(self, now_s: float) -> bool:
        """After :meth:`tick` in a steady run: finish the riders that are done, as
        ``finish_step`` would (in arrival order); True if any was. The run stays steady
        (:meth:`steady_ticks` counts on) when ``Scheduler._steady_after_advance`` says so."""
        due = self._pop_due_riders()
        if not due:
            return False
        if len(due) == 1:
            self._advance([(1, due[0].group_id, due[0])], now_s)
        else:
            self._advance(sorted([(1, g.group_id, g) for g in due]), now_s)
        return True
