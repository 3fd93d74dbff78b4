"""Helpers shared by the allocator tests."""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocRequest


def make_req(
    group_id,
    prompt_len,
    *,
    num_tokens=None,
    seq_id=None,
    segments=None,
    max_num_seqs=1,
    target_len=None,
):
    """A request whose prompt is one unique segment unless ``segments`` says otherwise;
    its sequences end at ``target_len`` (default: 64 tokens past what they hold now)."""
    num_tokens = prompt_len if num_tokens is None else num_tokens
    return AllocRequest(
        group_id=group_id,
        seq_id=group_id if seq_id is None else seq_id,
        prompt_len=prompt_len,
        num_tokens=num_tokens,
        segments=((1000 + group_id, prompt_len),) if segments is None else segments,
        max_num_seqs=max_num_seqs,
        target_len=num_tokens + 64 if target_len is None else target_len,
    )


@pytest.fixture
def req():
    return make_req
