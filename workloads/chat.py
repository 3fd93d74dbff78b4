"""Multi-turn chat requests built from a conversation length table.

Rule (PagedAttention, Kwon et al. SOSP 2023, §6.5, chatbot): the prompt of turn k is
the conversation so far — every earlier user message and model reply — followed by
the new user message, truncated to its last ``context_len`` (1024) tokens; the
output is the model's reply to turn k. Content identity carries the sharing:

    turn 0 prompt:  [u0]
    turn 1 prompt:  [u0][r0][u1]         <- starts with turn 0's prompt
    turn 2 prompt:  [u0][r0][u1][r1][u2]
    truncated:         [r0'][u1][r1][u2]  <- r0' = the last tokens of r0: new content

Each message is its own segment id, unique per *sampled conversation instance* (a
conversation drawn twice is two users). A message cut by the truncation becomes a
new segment id (its suffix is different content), shared by every turn that keeps
exactly that suffix.

Conversations are sampled whole (their kept turns, in order) until ``num``
requests, and the turns of all sampled conversations are interleaved uniformly at
random while each conversation's turns keep their order. Limitation: a turn's
arrival is not gated on the previous turn's reply finishing (a static trace cannot
know when that is).
"""

from __future__ import annotations

import numpy as np

from pagesim.errors import ConfigError
from pagesim.workloads.assemble import SHARED_PREFIX_SEGMENT_ID
from pagesim.workloads.lengthtable import LengthTable
from pagesim.workloads.trace import Segments

CHAT_CONTEXT_LEN = 1024


def _row_starts(conv_ids: np.ndarray) -> np.ndarray:
    """Index of the first row of each row's conversation (rows of a conversation are contiguous)."""
    is_start = np.r_[True, conv_ids[1:] != conv_ids[:-1]]
    return np.maximum.accumulate(np.where(is_start, np.arange(len(conv_ids)), 0))


def chat_prompt_len(table: LengthTable, context_len: int = CHAT_CONTEXT_LEN) -> np.ndarray:
    """Each turn's prompt length: history + new message, capped at ``context_len``."""
    assert table.conv_ids is not None
    both = table.prompt_len + table.output_len
    cum = np.cumsum(both)
    starts = _row_starts(table.conv_ids)
    before = cum - both - np.r_[0, cum][starts]
    return np.minimum(before + table.prompt_len, context_len)


def _sample_instances(
    num_turns: np.ndarray, num: int, replace: bool, rng: np.random.Generator
) -> np.ndarray:
    """Indices of sampled conversations whose kept turns add up to at least ``num``."""
    if replace:
        mean_turns = max(float(num_turns.mean()), 1.0)
        picks = np.empty(0, dtype=np.int64)
        while num_turns[picks].sum() < num:
            picks = np.r_[picks, rng.integers(0, len(num_turns), int(num / mean_turns) + 8)]
    else:
        picks = rng.permutation(len(num_turns))
        if num_turns.sum() < num:
            raise ConfigError(
                f"workload.num_requests = {num} but only {int(num_turns.sum())} chat turns remain "
                "after filters; set workload.replace: true or ask for fewer"
            )
    need = np.searchsorted(np.cumsum(num_turns[picks]), num) + 1
    return picks[:need]


def chat_requests(
    table: LengthTable,
    keep: np.ndarray,
    *,
    num: int,
    replace: bool,
    rng: np.random.Generator,
    context_len: int = CHAT_CONTEXT_LEN,
    shared_prefix_len: int = 0,
) -> tuple[np.ndarray, np.ndarray, list[Segments]]:
    """(own prompt_len, output_len, segments) of ``num`` chat requests in arrival order."""
    assert table.conv_ids is not None
    kept_rows = np.flatnonzero(keep)
    if len(kept_rows) == 0:
        raise ConfigError("no chat turns remain after the workload filters")
    conv_of_kept = table.conv_ids[kept_rows]
    convs, first, num_turns = np.unique(conv_of_kept, return_index=True, return_counts=True)
    picks = _sample_instances(num_turns, num, replace, rng)
    counts = num_turns[picks].copy()
    counts[-1] -= counts.sum() - num
    labels = rng.permutation(np.repeat(np.arange(len(picks)), counts))
    # Position p holds the (occurrence number of labels[p])-th kept turn of its instance.
    order = np.argsort(labels, kind="stable")
    offsets = np.r_[0, np.cumsum(counts)[:-1]]
    ordinal = np.empty(num, dtype=np.int64)
    ordinal[order] = np.arange(num) - np.repeat(offsets, counts)
    rows = kept_rows[first[picks][labels] + ordinal]
    prompt = chat_prompt_len(table, context_len)
    starts = _row_starts(table.conv_ids)
    turns_in_conv = rows - starts[rows]
    segments = _chat_segments(
        table, rows, starts[rows], turns_in_conv, labels, picks, context_len, shared_prefix_len
    )
    return prompt[rows], table.output_len[rows], segments


def _chat_segments(
    table: LengthTable,
    rows: np.ndarray,
    start_rows: np.ndarray,
    turns_in_conv: np.ndarray,
    labels: np.ndarray,
    picks: np.ndarray,
    context_len: int,
    shared_prefix_len: int,
) -> list[Segments]:
    # Instance i owns message ids base[i] + 2 * turn (user) and + 1 (reply).
    max_turns = np.zeros(len(picks), dtype=np.int64)
    np.maximum.at(max_turns, labels, turns_in_conv + 1)
    base = 1 + np.r_[0, np.cumsum(2 * max_turns)[:-1]]
    next_id = int(1 + 2 * max_turns.sum())
    cut_to_id: dict[tuple[int, int], int] = {}
    prefix: Segments = ((SHARED_PREFIX_SEGMENT_ID, shared_prefix_len),) if shared_prefix_len else ()
    user_len, reply_len = table.prompt_len.tolist(), table.output_len.tolist()
    out: list[Segments] = []
    for row, start, turn, label in zip(
        rows.tolist(), start_rows.tolist(), turns_in_conv.tolist(), labels.tolist(), strict=True
    ):
        b = int(base[label])
        msgs = [(b + 2 * turn, user_len[row])]
        budget = context_len - user_len[row]
        for k in range(turn - 1, -1, -1):
            if budget <= 0:
                break
            for mid, mlen in (
                (b + 2 * k + 1, reply_len[start + k]),
                (b + 2 * k, user_len[start + k]),
            ):
                if budget <= 0:
                    break
                if mlen > budget:
                    key = (mid, budget)
                    if key not in cut_to_id:
                        cut_to_id[key] = next_id
                        next_id += 1
                    mid, mlen = cut_to_id[key], budget
                if mlen > 0:
                    msgs.append((mid, mlen))
                budget -= mlen
        if msgs[0][1] > context_len:
            key = (msgs[0][0], context_len)
            if key not in cut_to_id:
                cut_to_id[key] = next_id
                next_id += 1
            msgs[0] = (cut_to_id[key], context_len)
        out.append(prefix + tuple(reversed(msgs)))
    return out
