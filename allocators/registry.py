"""Which allocator a spec names, and how it is built from the KV pool's size.

``ALLOCATORS`` maps ``AllocatorSpec.kind`` to a factory with the signature of
:func:`make_allocator` (adding an allocator means one file and one line here).
Sizes are in token slots: paged pools get ``capacity_slots // block_size`` GPU blocks
and ``cpu_capacity_slots // block_size`` CPU blocks; contiguous pools get
``capacity_slots // granule_slots`` granules.
"""

from __future__ import annotations

from collections.abc import Callable

from pagesim.allocators.base import KVAllocator
from pagesim.allocators.contiguous import ContiguousAllocator
from pagesim.allocators.paged import PagedAllocator
from pagesim.allocators.spec import AllocatorSpec
from pagesim.errors import ConfigError

AllocatorFactory = Callable[..., KVAllocator]


def _make_paged(
    spec: AllocatorSpec, *, capacity_slots: int, cpu_capacity_slots: int, max_model_len: int
) -> KVAllocator:
    return PagedAllocator(
        capacity_slots=capacity_slots,
        block_size=spec.block_size,
        watermark=spec.watermark,
        is_prefix_caching=spec.prefix_caching,
        cpu_capacity_slots=cpu_capacity_slots,
    )


def _make_contiguous(
    spec: AllocatorSpec, *, capacity_slots: int, cpu_capacity_slots: int, max_model_len: int
) -> KVAllocator:
    return ContiguousAllocator(
        policy=spec.kind,
        capacity_slots=capacity_slots,
        max_model_len=max_model_len,
        granule_slots=spec.granule_slots,
        placement=spec.placement,
    )


ALLOCATORS: dict[str, AllocatorFactory] = {
    "paged": _make_paged,
    "max": _make_contiguous,
    "pow2": _make_contiguous,
    "oracle": _make_contiguous,
}


def make_allocator(
    spec: AllocatorSpec, *, capacity_slots: int, cpu_capacity_slots: int, max_model_len: int
) -> KVAllocator:
    """The allocator ``spec`` names, over a pool of ``capacity_slots`` token slots.

    Raises ConfigError for an unknown kind, a block (granule) size <= 0, or a pool
    smaller than one block.
    """
    factory = ALLOCATORS.get(spec.kind)
    if factory is None:
        raise ConfigError(
            f"allocator.kind: unknown allocator {spec.kind!r}; allowed {sorted(ALLOCATORS)}"
        )
    if spec.block_size <= 0 or spec.granule_slots <= 0:
        raise ConfigError(
            f"allocator.block_size and allocator.granule_slots must be >= 1, got "
            f"{spec.block_size} and {spec.granule_slots}"
        )
    return factory(
        spec,
        capacity_slots=capacity_slots,
        cpu_capacity_slots=cpu_capacity_slots,
        max_model_len=max_model_len,
    )
