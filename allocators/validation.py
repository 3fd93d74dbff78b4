"""Checks shared by every allocator: a well-formed AllocRequest, and the freed sequence ids."""

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


class FreedIds:
    """The sequence ids an allocator has freed (to tell "already freed" from "never
    allocated" in its errors): a byte per id up to the largest, not an object per id
    (sequence ids count up from 0, and a long run frees millions of them)."""

    __slots__ = ("_flags", "_others")

    def __init__(self) -> None:
        self._flags = bytearray()
        self._others: set[int] = set()  # negative ids, if a caller uses any

    def add(self, seq_id: int) -> None:
        if seq_id < 0:
            self._others.add(seq_id)
            return
        flags = self._flags
        if seq_id >= len(flags):
            flags.extend(bytes(seq_id + 1 - len(flags) + len(flags) // 2))
        flags[seq_id] = 1

    def discard(self, seq_id: int) -> None:
        if seq_id < 0:
            self._others.discard(seq_id)
        elif seq_id < len(self._flags):
            self._flags[seq_id] = 0

    def __contains__(self, seq_id: int) -> bool:
        if seq_id < 0:
            return seq_id in self._others
        return seq_id < len(self._flags) and self._flags[seq_id] == 1
