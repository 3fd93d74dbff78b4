"""The static scheduler: FasterTransformer-style request-level batching.

Scenario: when the previous batch has completely finished, take up to
``max_batch_size`` requests FCFS from ``waiting`` (None: as many as memory allows),
each admitted only while the contiguous allocator says OK (LATER ends the batch;
NEVER rejects the request with a reason and the scan continues). The batch runs its
prefill in one step, then decodes until its last request has generated its output.

Accounting choices (FasterTransformer returns a batch's results together):

- a request that finishes early stops computing (it leaves the decode batch), but
  it keeps its memory until the batch ends; the memory breakdown then counts its
  slots as the allocator reports them (token states for its computed tokens,
  internal fragmentation for what it reserved and never filled);
- every request of the batch has ``finish_s`` = the end of the batch (results are
  returned when the batch completes); its first token is at the end of the prefill.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from pagesim.allocators.status import AllocStatus
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.step import Step


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class StaticScheduler(Scheduler):
    kind = "static"
    needs_paged = False
    pairing_note = "it reserves each request's memory at admission and never preempts"

    def _init_state(self) -> None:
        super()._init_state()
        #: the groups decoding in the current step (a finished request stops computing)
        self._decoding: list = []

    def schedule(self, now_s: float) -> Step:
        if not self.running:
            is_blocked = self._take_batch()
            return self._step(decode_groups=0, is_blocked=is_blocked, ticks=False)
        decode = [g for g in self.running if not g.is_done]
        num_seqs = num_slots = 0
        for group in decode:
            self._append_slots(group)
            num_seqs += len(group.seq_ids)
            num_slots += len(group.seq_ids) * group.num_context_tokens
        self._decoding = decode
        # a contiguous cache: one region (block) per sequence
        return self._step(
            decode_groups=len(decode),
            decode=(num_seqs, num_slots, num_seqs),
            is_blocked=False,
            ticks=False,
        )

    def finish_step(self, step: Step, now_s: float) -> None:
        for group in [*self._prefilled, *self._decoding]:
            self._generate_token(group, now_s)
        self._prefilled = []
        self._decoding = []
        if all(g.is_done for g in self.running):
            for group in list(self.running):
                self._stop_running(group)
                self._finish(group, now_s)

    def _take_batch(self) -> bool:
        """A new batch FCFS; True if it stopped on a request waiting for memory (LATER)."""
        limit = self.spec.max_batch_size
        num_taken = 0
        while self.waiting and (limit is None or num_taken < limit):
            status = self._admit_head()
            if status is AllocStatus.LATER:
                return True
            if status is AllocStatus.OK:
                num_taken += 1
        return False
