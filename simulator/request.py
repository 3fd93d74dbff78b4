"""Request state inside a simulation: one :class:`SequenceGroup` per trace row.

A group is one request. As in vLLM v0 it starts with a single sequence holding the
prompt; after the prompt's prefill it forks into ``n`` parallel samples or keeps
``beam_width`` beams. Every sequence of a group advances in lockstep (one token per
step), so the group keeps one token counter, ``num_generated``, for all of them:

    context of each sequence = prompt_len + num_generated
    slots held (KV computed)  = prompt_len + num_generated - 1 after the first step
                                (the newest token's KV is written by the next step)

Modelling rules (documented here because every scheduler relies on them):

- Parallel samples share the request's ``output_len``: each of the ``n`` samples
  generates exactly ``output_len`` tokens (the trace has one length per request).
- All beams end at ``output_len`` too (no early stopping without a model to score).
- A group's final length (its *target*, used only by the hindsight memory
  accounting) is ``prompt_len + output_len`` per sequence.
- A group is finished when ``num_generated == output_len``; the prefill step
  generates the first token.

Speed: groups that decode in every step (vLLM's running groups between their prefill
and a preemption, Orca's running requests) *ride* a :class:`DecodeClock` that the
scheduler ticks once per step, instead of each being advanced: while riding,
``num_generated`` = the count when it started riding + the ticks since. So a step
costs O(1) whatever the batch; the scheduler keeps a heap of the ticks at which riders
finish.

Lifecycle: ``waiting`` -> ``running`` <-> (``swapped`` | back to ``waiting`` on
recompute) -> ``finished`` | ``rejected``; ``unfinished`` when the run hits its time
limit. A rejected group always carries a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pagesim.allocators.base import AllocRequest

# Final: read as constants (docs/compiled_modules.md)
WAITING: Final = "waiting"
RUNNING: Final = "running"
SWAPPED: Final = "swapped"
FINISHED: Final = "finished"
REJECTED: Final = "rejected"
UNFINISHED: Final = "unfinished"


class DecodeClock:
    """Decode steps so far, for the groups that ride it (module docstring)."""

    __slots__ = ("ticks",)

    def __init__(self) -> None:
        self.ticks = 0


@dataclass(slots=True, eq=False, init=False)
class SequenceGroup:
    """Mutable state of one request (identity by object; ``group_id`` = trace request_id).

    Built from the request's trace row; the rest is the run's state, set here (a
    hand-written ``__init__``: docs/compiled_modules.md)."""

    group_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    n: int
    beam_width: int
    segments: tuple[tuple[int, int], ...]
    seq_ids: list[int]
    #: tokens generated when the group last stopped (or started) riding a clock
    generated_base: int
    status: str
    reason: str
    first_token_s: float
    #: when the group's latest token came out (the inter-token gaps start from it)
    last_token_s: float
    finish_s: float
    num_preemptions: int
    num_cached_tokens: int
    #: sequences the group runs once forked (vLLM v0 ``get_max_num_running_seqs``)
    max_num_seqs: int
    clock: DecodeClock | None
    clock_base: int

    def __init__(
        self,
        group_id: int,
        arrival_s: float,
        prompt_len: int,
        output_len: int,
        n: int,
        beam_width: int,
        segments: tuple[tuple[int, int], ...],
    ) -> None:
        self.group_id = group_id
        self.arrival_s = arrival_s
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.n = n
        self.beam_width = beam_width
        self.segments = segments
        self.seq_ids = []
        self.generated_base = 0
        self.status = WAITING
        self.reason = ""
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.num_preemptions = 0
        self.num_cached_tokens = 0
        self.max_num_seqs = max(n, beam_width)
        self.clock = None
        self.clock_base = 0

    @property
    def num_generated(self) -> int:
        """Tokens each sequence has generated so far."""
        clock = self.clock
        if clock is None:
            return self.generated_base
        return self.generated_base + clock.ticks - self.clock_base

    @num_generated.setter
    def num_generated(self, value: int) -> None:
        clock = self.clock
        self.generated_base = value if clock is None else value - clock.ticks + self.clock_base

    @property
    def is_riding(self) -> bool:
        return self.clock is not None

    def ride(self, clock: DecodeClock) -> None:
        """From now on, generate one token per tick of ``clock``."""
        self.generated_base = self.num_generated
        self.clock = clock
        self.clock_base = clock.ticks

    def stop_riding(self) -> None:
        self.generated_base = self.num_generated
        self.clock = None

    @property
    def is_multi_seq(self) -> bool:
        return self.max_num_seqs > 1

    @property
    def num_context_tokens(self) -> int:
        """Tokens each sequence has (prompt + generated so far)."""
        return self.prompt_len + self.num_generated

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens a (re)admission must compute: the prompt plus what was generated
        before a recompute preemption (vLLM v0 recompute: prompt := prompt + output)."""
        return self.prompt_len + self.num_generated

    @property
    def target_len(self) -> int:
        """Final length of every sequence of the group (hindsight accounting only)."""
        return self.prompt_len + self.output_len

    @property
    def is_done(self) -> bool:
        return self.num_generated >= self.output_len

    def alloc_request(self, seq_id: int) -> AllocRequest:
        """The group's admission: its prefill tokens, its final length (a named
        constructor, one per admission: docs/compiled_modules.md)."""
        prompt_len = self.prompt_len
        return tuple.__new__(
            AllocRequest,
            (
                self.group_id,
                seq_id,
                prompt_len,
                prompt_len + self.num_generated,
                self.segments,
                self.max_num_seqs,
                prompt_len + self.output_len,
            ),
        )
