"""The Orca scheduler: iteration-level batching over a contiguous (or paged) allocator.

Scenario (Yu et al., OSDI 2022, as reimplemented in the PagedAttention paper §6.1):
every iteration

1. each running sequence takes one more slot (a contiguous reservation already
   covers it: Max reserves ``max_model_len``, Pow2 the prompt plus the next power of
   two of the true output, Oracle the prompt plus the true output);
2. waiting requests are admitted FCFS while the allocator says OK and
   ``max_num_seqs`` allows (each group counts as ``max(n, beam_width)`` sequences).
   The allocator reserves at admission; the true output length is passed only to
   allocators whose ``needs_true_output_len`` is set. LATER stops admission
   (head-of-line blocking); NEVER rejects the request with a reason and the scan
   continues;
3. the new prompts' prefill runs in the same iteration as the running decodes
   (one mixed batch);

``scheduler.admission: artifact`` replaces step 2 by the rule of the PagedAttention
artifact's Orca (GitHub ``sosp-ae-39/sosp-ae-astra``, ``orca/cacheflow/master/
scheduler.py``, the same loop as its vLLM prototype's): FCFS while the allocator says
OK (LATER stops; NEVER rejects, where the artifact would wait forever), then while the
token budget allows (it starts at the running sequences and adds each admitted prompt;
``max_num_batched_tokens``, the artifact's 2560; a prompt longer than the budget is
rejected with the reason), then while running *groups* + the candidate's sequences
stay within ``max_num_seqs`` (the artifact's Orca ran 256). Pair it with
``allocator.placement: artifact-buddy`` for the artifact's buddy placement.

There is no preemption: a reservation never runs out (a running sequence that cannot
take its next slot is a bug, raised as an InvariantError). Finished requests free
their memory at the end of the iteration.

Speed: step 1 is one bulk append (the allocator checks in O(1) that every reservation
has room), running requests ride the decode clock, and a head of the queue that is
blocked is answered from the allocator's memory until its heap changes, so an
iteration with nothing to admit or finish is O(1).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from pagesim.allocators.status import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.step import Step


def budget_reason(num_tokens: int, max_num_batched_tokens: int) -> str:
    return (
        f"prompt of {num_tokens} tokens exceeds scheduler.max_num_batched_tokens = "
        f"{max_num_batched_tokens}"
    )


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class OrcaScheduler(Scheduler):
    kind = "orca"
    needs_paged = False
    pairing_note = (
        "it never preempts, so a paged pool could run out under a running request; "
        "it reserves each request's memory at admission"
    )
    rides_clock = True

    def _init_state(self) -> None:
        super()._init_state()
        self._is_artifact_admission = self.spec.admission == "artifact"

    def schedule(self, now_s: float) -> Step:
        alloc = self.allocator
        num_decode_groups = len(self.running)
        if self.running:
            if not alloc.can_append_all():
                self._raise_outgrown()
            alloc.append_slot_all()
        totals = alloc.decode_totals()
        is_blocked = self._admit_artifact() if self._is_artifact_admission else self._admit()
        return self._step(
            decode_groups=num_decode_groups,
            decode=totals,
            is_blocked=is_blocked,
            ticks=True,
            steady=not self._prefilled,
        )

    def _raise_outgrown(self) -> None:
        for group in self.running:
            if not self.allocator.can_append_slots(group.group_id):
                raise InvariantError(
                    f"orca: group {group.group_id} outgrew its {self.allocator.kind} "
                    f"reservation at {group.num_context_tokens} tokens"
                )
        raise InvariantError(f"orca: {self.allocator.kind} refused a bulk append it can serve")

    def _admit(self) -> bool:
        """Admit FCFS; True if the head of the queue waits for memory (LATER)."""
        num_curr_seqs = self._num_running_seqs
        while self.waiting:
            group = self.waiting[0]
            if self._reject_if_too_many_seqs(group):
                continue
            if num_curr_seqs + group.max_num_seqs > self.max_num_seqs:
                return False
            status = self._admit_head()
            if status is AllocStatus.LATER:
                return True
            if status is AllocStatus.OK:
                num_curr_seqs += group.max_num_seqs
        return False

    def _admit_artifact(self) -> bool:
        """The artifact's admission (module docstring); True if the head waits for memory."""
        budget = self.max_num_batched_tokens
        num_batched_tokens = self._num_running_seqs
        while self.waiting:
            group = self.waiting[0]
            if self._reject_if_too_many_seqs(group):
                continue
            num_tokens = group.num_prefill_tokens
            if num_tokens > budget:
                self.waiting.popleft()
                self._reject(group, budget_reason(num_tokens, budget))
                continue
            status = self._admission_status(group)
            if status is AllocStatus.LATER:
                return True
            if status is AllocStatus.NEVER:
                self._admit_head()  # rejects it with the reason
                continue
            if num_batched_tokens + num_tokens > budget:
                return False
            if len(self.running) + group.max_num_seqs > self.max_num_seqs:
                return False
            self.waiting.popleft()
            self._allocate(group)
            num_batched_tokens += num_tokens
        return False
