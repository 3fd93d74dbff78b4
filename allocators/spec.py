"""Spec section owned by the allocators layer: which KV-cache allocator, and its knobs."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pagesim.specbase import OneOf, Registered
from pagesim.specbase import StrictSpec as _Spec


class AllocatorSpec(_Spec):
    """The KV-cache allocator.

    paged: vLLM's block pool (``block_size``, ``watermark`` fraction of blocks kept
    free at admission, ``prefix_caching``, ``swap_space_gib`` of CPU blocks).
    ``prefix_caching`` is ``false``, ``true`` (vLLM's automatic prefix caching: full
    prompt blocks cached by content, shared on a hit, evicted LRU once free) or
    ``pinned`` (the PagedAttention prototype's shared prefix, paper §4.4: the full
    blocks of the workload's shared prefix, ``workload.shared_prefix_len``, are held
    from the start and never freed, and every request that starts with it maps them
    instead of computing them; see ``allocators/paged.py``). The contiguous allocators
    share nothing and ignore it.
    max / pow2 / oracle: Orca's contiguous reservations (max_model_len; prompt + next
    power of two of the output; prompt + output), placed by ``placement`` over
    ``granule_slots``-slot granules: ``buddy`` (lowest address, the whole pool merges),
    ``first_fit``, or ``artifact-buddy`` (the PagedAttention artifact's Orca: the pool
    cut into ``max_model_len``-long chunks, LIFO free lists, merges within a chunk).
    """

    kind: Annotated[str, Registered("pagesim.allocators.registry", "ALLOCATORS", "allocator")] = (
        "paged"
    )
    block_size: int = Field(default=16, ge=1)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    prefix_caching: Annotated[bool | str, OneOf(False, True, "pinned")] = False
    swap_space_gib: float = Field(default=4.0, ge=0)
    placement: Annotated[
        str, Registered("pagesim.allocators.contiguous", "PLACEMENTS", "placement")
    ] = "buddy"
    granule_slots: int = Field(default=16, ge=1)
