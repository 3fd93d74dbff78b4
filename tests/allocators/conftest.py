"""Helpers shared by the allocator tests."""

from __future__ import annotations

import pytest

from pagesim.allocators import AllocRequest


def make_req(group_id, prompt_len, *, num_tokens=None, seq_id=None, segments=None, max_num_seqs=1):
    """A request whose prompt is one unique segment unless ``segments`` says otherwise."""
    return AllocRequest(
        group_id=group_id,
        seq_id=group_id if seq_id is None else seq_id,
        prompt_len=prompt_len,
        num_tokens=prompt_len if num_tokens is None else num_tokens,
        segments=((1000 + group_id, prompt_len),) if segments is None else segments,
        max_num_seqs=max_num_seqs,
    )


@pytest.fixture
def req():
    return make_req
