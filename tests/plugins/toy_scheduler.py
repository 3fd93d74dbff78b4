"""A toy scheduler plug-in, in one file: one request at a time, first come first served.

When nothing runs it admits the head of the queue (a request that can never fit is
rejected with the reason, and the next one is tried); the admitted request is
prefilled, then decoded every step until it finishes. It subclasses
``pagesim.simulator.schedulers.base.Scheduler`` and uses only its helpers; registering
it is one line (``SCHEDULERS["toy-serial"] = SerialScheduler``), which the test does at
test time.
"""

from __future__ import annotations

from pagesim.allocators.status import AllocStatus
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.step import Step


class SerialScheduler(Scheduler):
    kind = "toy-serial"
    needs_paged = True
    pairing_note = "it grows each sequence slot by slot"

    def schedule(self, now_s: float) -> Step:
        if not self.running:
            status = AllocStatus.NEVER
            while self.waiting and status is AllocStatus.NEVER:
                status = self._admit_head()
            return self._step(decode_groups=0, is_blocked=status is AllocStatus.LATER, ticks=False)
        for group in self.running:
            self._append_slots(group)
        # ticks: finish_step advances the running groups (this one is advanced by hand)
        return self._step(
            decode_groups=len(self.running),
            decode=self.allocator.decode_totals(),
            is_blocked=False,
            ticks=True,
        )
