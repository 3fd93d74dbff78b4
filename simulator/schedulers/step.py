"""The record of one ``schedule()``: what the engine, the cost model and the metrics read."""

from __future__ import annotations

from pagesim.allocators.base import MemoryUsage
from pagesim.simulator.plan import BatchPlan


class Step:
    """What one ``schedule()`` decided, for the engine, the cost model and the metrics.

    ``plan`` is empty when nothing can run now; ``usage_slots`` is the memory breakdown
    the step (or the idle period) runs in, as ``KVAllocator.usage_slots`` gives it, of a
    pool of ``capacity_slots`` (``usage``: as a MemoryUsage); the queue lengths are taken
    after the schedule; ``num_groups`` counts the groups in the batch (prefills and
    decodes) and ``num_decode_groups`` those decoding; ``is_blocked``: a request waited
    for memory it could not get; ``prefix_hit_tokens``: prompt tokens served from the
    prefix cache to the groups admitted now. (A plain class with a hand-written
    ``__init__``, one per step: docs/compiled_modules.md.)
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
