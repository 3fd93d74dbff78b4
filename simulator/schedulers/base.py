"""What every scheduler shares: the queues, the step plan, and a group's progress.

A scheduler owns the request queues and talks to memory only through the allocator
interface (``allocators/base.py``). The engine drives it with two calls per step::

    plan = scheduler.schedule(now_s)       # who runs, which slots; transfers drained
    ... the step takes cost_model.step_time_s(plan) seconds ...
    scheduler.finish_step(plan, now_s)     # tokens appended, forks, frees

``schedule`` remembers which groups it put in the step (the plan itself carries
only what the cost model needs). Groups that end (finished, rejected) are collected
and handed to the metrics with :meth:`drain_done`.

Progress of a group after a step (:meth:`_advance`), the same for every scheduler:

- one token per sequence (the prefill step generates the first token);
- after the first prefill of a request with ``n`` > 1 samples, the prompt's sequence
  forks ``n - 1`` times (vLLM v0: the prompt is computed once);
- beam search keeps ``beam_width`` beams every step. With no model to score them,
  each kept beam's parent is drawn uniformly, with replacement, among the current
  beams from the run's seeded generator; a parent chosen c times continues as the
  first of them and forks c - 1 children; parents never chosen are freed first
  (a contiguous allocator forks into the regions they leave). Uniform
  parents with replacement give the coalescing ancestry (beams share long prefixes)
  that the paper's beam-sharing savings come from;
- when the group has generated ``output_len`` tokens it is finished (no forks on the
  last step) and, unless the scheduler holds memory longer, its sequences are freed.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque

import numpy as np

from pagesim.allocators.base import AllocStatus, KVAllocator
from pagesim.errors import InvariantError
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.request import (
    FINISHED,
    REJECTED,
    RUNNING,
    SWAPPED,
    UNFINISHED,
    WAITING,
    SequenceGroup,
)
from pagesim.simulator.spec import SchedulerSpec
from pagesim.simulator.token_gaps import TokenGaps


def reservation_never_fits_reason(
    kind: str, prompt_len: int, output_len: int, num_seqs: int, capacity_slots: int
) -> str:
    return (
        f"a {kind} reservation for prompt {prompt_len} + output {output_len} "
        f"(x{num_seqs} sequences) can never fit the {capacity_slots}-slot KV pool"
    )


def by_arrival(group: SequenceGroup) -> int:
    """FCFS sort key: request ids are in arrival order (trace contract)."""
    return group.group_id


class Scheduler(ABC):
    """Base of the vllm / orca / static schedulers (see the module docstring)."""

    kind: str = "abstract"

    def __init__(
        self,
        spec: SchedulerSpec,
        allocator: KVAllocator,
        *,
        max_model_len: int,
        rng: np.random.Generator,
    ) -> None:
        self.spec = spec
        self.allocator = allocator
        self.max_model_len = max_model_len
        self.rng = rng
        self.waiting: deque[SequenceGroup] = deque()
        self.running: list[SequenceGroup] = []
        self.swapped: list[SequenceGroup] = []
        #: each live sequence's final length, for the hindsight memory accounting
        self.target_len_by_seq: dict[int, int] = {}
        #: True when the last schedule() left a request waiting for memory it could not get
        self.is_blocked = False
        #: what the last plan held: a prefill in it; groups in it; groups decoding in it
        self.is_prefill_step = False
        self.num_step_groups = 0
        self.num_decode_groups = 0
        self.num_preemptions = 0
        #: every inter-token gap, for vLLM's ITL statistics (simulator/token_gaps.py)
        self.token_gaps = TokenGaps()
        self._stepped: list[SequenceGroup] = []
        self._done: list[SequenceGroup] = []
        self._next_seq_id = 0
        #: prompt tokens served from the prefix cache, per group admitted in this schedule()
        self._prefill_cached: dict[int, int] = {}

    # ---- the engine's interface -----------------------------------------------------

    def add(self, group: SequenceGroup) -> None:
        """A request arrives: it joins the tail of the waiting queue."""
        group.status = WAITING
        self.waiting.append(group)

    @abstractmethod
    def schedule(self, now_s: float) -> BatchPlan:
        """Choose the next step's batch; an empty plan means nothing can run now."""

    def finish_step(self, plan: BatchPlan, now_s: float) -> None:
        """Every group in the step generated one token per sequence."""
        for group in self._stepped:
            self._advance(group, now_s)
        self._stepped = []
        self.running = [g for g in self.running if g.status == RUNNING]

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    @property
    def num_running_groups(self) -> int:
        return len(self.running)

    def drain_done(self) -> list[SequenceGroup]:
        """Groups that ended (finished or rejected) since the last call."""
        done, self._done = self._done, []
        return done

    def stop(self, reason: str) -> list[SequenceGroup]:
        """The run is over (time limit): every group still queued or running is unfinished."""
        left = sorted([*self.waiting, *self.running, *self.swapped], key=by_arrival)
        for group in left:
            group.status = UNFINISHED
            group.reason = reason
        self.waiting.clear()
        self.running = []
        self.swapped = []
        return left

    def check_invariants(self) -> None:
        """Queues are disjoint and consistent with each group's status and the allocator."""
        seen: set[int] = set()
        for queue, status in (
            (self.waiting, WAITING),
            (self.running, RUNNING),
            (self.swapped, SWAPPED),
        ):
            for group in queue:
                if group.status != status:
                    raise InvariantError(
                        f"group {group.group_id} in {status} queue has status {group.status}"
                    )
                if group.group_id in seen:
                    raise InvariantError(f"group {group.group_id} is in two queues")
                seen.add(group.group_id)
        for group in self.waiting:
            if group.seq_ids:
                raise InvariantError(
                    f"waiting group {group.group_id} holds sequences {group.seq_ids}"
                )
        live = [s for g in (*self.running, *self.swapped) for s in g.seq_ids]
        if len(live) != len(set(live)) or set(live) != set(self.target_len_by_seq):
            raise InvariantError(
                f"live sequences {sorted(live)} != tracked {sorted(self.target_len_by_seq)}"
            )
        for group in self.running:
            if group.is_done:
                continue
            for seq_id in group.seq_ids:
                held = self.allocator.num_slots(seq_id)
                if held not in (group.num_context_tokens - 1, group.num_context_tokens):
                    raise InvariantError(
                        f"seq {seq_id} of group {group.group_id} holds {held} slots, "
                        f"context is {group.num_context_tokens}"
                    )

    # ---- helpers for subclasses -------------------------------------------------------

    def _new_seq_id(self, group: SequenceGroup) -> int:
        seq_id = self._next_seq_id
        self._next_seq_id += 1
        group.seq_ids.append(seq_id)
        self.target_len_by_seq[seq_id] = group.target_len
        return seq_id

    def _free_seq(self, seq_id: int) -> None:
        self.allocator.free(seq_id)
        del self.target_len_by_seq[seq_id]

    def _free_group(self, group: SequenceGroup) -> None:
        for seq_id in reversed(group.seq_ids):
            self._free_seq(seq_id)
        group.seq_ids = []

    def _admit_head(self) -> AllocStatus:
        """Try the head of the waiting queue against a reserving allocator (Orca, static).

        OK: allocated and running; NEVER: rejected with a reason (the caller moves on);
        LATER: left waiting and ``is_blocked`` set (head-of-line blocking).
        """
        group = self.waiting[0]
        status = self._admission_status(group)
        if status is AllocStatus.LATER:
            self.is_blocked = True
        elif status is AllocStatus.NEVER:
            self.waiting.popleft()
            alloc = self.allocator
            self._reject(
                group,
                reservation_never_fits_reason(
                    alloc.kind,
                    group.prompt_len,
                    group.output_len,
                    group.max_num_seqs,
                    alloc.capacity_slots,
                ),
            )
        else:
            self.waiting.popleft()
            self._allocate(group)
            self.running.append(group)
        return status

    def _admission_status(self, group: SequenceGroup) -> AllocStatus:
        true_len = group.output_len if self.allocator.needs_true_output_len else None
        return self.allocator.can_allocate(group.alloc_request(-1), true_len)

    def _allocate(self, group: SequenceGroup) -> None:
        """Admit ``group`` (its admission check said OK): one sequence holds the prompt."""
        seq_id = self._new_seq_id(group)
        true_len = group.output_len if self.allocator.needs_true_output_len else None
        allocation = self.allocator.allocate(group.alloc_request(seq_id), true_len)
        if allocation is None:
            raise InvariantError(
                f"{self.allocator.kind}: can_allocate said OK for group {group.group_id} "
                "but allocate returned None"
            )
        group.num_cached_tokens += allocation.num_cached_tokens
        group.status = RUNNING
        self._prefill_cached[group.group_id] = allocation.num_cached_tokens

    def _reject(self, group: SequenceGroup, reason: str) -> None:
        """End ``group`` without serving it (it is reported with ``reason``, never lost)."""
        if group.seq_ids:
            self._free_group(group)
        group.status = REJECTED
        group.reason = reason
        self._done.append(group)

    def _finish(self, group: SequenceGroup, now_s: float, *, free: bool = True) -> None:
        if free:
            self._free_group(group)
        group.status = FINISHED
        group.finish_s = now_s
        self._done.append(group)

    def _plan(self, prefill: list[SequenceGroup], decode: list[SequenceGroup]) -> BatchPlan:
        """The step's BatchPlan; drains the allocator's copies and swaps into it."""
        new_lens: list[int] = []
        ctx_lens: list[int] = []
        for group in prefill:
            ctx = group.num_prefill_tokens
            ctx_lens.append(ctx)
            new_lens.append(ctx - self._prefill_cached.pop(group.group_id, 0))
        decode_lens = [g.num_context_tokens for g in decode for _ in g.seq_ids]
        transfers = self.allocator.drain_transfers()
        self._stepped = [*prefill, *decode]
        self.is_prefill_step = bool(prefill)
        self.num_step_groups = len(self._stepped)
        self.num_decode_groups = len(decode)
        return BatchPlan(
            prefill_new_lens=tuple(new_lens),
            prefill_context_lens=tuple(ctx_lens),
            decode_context_lens=tuple(decode_lens),
            num_copied_blocks=transfers.num_copied_blocks,
            num_swapped_in_blocks=transfers.num_swapped_in_blocks,
            num_swapped_out_blocks=transfers.num_swapped_out_blocks,
            block_size=self.allocator.block_size,
            is_paged=self.allocator.is_paged,
        )

    def _append_slots(self, group: SequenceGroup) -> None:
        for seq_id in group.seq_ids:
            self.allocator.append_slot(seq_id)

    def _advance(self, group: SequenceGroup, now_s: float) -> None:
        """One token per sequence, then finish the group or fork (module docstring)."""
        if group.status != RUNNING:
            return
        self._generate_token(group, now_s)
        if group.is_done:
            self._finish(group, now_s)

    def _generate_token(self, group: SequenceGroup, now_s: float) -> None:
        group.num_generated += 1
        if math.isnan(group.first_token_s):  # a recomputed group keeps its first-token time
            group.first_token_s = now_s
        else:
            self.token_gaps.add(now_s - group.last_token_s)
        group.last_token_s = now_s
        if group.is_done:
            return
        if group.beam_width > 1:
            self._beam_step(group)
        elif group.n > 1 and len(group.seq_ids) == 1:
            parent = group.seq_ids[0]
            for _ in range(group.n - 1):
                self.allocator.fork(parent, self._new_seq_id(group))

    def _beam_step(self, group: SequenceGroup) -> None:
        beams = list(group.seq_ids)
        parents = self.rng.integers(0, len(beams), size=group.beam_width)
        counts = np.bincount(parents, minlength=len(beams)).tolist()
        # free the beams not chosen first: a contiguous allocator forks into their regions
        for beam, count in zip(beams, counts, strict=True):
            if count == 0:
                self._free_seq(beam)
        group.seq_ids = []
        for parent, count in zip(beams, counts, strict=True):
            if count == 0:
                continue
            group.seq_ids.append(parent)
            for _ in range(count - 1):
                self.allocator.fork(parent, self._new_seq_id(group))
