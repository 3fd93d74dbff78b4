"""Sticky: session affinity by the trace's ``user_id``. A user's first request goes where
the fallback router (``cluster.sticky_fallback``, round-robin by default) sends it; every
later request of that user goes to the same replica. A request without a user (a
negative ``user_id`` in the router's column; a validated Trace has none, its ``user_id``
being >= 0 on every row) is routed by the fallback.

Source: llm-d-inference-scheduler's ``pkg/plugins/scorer/session_affinity.go``
(``SessionAffinity``: the response sets a cookie naming the pod that served the
session, and later requests carrying it score 1 on that pod and 0 elsewhere; the first
request is placed by the other scorers). pagesim keys the session on ``user_id`` where
llm-d keys it on the cookie. A trace without a ``user_id`` column is refused.
"""

from __future__ import annotations

import numpy as np

from pagesim.errors import ConfigError
from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.request import SequenceGroup


class Sticky(Router):
    """A user's requests to the replica of the user's first; the rest by the fallback."""

    name = "sticky"

    def __init__(
        self,
        num_replicas: int,
        *,
        rng: np.random.Generator,
        user_ids: np.ndarray | None,
        fallback: Router | None = None,
    ) -> None:
        super().__init__(num_replicas, rng=rng, user_ids=user_ids)
        if user_ids is None:
            raise ConfigError(
                "cluster.router 'sticky' keys sessions on the trace's user_id column, and "
                "this trace has none (use another router, or a workload with users)"
            )
        if fallback is None:
            raise ConfigError("cluster.router 'sticky' needs a fallback router")
        self.fallback = fallback
        self.reads_state = fallback.reads_state
        self._replica_of_user: dict[int, int] = {}

    def assign(self, num_requests: int) -> np.ndarray:
        """Users' first requests and the requests without a user, in arrival order, are
        placed by the fallback; the users' later requests follow their first."""
        users = np.asarray(self.user_ids[:num_requests])
        user_rows = np.flatnonzero(users >= 0)
        _, first, inverse = np.unique(users[user_rows], return_index=True, return_inverse=True)
        placed = users < 0
        placed[user_rows[first]] = True
        out = np.empty(num_requests, dtype=np.int64)
        out[placed] = self.fallback.assign(int(placed.sum()))
        out[user_rows] = out[user_rows[first]][inverse]
        return out

    def route(self, group: SequenceGroup, fleet: FleetState) -> int:
        user = int(self.user_ids[group.group_id])
        if user >= 0:
            replica = self._replica_of_user.get(user)
            if replica is not None:
                return replica
        replica = self.fallback.route(group, fleet)
        if user >= 0:
            self._replica_of_user[user] = replica
        return replica
