"""Round-robin: request k goes to replica k mod R.

Source: inference-sim ``sim/routing.go`` ``RoundRobin`` (a counter over the instances in
order); the default of a Kubernetes Service behind kube-proxy's IPVS ``rr`` mode.
"""

from __future__ import annotations

import numpy as np

from pagesim.simulator.fleet.routers.base import Router


class RoundRobin(Router):
    """Request k (in arrival order) to replica k mod R."""

    name = "round-robin"

    def assign(self, num_requests: int) -> np.ndarray:
        return np.arange(num_requests, dtype=np.int64) % self.num_replicas
