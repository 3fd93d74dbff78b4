"""What every router shares: the rule's interface and the fleet's state a rule may read.

A router picks a replica for each request when it arrives (``route``), reading the
:class:`FleetState`: per replica the requests in flight (routed and not yet ended:
waiting, running or swapped out), its scheduler and its allocator. A router whose rule
reads no replica state (``reads_state`` False: round-robin, random, sticky over such a
fallback) places the whole trace before the run (``assign``), so each replica replays
its own requests with its own arrivals, exactly as a single server would; one that
reads state routes each request at its arrival, and the replicas then step no further
ahead than the fleet's next arrival (``simulator/engine.py``, ``ArrivalFeed``).

Ties go to the lowest replica index unless a rule says otherwise (inference-sim
``sim/routing.go``: "by first occurrence (lowest index) when rng is nil").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pagesim.allocators.base import KVAllocator
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler


@dataclass
class FleetState:
    """The replicas as a router sees them at a request's arrival."""

    #: requests routed to each replica and not yet ended (waiting + running + swapped)
    outstanding: list[int]
    schedulers: list[Scheduler]
    allocators: list[KVAllocator]

    @property
    def num_replicas(self) -> int:
        return len(self.outstanding)

    def least_outstanding(self, candidates: list[int] | None = None) -> int:
        """The replica (among ``candidates``, default all) with the fewest requests in
        flight, ties to the lowest index."""
        load = self.outstanding
        if candidates is None:
            return min(range(len(load)), key=load.__getitem__)
        return min(candidates, key=load.__getitem__)


class Router:
    """Base of the routers (module docstring). ``user_ids``: the trace's ``user_id``
    column (-1 where a row has none), or None when the trace has no users."""

    name: ClassVar[str] = "abstract"
    #: whether ``route`` reads the fleet's state (else ``assign`` places the trace)
    reads_state: ClassVar[bool] = False

    def __init__(
        self,
        num_replicas: int,
        *,
        rng: np.random.Generator,
        user_ids: np.ndarray | None,
        fallback: Router | None = None,
    ) -> None:
        self.num_replicas = num_replicas
        self.rng = rng
        self.user_ids = user_ids

    def assign(self, num_requests: int) -> np.ndarray:
        """The replica of each request, in arrival order (a rule that reads no state)."""
        raise NotImplementedError(f"router {self.name!r} reads the fleet's state: use route()")

    def route(self, group: SequenceGroup, fleet: FleetState) -> int:
        """The replica for ``group``, arriving now."""
        raise NotImplementedError(f"router {self.name!r} places the trace with assign()")
