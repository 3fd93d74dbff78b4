"""pagesim.allocators layer: KV-cache allocators behind one interface (``base.KVAllocator``).

- ``PagedAllocator`` (paged.py): vLLM v0 block manager — copy-on-write, prefix caching, swap;
  its block tables and the running totals that make a decode step O(1) are its base
  class, ``LockstepTables`` (lockstep.py);
- ``PagedV1Allocator`` (paged_v1.py): vLLM V1's KV cache manager (hashed full blocks, an
  LRU free queue, the null block), for the ``vllm-v1`` scheduler; its pool is
  v1_pool.py, its tables and running totals v1_tables.py;
- ``ContiguousAllocator`` (contiguous.py): Orca's Max / Pow2 / Oracle reservations,
  placed by ``BuddyHeap`` (buddy.py) or ``FirstFitHeap`` (first_fit.py);
- ``make_allocator`` / ``ALLOCATORS`` (registry.py): build one from an ``AllocatorSpec``.
"""

from pagesim.allocators.base import (
    Allocation,
    AllocRequest,
    AllocStatus,
    KVAllocator,
    MemoryUsage,
    PrefixCacheCounters,
    Transfers,
)
from pagesim.allocators.block_pool import BlockPool
from pagesim.allocators.buddy import BuddyHeap
from pagesim.allocators.contiguous import ContiguousAllocator
from pagesim.allocators.first_fit import FirstFitHeap
from pagesim.allocators.paged import PagedAllocator
from pagesim.allocators.paged_v1 import PagedV1Allocator
from pagesim.allocators.prefix_cache import LRUEvictor, prompt_block_keys
from pagesim.allocators.registry import ALLOCATORS, make_allocator
from pagesim.allocators.spec import AllocatorSpec

__all__ = [
    "ALLOCATORS",
    "AllocRequest",
    "AllocStatus",
    "Allocation",
    "AllocatorSpec",
    "BlockPool",
    "BuddyHeap",
    "ContiguousAllocator",
    "FirstFitHeap",
    "KVAllocator",
    "LRUEvictor",
    "MemoryUsage",
    "PagedAllocator",
    "PagedV1Allocator",
    "PrefixCacheCounters",
    "Transfers",
    "make_allocator",
    "prompt_block_keys",
]
