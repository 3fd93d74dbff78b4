"""BatchPlan: what one engine step does, as the cost model sees it.

The scheduler builds a plan; the engine asks the cost model how long it takes; the
scheduler then finishes the step. The plan hides *which* requests run (the
scheduler keeps that) and carries only the totals that determine the step's duration::

    prefill (per prompt sequence in the step)           decode (per running sequence)
    |<-- cached prefix -->|<-- computed now -->|       |<-------- context -------->|+1
    '---- context c ----------------------------'       '---- context c -------------'
                          '- new q ------------'

- prefill: the number of prompts, sum(q) (tokens computed: GEMMs, KV written),
  sum(c) (K and V read) and sum(q (c - q) + q (q + 1) / 2), the causal attention scores;
- decode: the number of sequences (one new token each), sum(c) over them (the context
  includes the new token) and the KV blocks their tables hold, sum(ceil(c / B)) (for a
  contiguous cache, one region per sequence).

These are the attention kernels' sufficient statistics (``costmodel.features``), so a
plan costs O(1) whatever the batch, and a scheduler whose allocator keeps running totals
builds it in O(1). :meth:`BatchPlan.from_lens` builds one from per-sequence lengths.
A plan is an immutable named tuple; :func:`plan_of` builds the one of each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class BatchPlan(NamedTuple):
    num_prefill_seqs: int = 0
    num_prefill_tokens: int = 0
    prefill_context_sum: int = 0
    prefill_scores: float = 0.0
    num_decode_seqs: int = 0
    decode_context_sum: int = 0
    decode_num_blocks: int = 0
    num_copied_blocks: int = 0
    num_swapped_in_blocks: int = 0
    num_swapped_out_blocks: int = 0
    block_size: int = 16
    is_paged: bool = True

    @classmethod
    def from_lens(
        cls,
        prefill_new_lens: Sequence[int] = (),
        prefill_context_lens: Sequence[int] | None = None,
        decode_context_lens: Sequence[int] = (),
        **transfers_and_cache,
    ) -> BatchPlan:
        """A plan from per-sequence lengths (``prefill_context_lens`` defaults to the new
        lengths: nothing cached); ``transfers_and_cache`` are the other fields."""
        if prefill_context_lens is None:
            prefill_context_lens = prefill_new_lens
        pre = Prefill()
        for q, c in zip(prefill_new_lens, prefill_context_lens, strict=True):
            pre.add(q, c)
        block_size = transfers_and_cache.get("block_size", 16)
        is_paged = transfers_and_cache.get("is_paged", True)
        ctx = list(decode_context_lens)
        blocks = sum(-(-c // block_size) for c in ctx) if is_paged else len(ctx)
        return cls(
            num_prefill_seqs=pre.num_seqs,
            num_prefill_tokens=pre.num_tokens,
            prefill_context_sum=pre.context_sum,
            prefill_scores=pre.scores,
            num_decode_seqs=len(ctx),
            decode_context_sum=sum(ctx),
            decode_num_blocks=blocks,
            **transfers_and_cache,
        )

    @property
    def num_decode_tokens(self) -> int:
        return self.num_decode_seqs

    @property
    def num_tokens(self) -> int:
        """Tokens that go through the linear layers this step."""
        return self.num_prefill_tokens + self.num_decode_seqs

    @property
    def num_seqs(self) -> int:
        return self.num_prefill_seqs + self.num_decode_seqs

    @property
    def is_empty(self) -> bool:
        return (
            self.num_prefill_seqs == 0
            and self.num_decode_seqs == 0
            and self.num_copied_blocks == 0
            and self.num_swapped_in_blocks == 0
            and self.num_swapped_out_blocks == 0
        )


def plan_of(
    prefill: tuple[int, int, int, float],
    decode: tuple[int, int, int],
    num_copied_blocks: int,
    num_swapped_in_blocks: int,
    num_swapped_out_blocks: int,
    block_size: int,
    is_paged: bool,
) -> BatchPlan:
    """A step's plan from its totals: ``prefill`` = (sequences, tokens, context sum,
    scores), ``decode`` = (sequences, context sum, blocks), then the transfers and the
    cache's kind. A named constructor (docs/compiled_modules.md): every field in order,
    through ``tuple.__new__``."""
    return tuple.__new__(
        BatchPlan,
        (
            *prefill,
            *decode,
            num_copied_blocks,
            num_swapped_in_blocks,
            num_swapped_out_blocks,
            block_size,
            is_paged,
        ),
    )


class Prefill:
    """Running sums of the prompts a step prefills (the plan's prefill fields)."""

    __slots__ = ("num_seqs", "num_tokens", "context_sum", "scores")

    def __init__(self) -> None:
        self.num_seqs = self.num_tokens = self.context_sum = 0
        self.scores = 0.0

    def add(self, new: int, context: int) -> None:
        """A prompt computing ``new`` tokens over a context of ``context`` (cached prefix + new)."""
        self.num_seqs += 1
        self.num_tokens += new
        self.context_sum += context
        self.scores += new * (context - new) + new * (new + 1) / 2
