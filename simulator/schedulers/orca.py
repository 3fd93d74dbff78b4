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

There is no preemption: a reservation never runs out (a running sequence that cannot
take its next slot is a bug, raised as an InvariantError). Finished requests free
their memory at the end of the iteration.
"""

from __future__ import annotations

from pagesim.allocators.base import AllocStatus
from pagesim.errors import InvariantError
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler


class OrcaScheduler(Scheduler):
    kind = "orca"

    def schedule(self, now_s: float) -> BatchPlan:
        self.is_blocked = False
        decode = list(self.running)
        for group in decode:
            if not self.allocator.can_append_slots(group.group_id):
                raise InvariantError(
                    f"orca: group {group.group_id} outgrew its {self.allocator.kind} reservation "
                    f"at {group.num_context_tokens} tokens"
                )
            self._append_slots(group)
        admitted = self._admit()
        return self._plan(prefill=admitted, decode=decode)

    def _admit(self) -> list[SequenceGroup]:
        num_curr_seqs = sum(g.max_num_seqs for g in self.running)
        admitted: list[SequenceGroup] = []
        while self.waiting:
            group = self.waiting[0]
            if group.max_num_seqs > self.spec.max_num_seqs:
                self.waiting.popleft()
                self._reject(
                    group,
                    f"{group.max_num_seqs} sequences exceed scheduler.max_num_seqs = {self.spec.max_num_seqs}",
                )
                continue
            if num_curr_seqs + group.max_num_seqs > self.spec.max_num_seqs:
                break
            status = self._admit_head()
            if status is AllocStatus.LATER:
                break
            if status is AllocStatus.NEVER:
                continue
            admitted.append(group)
            num_curr_seqs += group.max_num_seqs
        return admitted
