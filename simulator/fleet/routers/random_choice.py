"""Random: each request to a replica drawn uniformly, independently of the others.

What a Kubernetes Service does per connection (kube-proxy's iptables mode picks an
endpoint with ``-m statistic --mode random``, uniform over the endpoints), one
connection per request. The draws come from the run's seeded generator (a child of it,
``numpy.random.Generator.spawn``, so the run's other draws are the same with or without
a fleet).
"""

from __future__ import annotations

import numpy as np

from pagesim.simulator.fleet.routers.base import Router


class RandomChoice(Router):
    """Each request to a uniform draw among the replicas."""

    name = "random"

    def assign(self, num_requests: int) -> np.ndarray:
        return self.rng.integers(0, self.num_replicas, size=num_requests, dtype=np.int64)
