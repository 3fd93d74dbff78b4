"""Least KV: the replica whose KV cache is least used, ties to the fewest requests in
flight, then to the lowest index.

KV usage is vLLM's ``gpu_cache_usage`` (``vllm:kv_cache_usage_perc``): the share of the
pool's slots held (token states, reservations and the partly filled blocks' slack:
``KVAllocator.usage_slots``). Source: llm-d-inference-scheduler's kv-cache utilization
scorer and inference-sim ``sim/routing_scorers.go`` ``scoreKVUtilization`` (score =
1 - KV utilization). A replica's queue holds no blocks, so with this rule alone a burst
would pile onto one replica while its waiting requests hold nothing: the tie-break by
requests in flight is pagesim's (llm-d weighs this scorer with its queue scorer).
"""

from __future__ import annotations

from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.request import SequenceGroup


class LeastKv(Router):
    """The least-used KV pool; ties by requests in flight, then by index."""

    name = "least-kv"
    reads_state = True

    def route(self, group: SequenceGroup, fleet: FleetState) -> int:
        best, best_key = 0, None
        outstanding = fleet.outstanding
        for i, alloc in enumerate(fleet.allocators):
            slots = alloc.usage_slots(False)
            held = (slots[0] + slots[1] + slots[2]) / alloc.capacity_slots
            key = (held, outstanding[i])
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best
