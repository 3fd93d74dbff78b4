"""Prefix-aware: the replica whose prefix cache holds the longest prefix of the request's
prompt wins; ties (all replicas cold, say) go to the fewest requests in flight, then to
the lowest index.

Source: llm-d-inference-scheduler's ``pkg/plugins/scorer/precise_prefix_cache.go``
(``PrecisePrefixCacheScorer``: each pod scored by the KV blocks of the prompt its cache
holds, from the servers' own KV events) with its load scorer
(``pkg/plugins/scorer/active_request.go``: requests in flight per pod); inference-sim
``sim/routing_precise_prefix_scorer.go`` does the same with each instance's
``GetCachedBlocks`` (its "oracle mode", no staleness), which is what pagesim models: each
replica's allocator is asked how many leading prompt tokens it holds
(``KVAllocator.cached_prefix_tokens``: whole blocks found by content key, as
``allocators/prefix_cache.py`` and vLLM V1's ``find_longest_cache_hit`` match them).
llm-d adds the scores with weights; taking the prefix first and the load only to break
ties is the lexicographic form of a large prefix weight. A replica without prefix
caching holds no prefix, so the rule then routes by load alone.
"""

from __future__ import annotations

from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.request import SequenceGroup


class PrefixAware(Router):
    """The longest cached prefix; ties by requests in flight, then by index."""

    name = "prefix-aware"
    reads_state = True

    def route(self, group: SequenceGroup, fleet: FleetState) -> int:
        req = group.alloc_request(-1)
        best_tokens = -1
        tied: list[int] = []
        for i, alloc in enumerate(fleet.allocators):
            tokens = alloc.cached_prefix_tokens(req)
            if tokens > best_tokens:
                best_tokens, tied = tokens, [i]
            elif tokens == best_tokens:
                tied.append(i)
        return tied[0] if len(tied) == 1 else fleet.least_outstanding(tied)
