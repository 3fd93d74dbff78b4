"""Spec section owned by the allocators layer: which KV-cache allocator, and its knobs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

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
    paged-v1: vLLM V1's KV cache manager, for scheduler ``vllm-v1`` (``block_size``;
    ``prefix_caching`` ``true`` or ``false``, on unless set, as in V1; no watermark, no
    swap space: see ``allocators/paged_v1.py``).
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

    @model_validator(mode="before")
    @classmethod
    def _v1_caches_by_default(cls, data: Any) -> Any:
        """vLLM V1 caches prefixes unless told not to: paged-v1's ``prefix_caching``
        defaults to true (the spec then says so)."""
        if (
            isinstance(data, dict)
            and data.get("kind") == "paged-v1"
            and "prefix_caching" not in data
        ):
            return {**data, "prefix_caching": True}
        return data

    @model_validator(mode="after")
    def _check_v1(self) -> AllocatorSpec:
        if self.kind == "paged-v1":
            # a value other than the default (a dumped spec carries the defaults too)
            for key, why, is_set in (
                ("watermark", "no watermark", self.watermark != 0.01),
                ("swap_space_gib", "no swap", self.swap_space_gib != 4.0),
            ):
                if is_set:
                    raise ValueError(
                        f"allocator.{key} does not apply to paged-v1: vLLM V1 has {why}"
                    )
        return self
