"""Multi-round conversations rebuilt from per-request token counts, as prompt segments.

LMBench's multi-round QA client (GitHub ``LMCache/LMBenchmark``,
``synthetic-multi-round-qa/multi-round-qa.py``, commit e2da444 of April 2025, the week
of llm-d's runs) keeps one chat history per user (``ChatHistory``): round 1 sends the
system prompt and the user's own context with the first question; each later round
sends the whole history, every earlier question and the model's answer to it, plus the
new question (``UserSession._launch_new_request``, ``on_system_response``; the chat
template renders it as one prompt). So round k's prompt starts with round k−1's prompt
and its answer, token for token, and prefix caching sees that history.

As segments (:mod:`pagesim.workloads.trace`: two prompts share a prefix exactly as far
as their segment sequences agree)::

    round 1   (S, system) (u1, p1 - system)
    round 2   (S, system) (u1, p1 - system) (a1, o1) (q2, p2 - p1 - o1)
    round 3   ... round 2's segments ...    (a2, o2) (q3, p3 - p2 - o2)

with ``p`` a round's ``prompt_tokens``, ``o`` its ``generation_tokens``, ``S`` the
system prompt every user's first round starts with (``system_tokens``, 0 for none) and
a fresh id for each user's own context, each answer and each question. The new
question's length is what the recorded prompt holds beyond the history (in llm-d's
files 27–29 tokens: the question and the chat template's turn markers). Where a round's
prompt is not longer than the history it should hold (the answer re-tokenized shorter,
a round missing from the file), it keeps the history's first ``p - 1`` tokens and one
new token, and :class:`Rebuild` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagesim.workloads.trace import Segments

SYSTEM_SEGMENT = 0


@dataclass(frozen=True)
class Rebuild:
    """The rebuilt prompts (in the rows' order) and what the rebuild found."""

    segments: list[Segments]
    #: rounds after the first whose prompt was not longer than its history
    num_short_rounds: int
    #: prompt tokens that the same user's previous round (prompt and answer) covers, over
    #: all prompt tokens
    history_share: float
    num_users: int
    num_later_rounds: int


def _take(segments: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The first ``n`` tokens of ``segments`` (a segment cut keeps its id: its start)."""
    out = []
    for seg_id, length in segments:
        if n <= 0:
            break
        out.append((seg_id, min(length, n)))
        n -= length
    return out


def rebuild(
    user_id: np.ndarray,
    question_id: np.ndarray,
    prompt_len: np.ndarray,
    answer_len: np.ndarray,
    system_tokens: int,
) -> Rebuild:
    """Each row's prompt segments (module docstring). Rows of a user are taken in
    ``question_id`` order; ``answer_len`` is what each round's answer adds to the next
    round's history (its generated tokens)."""
    num = len(prompt_len)
    out: list[Segments] = [()] * num
    next_id = SYSTEM_SEGMENT + 1
    short = shared = later = 0
    order = np.lexsort((question_id, user_id))
    previous_user = None
    history: list[tuple[int, int]] = []
    for i in order.tolist():
        p = int(prompt_len[i])
        if user_id[i] != previous_user:
            previous_user = user_id[i]
            system = min(system_tokens, p - 1)
            segs = [(SYSTEM_SEGMENT, system)] if system > 0 else []
            segs.append((next_id, p - system))
            next_id += 1
        else:
            later += 1
            held = sum(n for _, n in history)
            if p > held:
                segs = [*history, (next_id, p - held)]
            else:
                short += 1
                segs = [*_take(history, p - 1), (next_id, 1)]
            next_id += 1
            shared += sum(n for _, n in segs[:-1])
        out[i] = tuple(segs)
        answer = int(answer_len[i])
        history = [*segs, (next_id, answer)] if answer > 0 else list(segs)
        next_id += 1
    total = int(np.sum(prompt_len))
    return Rebuild(
        segments=out,
        num_short_rounds=short,
        history_share=shared / total if total else 0.0,
        num_users=len(np.unique(user_id)),
        num_later_rounds=later,
    )
