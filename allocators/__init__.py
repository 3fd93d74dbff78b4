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

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")


from pagesim.lazy import lazy_exports  # noqa: E402 - after the clone check

#: public names -> the module that defines them (imported when first used, so
#: that `pagesim --help` does not pay for the whole layer)
_LAZY = {
    "Allocation": "pagesim.allocators.base",
    "AllocRequest": "pagesim.allocators.base",
    "AllocStatus": "pagesim.allocators.base",
    "KVAllocator": "pagesim.allocators.base",
    "MemoryUsage": "pagesim.allocators.base",
    "PrefixCacheCounters": "pagesim.allocators.base",
    "Transfers": "pagesim.allocators.base",
    "BlockPool": "pagesim.allocators.block_pool",
    "BuddyHeap": "pagesim.allocators.buddy",
    "ContiguousAllocator": "pagesim.allocators.contiguous",
    "FirstFitHeap": "pagesim.allocators.first_fit",
    "PagedAllocator": "pagesim.allocators.paged",
    "PagedV1Allocator": "pagesim.allocators.paged_v1",
    "LRUEvictor": "pagesim.allocators.prefix_cache",
    "prompt_block_keys": "pagesim.allocators.prefix_cache",
    "ALLOCATORS": "pagesim.allocators.registry",
    "make_allocator": "pagesim.allocators.registry",
    "AllocatorSpec": "pagesim.allocators.spec",
}

__getattr__ = lazy_exports(__name__, _LAZY)


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
