"""Least outstanding: the replica with the fewest requests in flight (routed and not
yet ended: waiting + running + swapped out), ties to the lowest index.

Source: inference-sim ``sim/routing.go`` ``LeastLoaded`` (minimum of QueueDepth +
BatchSize + InFlightRequests, "by first occurrence (lowest index) when rng is nil");
llm-d-inference-scheduler's ``pkg/plugins/scorer/active_request.go`` scores pods by the
requests they are serving. pagesim counts a request in flight from its arrival at the
replica to its end, which is those three counts together.
"""

from __future__ import annotations

from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.request import SequenceGroup


class LeastOutstanding(Router):
    """The replica with the fewest requests in flight, ties to the lowest index."""

    name = "least-outstanding"
    reads_state = True

    def route(self, group: SequenceGroup, fleet: FleetState) -> int:
        return fleet.least_outstanding()
