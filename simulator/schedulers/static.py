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

from pagesim.allocators.base import AllocStatus
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler


class StaticScheduler(Scheduler):
    kind = "static"

    def schedule(self, now_s: float) -> BatchPlan:
        self.is_blocked = False
        if not self.running:
            return self._plan(prefill=self._take_batch(), decode=[])
        decode = [g for g in self.running if not g.is_done]
        for group in decode:
            self._append_slots(group)
        return self._plan(prefill=[], decode=decode)

    def finish_step(self, plan: BatchPlan, now_s: float) -> None:
        for group in self._stepped:
            self._generate_token(group, now_s)
        self._stepped = []
        if all(g.is_done for g in self.running):
            for group in self.running:
                self._finish(group, now_s)
            self.running = []

    def _take_batch(self) -> list[SequenceGroup]:
        limit = self.spec.max_batch_size
        batch: list[SequenceGroup] = []
        while self.waiting and (limit is None or len(batch) < limit):
            group = self.waiting[0]
            status = self._admit_head()
            if status is AllocStatus.LATER:
                break
            if status is AllocStatus.NEVER:
                continue
            batch.append(group)
        return batch
