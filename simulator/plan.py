"""BatchPlan: what one engine step does, as the cost model sees it.

The scheduler builds a plan; the engine asks the cost model how long it takes; the
scheduler then finishes the step. The plan hides *which* requests run (the
scheduler keeps that) and carries only what determines the step's duration.

    prefill (per prompt sequence in the step)           decode (per running sequence)
    |<-- cached prefix -->|<-- computed now -->|       |<-------- context -------->|+1
    '---- prefill_context_lens[i] ------------'        '---- decode_context_lens[j]'
                          '- prefill_new_lens[i]'

``prefill_new_lens[i]`` tokens are computed (GEMMs, KV written) and attend over
``prefill_context_lens[i]`` tokens; a decode sequence computes one token that
attends over its ``decode_context_lens[j]`` tokens (including itself).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchPlan:
    prefill_new_lens: tuple[int, ...] = ()
    prefill_context_lens: tuple[int, ...] = ()
    decode_context_lens: tuple[int, ...] = ()
    num_copied_blocks: int = 0
    num_swapped_in_blocks: int = 0
    num_swapped_out_blocks: int = 0
    block_size: int = 16
    is_paged: bool = True

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_new_lens)

    @property
    def num_decode_tokens(self) -> int:
        return len(self.decode_context_lens)

    @property
    def num_tokens(self) -> int:
        """Tokens that go through the linear layers this step."""
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def num_seqs(self) -> int:
        return len(self.prefill_new_lens) + len(self.decode_context_lens)

    @property
    def is_empty(self) -> bool:
        return (
            self.num_seqs == 0
            and self.num_copied_blocks == 0
            and self.num_swapped_in_blocks == 0
            and self.num_swapped_out_blocks == 0
        )
