"""Checks shared by every allocator: a well-formed AllocRequest."""

from __future__ import annotations

from pagesim.allocators.base import AllocRequest
from pagesim.errors import AllocatorError


def check_request(req: AllocRequest) -> None:
    if (
        req.num_tokens < 1
        or req.prompt_len > req.num_tokens
        or req.max_num_seqs < 1
        or req.target_len < 0
    ):
        raise AllocatorError(
            f"bad AllocRequest for group {req.group_id}: need 1 <= num_tokens "
            f"(got {req.num_tokens}), prompt_len <= num_tokens (got {req.prompt_len}), "
            f"max_num_seqs >= 1 (got {req.max_num_seqs}), target_len >= 0 "
            f"(got {req.target_len})"
        )
