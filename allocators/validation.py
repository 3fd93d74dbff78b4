"""Checks shared by every allocator: a well-formed AllocRequest, a usable target length."""

from __future__ import annotations

from collections.abc import Mapping

from pagesim.allocators.base import AllocRequest
from pagesim.errors import AllocatorError


def check_request(req: AllocRequest) -> None:
    if req.num_tokens < 1 or req.prompt_len > req.num_tokens or req.max_num_seqs < 1:
        raise AllocatorError(
            f"bad AllocRequest for group {req.group_id}: need 1 <= num_tokens "
            f"(got {req.num_tokens}), prompt_len <= num_tokens (got {req.prompt_len}), "
            f"max_num_seqs >= 1 (got {req.max_num_seqs})"
        )


def target_of(target_len_by_seq: Mapping[int, int], seq_id: int, num_tokens: int) -> int:
    """A live sequence's final length; it must be known and not below what it holds."""
    target = target_len_by_seq.get(seq_id)
    if target is None:
        raise AllocatorError(f"usage: no target length given for live sequence {seq_id}")
    if target < num_tokens:
        raise AllocatorError(
            f"usage: target length {target} of sequence {seq_id} is below its {num_tokens} tokens"
        )
    return target
