"""The vLLM v0 scheduler (v0.2–v0.4 ``Scheduler._schedule``), over the paged allocator.

Scenario: FCFS; a step is all-prefill or all-decode.

1. Nothing swapped out -> admit from the head of ``waiting``:

   - a prompt longer than ``min(max_model_len, max_num_batched_tokens)`` is rejected
     (vLLM v0: "input prompt exceeds limit", the request is ignored), and the scan
     continues; a group that forks into more than ``max_num_seqs`` sequences is
     rejected the same way (vLLM v0 would never schedule it);
   - ``can_allocate`` (the allocator applies the 1% watermark): LATER stops the scan
     (head-of-line blocking); NEVER rejects the group and the scan continues;
   - the prompt-token budget ``max_num_batched_tokens`` and ``max_num_seqs``
     (counting each running group as its ``max(n, beam_width)`` sequences) stop it.
     A prompt counts in the budget (and in the limit's ``max_num_batched_tokens``)
     without the tokens it maps to a pinned prefix (``allocator.prefix_caching:
     pinned``; the paper's prototype, whose prefixed request's prompt is its own tokens
     only); ``max_model_len`` counts them all.

   With ``prefill_padding`` (vLLM v0.2, ``vllm/core/scheduler.py``,
   ``Scheduler._schedule``; off by default, as in v0.3 and later), a prefill batch is
   padded to its longest prompt: after the allocator's answer, the scan stops when
   ``prompts x longest`` (with this one) would exceed ``max_num_batched_tokens``, then
   at ``max_num_seqs``, then when the padding (``prompts x longest`` less the prompts'
   own tokens) would exceed ``max_paddings``; the step computes the padded tokens
   (``_prefill_totals``).

   If any group was admitted the step is a prefill step of exactly those groups.
2. Otherwise a decode step. Running groups are visited in FCFS order; while a group
   cannot get one more slot per sequence, the group at the *tail* of running (latest
   arrival) is preempted — or the group itself when it is the last. Preemption
   (``preemption_mode`` auto) recomputes single-sequence groups (their slots are
   freed and they go back to the FRONT of ``waiting``; the readmitted prompt is
   prompt + generated so far) and swaps multi-sequence groups out to CPU.
   ``recompute`` forces recompute for single-sequence groups only: vLLM v0 cannot
   recompute a multi-sequence group (it asserts), so those are swapped whatever the
   mode. ``swap`` swaps every group. If the CPU swap space cannot take a group it
   is aborted and reported as rejected with the reason (vLLM v0 raises
   "Aborted due to the lack of CPU swap space") — never lost.
   Then ``append_slot`` for each sequence of each kept group (appends ignore the
   watermark; copy-on-write happens inside the allocator).
3. Only in a step where nothing was preempted, swapped groups come back FCFS while
   ``can_swap_in`` is OK (with the watermark) and ``max_num_seqs`` allows; they join
   this decode step. No new admissions while anything is swapped out.

The allocator's copies and swaps since the previous step go into the BatchPlan.

Speed: step 2 first asks the allocator whether every running sequence can take a slot
whichever order the groups are visited in (``can_append_all``); if so it appends to all
of them in bulk, and only otherwise visits the groups one by one. Running groups ride
the decode clock (``schedulers.base``), so a decode step with nothing to admit, swap or
finish is O(1).
``is_blocked`` (for the memory accounting) is True after a step in which a request
waited for memory it could not get: admission stopped on LATER, a swapped group
could not come back, or a group was preempted.
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from mypy_extensions import mypyc_attr

from pagesim.allocators.status import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.plan import Prefill
from pagesim.simulator.request import SWAPPED, WAITING, SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler, by_arrival
from pagesim.simulator.schedulers.step import Step


def prompt_limit_reason(num_tokens: int, prompt_limit: int) -> str:
    return (
        f"prompt of {num_tokens} tokens exceeds min(max_model_len, "
        f"max_num_batched_tokens) = {prompt_limit}"
    )


def never_fits_reason(num_tokens: int, capacity_slots: int) -> str:
    return (
        f"needs {num_tokens} prompt slots, more than the KV pool can ever give "
        f"({capacity_slots} slots, watermark included)"
    )


#: admission verdicts besides the allocator's (``VllmScheduler._head_verdict``)
PROMPT_TOO_LONG = "prompt too long"
TOO_MANY_SEQS = "too many sequences"

SWAP_OUT_ABORTED = "aborted: the CPU swap space cannot hold the preempted group"
SWAP_IN_NEVER = "aborted: the swapped-out group can never fit back on the GPU"


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class VllmScheduler(Scheduler):
    kind = "vllm"
    needs_paged = True
    pairing_note = "it preempts and swaps blocks"
    rides_clock = True
    #: decode steps stay steady while the head of ``waiting`` waits for memory
    #: (:meth:`_steady_after_advance`, :meth:`add`); a variant whose admission runs by
    #: other rules (vllm-paper) turns it off
    steady_behind_blocked_head: ClassVar[bool] = True
    #: admission checks reuse answers that cannot have changed: a head the allocator
    #: answered LATER gets LATER again until memory is given back (:meth:`_head_verdict`),
    #: and ``schedule()`` takes the head's verdict from just after the last advance
    #: (:meth:`_steady_after_advance`); off: every check asks (the tests compare)
    reuse_head_verdicts: ClassVar[bool] = True

    def _init_state(self) -> None:
        super()._init_state()
        #: vLLM v0.2's prefill rule (module docstring, 1.)
        self._prefill_padding = self.spec.prefill_padding
        max_paddings = self.spec.max_paddings
        self._max_paddings = (1 << 62) if max_paddings is None else max_paddings
        #: (head, ``_num_frees``, its tokens) when the allocator last answered it LATER
        self._blocked_head: tuple[SequenceGroup, int, int] | None = None
        #: (head, clock ticks, ``_num_frees``, verdict, tokens) checked after the last
        #: advance (:meth:`_steady_after_advance`), for the next ``schedule()`` to reuse
        self._checked_head: tuple[SequenceGroup, int, int, object, int] | None = None

    def schedule(self, now_s: float) -> Step:
        checked, self._checked_head = self._checked_head, None
        is_blocked = False
        if not self.swapped:
            admitted, is_blocked = self._admit(checked=checked)
            if admitted:
                return self._step(decode_groups=0, is_blocked=is_blocked, ticks=False)
        is_bulk = self.allocator.can_append_all()
        preempted = self._reserve_decode_slots(is_bulk)
        if preempted or self._swap_in():
            is_blocked = True
        return self._step(
            decode_groups=len(self.running),
            decode=self.allocator.decode_totals(),
            is_blocked=is_blocked,
            ticks=True,
            # memory only shrinks in bulk decode steps: a head that waits for it (LATER)
            # keeps waiting, but one held back by a cap may find memory short later
            steady=is_bulk
            and not self.swapped
            and not self._swapped_in
            and (is_blocked or not self.waiting),
        )

    def add(self, group: SequenceGroup) -> None:
        """A request arrives. Behind a head that waits for memory it changes nothing the
        next steps do (admission is first come, first served and stops at that head), so
        a steady run stays steady (the engine's decode span goes on with the new queue
        length)."""
        keep = self._steady and self._steady_blocked and self.steady_behind_blocked_head
        super().add(group)
        if keep:
            self._steady = True

    def _steady_after_advance(self, ended: bool) -> bool:
        """Also steady, with the head blocked, when nothing is swapped out and the head of
        ``waiting`` waits for memory (:meth:`_head_verdict` says LATER; after a prefill
        step that stopped there, or a step in which groups finished without freeing
        enough): the next ``schedule()`` would admit nothing and decode every running
        group, which a steady run does (it stops at its first step when the allocator
        cannot append in bulk), and memory only shrinks until the next finish."""
        if super()._steady_after_advance(ended):
            return True
        if not (
            self.steady_behind_blocked_head
            and self.waiting
            and not self.swapped
            and not self._holds_back(self.waiting[0])
        ):
            return False
        head = self.waiting[0]
        verdict, num_new = self._head_verdict(head)
        if verdict is AllocStatus.LATER:
            self._steady_blocked = True
            return True
        if self.reuse_head_verdicts:
            # the next schedule() asks the same question first, with nothing changed
            # since (its clock and frees tell): it takes this answer
            self._checked_head = (head, self.clock.ticks, self._num_frees, verdict, num_new)
        return False

    # ---- 1. admission --------------------------------------------------------------

    def _admit(
        self, num_batched_tokens: int = 0, *, checked: tuple | None = None
    ) -> tuple[list[SequenceGroup], bool]:
        """Groups admitted from the head of ``waiting``, and whether it stopped on LATER;
        the token budget starts at ``num_batched_tokens``. ``checked``: the head's
        verdict from after the last advance (``_checked_head``), used if nothing has
        changed since."""
        if not self.waiting:
            return [], False
        if checked is not None and not (
            checked[0] is self.waiting[0]
            and checked[1] == self.clock.ticks
            and checked[2] == self._num_frees
        ):
            checked = None
        budget = self.max_num_batched_tokens
        prompt_limit = min(self.max_model_len, budget)
        admitted: list[SequenceGroup] = []
        padding = self._prefill_padding
        longest = padded_longest = padded = 0
        while self.waiting:
            group = self.waiting[0]
            if self._holds_back(group):
                break
            if checked is not None:
                verdict, num_new = checked[3], checked[4]
                checked = None
            else:
                verdict, num_new = self._head_verdict(group)
            if verdict is PROMPT_TOO_LONG:
                self.waiting.popleft()
                self._reject(group, prompt_limit_reason(group.num_prefill_tokens, prompt_limit))
                continue
            if verdict is TOO_MANY_SEQS:
                self._reject_if_too_many_seqs(group)
                continue
            if verdict is AllocStatus.LATER:
                return admitted, True
            if verdict is AllocStatus.NEVER:
                self.waiting.popleft()
                self._reject(
                    group,
                    never_fits_reason(group.num_prefill_tokens, self.allocator.capacity_slots),
                )
                continue
            if padding:
                # v0.2: the batch is padded to its longest prompt
                padded_longest = num_new if num_new > longest else longest
                padded = (len(admitted) + 1) * padded_longest
                if padded > budget:
                    break
            elif num_batched_tokens + num_new > budget:
                break
            if not self._cap_allows(group):
                break
            if padding and padded - (num_batched_tokens + num_new) > self._max_paddings:
                break
            self.waiting.popleft()
            self._allocate(group)
            admitted.append(group)
            num_batched_tokens += num_new
            if padding:
                longest = padded_longest
        return admitted, False

    def _prefill_totals(self, pre: Prefill) -> tuple[int, int, int, float]:
        """With ``prefill_padding`` (v0.2), the batch computes every prompt at the longest
        one's length: the GEMMs, the KV writes and the attention run over the padded
        ``num_prompts x longest`` tokens (v0.2.3's ``ModelRunner._prepare_prompt`` pads
        the input to the longest prompt; xformers attends over each padded prompt)."""
        if not self._prefill_padding or pre.num_seqs < 2:
            return super()._prefill_totals(pre)
        longest = max(g.num_prefill_tokens for g in self._prefilled)
        padded = Prefill()
        for _ in range(pre.num_seqs):
            padded.add(longest, longest)
        return (padded.num_seqs, padded.num_tokens, padded.context_sum, padded.scores)

    def _head_verdict(self, group: SequenceGroup) -> tuple[object, int]:
        """What admission decides for ``group`` at the head of ``waiting``, without
        acting on it: PROMPT_TOO_LONG (its prompt exceeds ``max_model_len`` or its own
        tokens the token budget), TOO_MANY_SEQS, else the allocator's AllocStatus; and
        the tokens its prefill computes (the pinned prefix's are not)."""
        blocked = self._blocked_head
        if blocked is not None and blocked[0] is group and blocked[1] == self._num_frees:
            # LATER stands: nothing was given back since (memory only shrank)
            return AllocStatus.LATER, blocked[2]
        req = self._admission_request(group)
        num_tokens = req.num_tokens
        num_new = num_tokens - self.allocator.num_pinned_tokens(req)
        if num_tokens > self.max_model_len or num_new > self.max_num_batched_tokens:
            return PROMPT_TOO_LONG, num_new
        if self._too_many_seqs(group):
            return TOO_MANY_SEQS, num_new
        status = self._admission_status(group, req)
        if status is AllocStatus.LATER and self.reuse_head_verdicts:
            self._blocked_head = (group, self._num_frees, num_new)
        return status, num_new

    def _holds_back(self, group: SequenceGroup) -> bool:
        """Whether the head of ``waiting`` stops admission before any check (never in v0)."""
        return False

    # ---- 2. decode slots and preemption ----------------------------------------------

    def _reserve_decode_slots(self, is_bulk: bool) -> bool:
        """Give every running sequence one more slot, preempting from the tail; True if any
        preempted. ``is_bulk``: the allocator said every sequence can take one (in bulk)."""
        alloc = self.allocator
        if is_bulk:
            if self.running:
                alloc.append_slot_all()
            return False
        order = sorted(self.running, key=by_arrival)
        costs = alloc.append_costs([g.group_id for g in order])
        if costs is not None:
            return self._reserve_deferred(order, costs)
        queue = deque(order)
        kept: list[SequenceGroup] = []
        preempted = False
        can_append = alloc.can_append_slots
        while queue:
            group = queue.popleft()
            while not can_append(group.group_id):
                preempted = True
                if queue:
                    self._preempt(queue.pop())
                else:
                    self._preempt(group)
                    break
            else:
                self._append_slots(group)
                kept.append(group)
        self.running = dict.fromkeys(kept)
        return preempted

    def _reserve_deferred(self, order: list[SequenceGroup], costs: list[tuple[int, int]]) -> bool:
        """The same visit, the appends deferred: each group is checked against the free
        blocks less those the groups kept before it will take (``append_costs``), and
        the kept groups append at the end in one bulk append (the same slots and block
        counts; only which free block each sequence gets differs)."""
        alloc = self.allocator
        kept: list[SequenceGroup] = []
        preempted = False
        pending = 0
        # only a preemption frees blocks during the visit: the pool is asked after each
        free = alloc.num_free_blocks  # type: ignore[attr-defined]  # paged
        # the queue is order[i:end]: visited from the front, preempted from the back
        i, end = 0, len(order)
        while i < end:
            group = order[i]
            ask, take = costs[i]
            i += 1
            while free - pending < ask:
                preempted = True
                if i < end:
                    end -= 1
                    self._preempt(order[end])
                else:
                    self._preempt(group)
                    break
                free = alloc.num_free_blocks  # type: ignore[attr-defined]  # paged
            else:
                pending += take
                kept.append(group)
        self.running = dict.fromkeys(kept)
        if kept:
            alloc.append_slot_all()
        return preempted

    def _preempt(self, group: SequenceGroup) -> None:
        group.num_preemptions += 1
        self.num_preemptions += 1
        self._stop_running(group)
        mode = self.preemption_mode
        if mode == "swap" or group.is_multi_seq:
            self._preempt_by_swap(group)
        else:
            self._preempt_by_recompute(group)

    def _preempt_by_recompute(self, group: SequenceGroup) -> None:
        self._free_group(group)
        group.status = WAITING
        self.waiting.appendleft(group)

    def _preempt_by_swap(self, group: SequenceGroup) -> None:
        if not self.allocator.can_swap_out(group.group_id):
            self._reject(group, SWAP_OUT_ABORTED)
            return
        self.allocator.swap_out(group.group_id)
        self._num_frees += 1
        group.status = SWAPPED
        self.swapped.append(group)

    # ---- 3. swap in --------------------------------------------------------------------

    def _swap_in(self) -> bool:
        """Swapped groups come back FCFS; True if one had to stay out for memory (LATER)."""
        if not self.swapped:
            return False
        self.swapped.sort(key=by_arrival)
        while self.swapped:
            group = self.swapped[0]
            status = self.allocator.can_swap_in(group.group_id)
            if status is AllocStatus.LATER:
                return True
            if status is AllocStatus.NEVER:
                self.swapped.pop(0)
                self._reject(group, SWAP_IN_NEVER)
                continue
            if not self._cap_allows(group):
                break
            self.swapped.pop(0)
            self.allocator.swap_in(group.group_id)
            self._append_slots(group)
            self._start_running(group)
            self._swapped_in.append(group)
        return False

    def _cap_allows(self, group: SequenceGroup) -> bool:
        """``max_num_seqs`` lets ``group`` join the running ones: vLLM v0 counts running
        sequences (``_start_running`` adds the group's)."""
        return self._num_running_seqs + group.max_num_seqs <= self.max_num_seqs

    def check_invariants(self) -> None:
        super().check_invariants()
        if self.swapped and self._prefilled:
            raise InvariantError("vllm: groups were admitted while others are swapped out")
