"""What every scheduler shares: the queues, admission, and a group's progress.

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

The speed of it is in the layers below ``Scheduler``: ``DecodeRiders`` (``riders.py``:
the groups that ride the decode clock, and the steady runs of steps the engine takes
without ``schedule()``) and ``BeamSteps`` (``beams.py``: the beam step, its parents
drawn ahead, one allocator call per group). The step record is ``step.py``'s
:class:`Step`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import deque
from collections.abc import Callable
from operator import attrgetter
from typing import ClassVar

import numpy as np
from mypy_extensions import mypyc_attr

from pagesim.allocators.base import AllocRequest, DecodeTotals, KVAllocator
from pagesim.allocators.status import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.plan import Prefill, plan_of
from pagesim.simulator.request import (
    FINISHED,
    REJECTED,
    RUNNING,
    SWAPPED,
    UNFINISHED,
    WAITING,
    SequenceGroup,
)
from pagesim.simulator.schedulers.beams import BeamSteps
from pagesim.simulator.schedulers.spec import SchedulerSpec
from pagesim.simulator.schedulers.step import Step


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


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class Scheduler(BeamSteps):
    """Base of the vllm / orca / static schedulers (see the module docstring)."""

    kind: ClassVar[str] = "abstract"
    #: the allocators it can run on: paged (True) or contiguous (False); and why
    needs_paged: ClassVar[bool] = True
    #: the verbs it speaks to memory: ``allocator`` (``KVAllocator``'s: can_allocate,
    #: append_slot, ...) or ``kv-cache-manager`` (vLLM V1's allocate_slots); it runs on
    #: the allocators with the same ``kv_interface`` (``simulator.spec.pairing_problem``)
    kv_interface: ClassVar[str] = "allocator"
    pairing_note: ClassVar[str] = ""
    #: whether its running groups all decode in every step (they ride the clock: riders.py)
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
        super().__init__(allocator, rng, spec.beam_keep_prob)
        self.spec = spec
        self.max_model_len = max_model_len
        #: the spec's caps and preemption mode (docs/compiled_modules.md: spec fields
        #: read once)
        self.max_num_seqs = spec.max_num_seqs
        self.max_num_batched_tokens = spec.max_num_batched_tokens
        self.preemption_mode = spec.preemption_mode
        #: the allocator's constants, read once (each step's record carries them)
        self._capacity_slots = allocator.capacity_slots
        self._block_size = allocator.block_size
        self._is_paged = allocator.is_paged
        self.waiting: deque[SequenceGroup] = deque()
        #: running groups in the order they (re)started running
        self.running: dict[SequenceGroup, None] = {}
        self.swapped: list[SequenceGroup] = []
        self.num_preemptions = 0
        self._num_running_seqs = 0
        #: what the last schedule() put in the step (see finish_step)
        self._prefilled: list[SequenceGroup] = []
        self._swapped_in: list[SequenceGroup] = []
        self._ticks = False
        self._done: list[SequenceGroup] = []
        #: prompt tokens served from the prefix cache, per group admitted in this schedule()
        self._prefill_cached: dict[int, int] = {}
        #: the last admission check's (group, tokens generated, ``alloc_request(-1)``)
        self._checked_request: tuple[SequenceGroup, int, AllocRequest] | None = None
        #: set by the engine: when the step that just ended started (inf: the engine was
        #: idle before this schedule()), and how long after its arrival a request reaches
        #: the scheduler (vllm-v1's async scheduling reads both)
        self.prev_step_start_s = math.inf
        self.arrival_delay_s = 0.0
        self._init_state()

    def _init_state(self) -> None:  # noqa: B027 - a hook, empty here
        """A subclass's own state, set up at the end of ``__init__`` (so that every
        scheduler is built with the base's arguments); an override calls this first."""

    # ---- the engine's interface -------------------------------------------------------
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
        """Queues are disjoint and consistent with each group's status and the allocator;
        each running sequence holds its context's slots (or all but the newest's)."""
        self._check_queues()
        for group in self.running:
            if group.is_done:
                continue
            for seq_id in group.seq_ids:
                held = self.allocator.num_slots(seq_id)
                if held not in (group.num_context_tokens - 1, group.num_context_tokens):
                    raise InvariantError(
                        f"seq {seq_id} of group {group.group_id} holds {held} slots, "
                        f"context is {group.num_context_tokens}"
                    )

    def _check_queues(self) -> None:
        """The queues' part of :meth:`check_invariants` (a scheduler whose running groups
        hold other slots checks those itself)."""
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
        prefill: tuple[int, int, int, float] | None = None,
        prefix_hit_tokens: int = 0,
    ) -> Step:
        """The step's record: the prefills admitted in this schedule() (or ``prefill`` =
        (prompts, tokens, context sum, scores) and ``prefix_hit_tokens``, from a scheduler
        that sums its prompt chunks itself), ``decode_groups`` groups decoding with
        ``decode`` = (sequences, context sum, blocks); drains the allocator's copies and
        swaps into the plan. ``ticks``: the step advances the groups that ride the
        clock; ``steady``: see :meth:`steady_ticks`."""
        alloc = self.allocator
        self._ticks = ticks
        self._steady = steady
        self._steady_blocked = is_blocked
        hits = prefix_hit_tokens
        if prefill is None:
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
        plan = plan_of(
            prefill,
            decode,
            transfers.num_copied_blocks,
            transfers.num_swapped_in_blocks,
            transfers.num_swapped_out_blocks,
            self._block_size,
            self._is_paged,
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
