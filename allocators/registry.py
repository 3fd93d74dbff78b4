"""Which allocator a spec names, and how it is built from the KV pool's size.

``ALLOCATORS`` maps ``AllocatorSpec.kind`` to the allocator class (adding an allocator
means one file and one line here). Everything else reads this dict: the spec's allowed
``kind`` values, the CLI's choices, and the scheduler pairing rule (through each class's
``is_paged`` and ``kv_interface``). Each class builds itself from the spec with ``from_spec``, told the
workload's shared prefix (a paged pool pins it under ``prefix_caching: pinned``). Sizes are in
token slots: paged pools get ``capacity_slots // block_size`` GPU blocks and
``cpu_capacity_slots // block_size`` CPU blocks; contiguous pools get
``capacity_slots // granule_slots`` granules.
"""

from __future__ import annotations

from pagesim.allocators.base import KVAllocator
from pagesim.allocators.contiguous import ContiguousAllocator
from pagesim.allocators.paged import PagedAllocator
from pagesim.allocators.paged_v1 import PagedV1Allocator
from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError

ALLOCATORS: dict[str, type[KVAllocator]] = {
    "paged": PagedAllocator,
    "paged-v1": PagedV1Allocator,
    "max": ContiguousAllocator,
    "pow2": ContiguousAllocator,
    "oracle": ContiguousAllocator,
}


def make_allocator(
    spec: AllocatorSpec,
    *,
    capacity_slots: int,
    cpu_capacity_slots: int,
    max_model_len: int,
    shared_prefix: tuple[int, int] | None = None,
) -> KVAllocator:
    """The allocator ``spec`` names, over a pool of ``capacity_slots`` token slots;
    ``shared_prefix`` = (segment id, tokens) is the prefix the workload's requests share.

    Raises ConfigError for an unknown kind, a block (granule) size <= 0, a pool smaller
    than one block, or one the class says could never serve a request
    (``KVAllocator.pool_problem``).
    """
    cls = ALLOCATORS.get(spec.kind)
    if cls is None:
        raise ConfigError(
            f"allocator.kind: unknown allocator {spec.kind!r}; allowed {sorted(ALLOCATORS)}"
        )
    problem = cls.pool_problem(spec, capacity_slots=capacity_slots, max_model_len=max_model_len)
    if problem is not None:
        raise ConfigError(f"allocator.kind: {problem}")
    return cls.from_spec(
        spec,
        capacity_slots=capacity_slots,
        cpu_capacity_slots=cpu_capacity_slots,
        max_model_len=max_model_len,
        shared_prefix=shared_prefix,
    )
