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
``is_blocked`` (for the memory accounting) is True after a step in which a request
waited for memory it could not get: admission stopped on LATER, a swapped group
could not come back, or a group was preempted.
"""

from __future__ import annotations

from collections import deque

from pagesim.allocators.base import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.request import RUNNING, SWAPPED, WAITING, SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler, by_arrival


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


SWAP_OUT_ABORTED = "aborted: the CPU swap space cannot hold the preempted group"
SWAP_IN_NEVER = "aborted: the swapped-out group can never fit back on the GPU"


class VllmScheduler(Scheduler):
    kind = "vllm"

    def schedule(self, now_s: float) -> BatchPlan:
        self.is_blocked = False
        if not self.swapped:
            admitted = self._admit()
            if admitted:
                return self._plan(prefill=admitted, decode=[])
        preempted = self._reserve_decode_slots()
        if not preempted:
            self._swap_in()
        return self._plan(prefill=[], decode=self.running)

    # ---- 1. admission --------------------------------------------------------------

    def _admit(self) -> list[SequenceGroup]:
        if not self.waiting:
            return []
        spec = self.spec
        prompt_limit = min(self.max_model_len, spec.max_num_batched_tokens)
        num_batched_tokens = 0
        num_curr_seqs = sum(g.max_num_seqs for g in self.running)
        admitted: list[SequenceGroup] = []
        while self.waiting:
            group = self.waiting[0]
            num_tokens = group.num_prefill_tokens
            if num_tokens > prompt_limit:
                self.waiting.popleft()
                self._reject(group, prompt_limit_reason(num_tokens, prompt_limit))
                continue
            if group.max_num_seqs > spec.max_num_seqs:
                self.waiting.popleft()
                self._reject(
                    group,
                    f"{group.max_num_seqs} sequences exceed scheduler.max_num_seqs = {spec.max_num_seqs}",
                )
                continue
            status = self._admission_status(group)
            if status is AllocStatus.LATER:
                self.is_blocked = True
                break
            if status is AllocStatus.NEVER:
                self.waiting.popleft()
                self._reject(group, never_fits_reason(num_tokens, self.allocator.capacity_slots))
                continue
            if num_batched_tokens + num_tokens > spec.max_num_batched_tokens:
                break
            if num_curr_seqs + group.max_num_seqs > spec.max_num_seqs:
                break
            self.waiting.popleft()
            self._allocate(group)
            self.running.append(group)
            admitted.append(group)
            num_batched_tokens += num_tokens
            num_curr_seqs += group.max_num_seqs
        return admitted

    # ---- 2. decode slots and preemption ----------------------------------------------

    def _reserve_decode_slots(self) -> bool:
        """Give every running sequence one more slot, preempting from the tail; True if any preempted."""
        queue = deque(sorted(self.running, key=by_arrival))
        kept: list[SequenceGroup] = []
        preempted = False
        can_append = self.allocator.can_append_slots
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
        self.running = kept
        if preempted:
            self.is_blocked = True
        return preempted

    def _preempt(self, group: SequenceGroup) -> None:
        group.num_preemptions += 1
        self.num_preemptions += 1
        mode = self.spec.preemption_mode
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
        group.status = SWAPPED
        self.swapped.append(group)

    # ---- 3. swap in --------------------------------------------------------------------

    def _swap_in(self) -> None:
        if not self.swapped:
            return
        self.swapped.sort(key=by_arrival)
        num_curr_seqs = sum(g.max_num_seqs for g in self.running)
        while self.swapped:
            group = self.swapped[0]
            status = self.allocator.can_swap_in(group.group_id)
            if status is AllocStatus.LATER:
                self.is_blocked = True
                break
            if status is AllocStatus.NEVER:
                self.swapped.pop(0)
                self._reject(group, SWAP_IN_NEVER)
                continue
            if num_curr_seqs + group.max_num_seqs > self.spec.max_num_seqs:
                break
            self.swapped.pop(0)
            self.allocator.swap_in(group.group_id)
            group.status = RUNNING
            self._append_slots(group)
            self.running.append(group)
            num_curr_seqs += group.max_num_seqs

    def check_invariants(self) -> None:
        super().check_invariants()
        if self.swapped and self.is_prefill_step:
            raise InvariantError("vllm: groups were admitted while others are swapped out")
