"""Fast-forward: many identical-shape vLLM decode steps in one SimPy event.

Scenario: before each ``schedule()`` the engine asks :meth:`FastForward.plan_segment`
whether the next steps are a *segment* — consecutive decode steps of a fixed batch
that the step engine would run with nothing else happening. If so the engine waits
for the segment's whole duration once and :meth:`FastForward.apply` leaves the
scheduler, the allocator and the recorder exactly as the per-step path would have
left them; otherwise the step engine runs one ordinary step (the reference).

What is fast-forwarded (everything else falls back to per-step simulation):

- the vllm scheduler on the real paged allocator without prefix caching;
- nothing swapped out, at least one running group, and every running group has a
  single sequence (``n == 1``, ``beam_width == 1``) that is past its prefill;
- the waiting queue is empty, or its head would neither be admitted nor rejected:
  its prompt is within the limits and ``can_allocate`` says LATER, or says OK but
  ``max_num_seqs`` is full (it then stays out until a group finishes).

A segment of ``K`` steps ends at the first of:

- a finish: the step at which a running group generates its last token;
- an arrival: no step of the segment *starts* at or after the next arrival time
  (arrivals are URGENT, so the step engine would see it in that step's schedule);
- memory: every step must leave at least one free block after its appends, which
  guarantees vLLM v0's ``can_append_slots`` passes for every group (the exact rule
  may allow one more step; the step engine then runs it — never a different one);
- the run's time limit: only steps that end before ``max_sim_time_s`` (the step in
  flight at the limit is abandoned, as in the step engine);
- ``max_segment_steps`` (bounds the O(groups × K) arrays).

Within a segment group ``i`` (context ``c_i`` at the start, holding ``c_i - 1``
slots) holds ``c_i + k`` slots during step ``k``; step times are
``CostModel.decode_step_times_s`` (step ``k`` sees contexts ``c + k``); step start
times are the running sum ``t_{k+1} = t_k + d_k``, the additions SimPy makes; memory
usage per step follows the paged allocator's ``usage`` rule in closed form. Sample
windows split a segment (:meth:`StepRecorder.record_decode_run`). Results agree
with the step engine to floating-point rounding of the summed step times (well under
1e-9 relative), and exactly in every count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagesim.allocators.base import AllocStatus
from pagesim.allocators.paged import PagedAllocator
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.request import RUNNING, SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler, by_arrival
from pagesim.simulator.schedulers.vllm import VllmScheduler

#: (context_lens, num_steps, *, block_size, is_paged) -> per-step durations
DecodeStepTimes = Callable[..., np.ndarray]


@dataclass(frozen=True, slots=True)
class Segment:
    """``num_steps`` decode steps of ``groups`` (FCFS order), from ``start_s`` to ``end_s``."""

    groups: tuple[SequenceGroup, ...]
    num_steps: int
    start_s: float
    end_s: float
    #: per step: start time, duration, memory slots by category (5 × K), free blocks
    step_start_s: np.ndarray
    step_duration_s: np.ndarray
    mem_slots: np.ndarray
    num_free_blocks: np.ndarray
    is_blocked_last: bool
    queues: tuple[int, int, int]


def supports(scheduler: Scheduler) -> bool:
    """True when fast-forward can ever apply to this scheduler/allocator pair."""
    alloc = scheduler.allocator
    return (
        isinstance(scheduler, VllmScheduler)
        and type(alloc) is PagedAllocator
        and not alloc.is_prefix_caching
    )


class FastForward:
    """Plans and applies decode segments for one run (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        decode_step_times_s: DecodeStepTimes,
        recorder: StepRecorder,
        *,
        max_sim_time_s: float | None = None,
        max_segment_steps: int = 4096,
        min_segment_steps: int = 2,
    ) -> None:
        self.scheduler = scheduler
        self.step_times = decode_step_times_s
        self.recorder = recorder
        self.max_sim_time_s = max_sim_time_s
        self.max_segment_steps = max_segment_steps
        self.min_segment_steps = min_segment_steps
        self.is_supported = supports(scheduler)
        #: segments applied and the steps they covered (for benchmarks and docs)
        self.num_segments = 0
        self.num_ff_steps = 0

    # ---- planning --------------------------------------------------------------------

    def plan_segment(self, start_s: float, next_arrival_s: float) -> Segment | None:
        """The segment starting at ``start_s``, or None when a per-step step must run."""
        if not self.is_supported:
            return None
        sched = self.scheduler
        if sched.swapped or not sched.running:
            return None
        groups = sorted(sched.running, key=by_arrival)
        for g in groups:
            if g.max_num_seqs != 1 or g.status != RUNNING or g.num_generated < 1:
                return None
        required = self._head_required_blocks(len(groups))
        if required == -1:
            return None
        alloc: PagedAllocator = sched.allocator  # type: ignore[assignment]
        bs = alloc.block_size
        ctx = np.fromiter((g.num_context_tokens for g in groups), np.int64, len(groups))
        remaining = np.fromiter(
            (g.output_len - g.num_generated for g in groups), np.int64, len(groups)
        )
        num_steps = min(int(remaining.min()), self.max_segment_steps)
        if num_steps < self.min_segment_steps:
            return None
        num_blocks = alloc.num_total_blocks
        free_before = alloc.num_free_blocks
        if int((-(-(ctx - 1) // bs)).sum()) != num_blocks - free_before:
            return None  # something else holds blocks: not the closed form's state
        held = ctx[:, None] + np.arange(num_steps, dtype=np.int64)[None, :]
        blocks = -(-held // bs)
        num_used = blocks.sum(axis=0)
        free_after = num_blocks - num_used
        short = np.flatnonzero(free_after < 1)
        if short.size:
            num_steps = int(short[0])
        if num_steps < 1:
            return None
        durations = np.asarray(
            self.step_times(ctx, num_steps, block_size=bs, is_paged=True), dtype=np.float64
        )
        times = np.cumsum(np.concatenate(([start_s], durations)))
        num_steps = min(num_steps, int(np.searchsorted(times[:num_steps], next_arrival_s)))
        if self.max_sim_time_s is not None:
            num_steps = min(num_steps, int(np.searchsorted(times[1:], self.max_sim_time_s)))
        if num_steps < 1:
            return None
        k = num_steps
        held, blocks, num_used, free_after = (
            held[:, :k],
            blocks[:, :k],
            num_used[:k],
            free_after[:k],
        )
        if required is None:
            blocked = np.zeros(k, dtype=bool)
        else:
            free_at_schedule = np.concatenate(([free_before], free_after[:-1]))
            blocked = free_at_schedule - required < alloc.watermark_blocks
        mem = _usage(held, blocks, num_used, free_after, blocked, groups, alloc)
        return Segment(
            groups=tuple(groups),
            num_steps=k,
            start_s=start_s,
            end_s=float(times[k]),
            step_start_s=times[:k],
            step_duration_s=durations[:k],
            mem_slots=mem,
            num_free_blocks=(mem[3] + mem[4]) // bs,
            is_blocked_last=bool(blocked[-1]),
            queues=(len(sched.waiting), len(groups), 0),
        )

    def _head_required_blocks(self, num_running: int) -> int | None:
        """Blocks the waiting head asks for if it stays out (None: queue empty; -1: it
        would be admitted or rejected, so a per-step step must run)."""
        sched = self.scheduler
        if not sched.waiting:
            return None
        head = sched.waiting[0]
        spec = sched.spec
        prompt_limit = min(sched.max_model_len, spec.max_num_batched_tokens)
        if head.num_prefill_tokens > prompt_limit or head.max_num_seqs > spec.max_num_seqs:
            return -1
        status = sched._admission_status(head)
        if status is AllocStatus.NEVER:
            return -1
        is_seq_full = num_running + head.max_num_seqs > spec.max_num_seqs
        if status is AllocStatus.OK and not is_seq_full:
            return -1
        bs = sched.allocator.block_size
        required = -(-head.num_prefill_tokens // bs)
        # LATER now stays LATER (free blocks only fall within a segment); OK with a full
        # batch may turn LATER, which only changes the blocked flag of the accounting
        return required

    # ---- applying --------------------------------------------------------------------

    def apply(self, seg: Segment, now_s: float) -> None:
        """Advance scheduler, allocator and recorder by ``seg`` (the engine is at ``now_s``)."""
        sched = self.scheduler
        alloc: PagedAllocator = sched.allocator  # type: ignore[assignment]
        k = seg.num_steps
        for g in seg.groups:
            g.num_generated += k
            _append_slots(alloc, g.seq_ids[0], k)
        for g in seg.groups:
            if g.is_done:
                sched._finish(g, now_s)
        sched.running = [g for g in seg.groups if g.status == RUNNING]
        sched.is_blocked = seg.is_blocked_last
        sched.is_prefill_step = False
        sched.num_step_groups = sched.num_decode_groups = len(seg.groups)
        self.recorder.record_decode_run(
            seg.step_start_s,
            seg.step_duration_s,
            seg.mem_slots,
            seg.num_free_blocks,
            num_groups=len(seg.groups),
            num_seqs=len(seg.groups),
            queues=seg.queues,
        )
        self.num_segments += 1
        self.num_ff_steps += k


def _usage(held, blocks, num_used, free_after, blocked, groups, alloc: PagedAllocator):
    """``PagedAllocator.usage`` per step for unshared single-sequence tables (5 × K):
    token, reserved, internal, external, unused slots."""
    bs = alloc.block_size
    target = np.fromiter((g.prompt_len + g.output_len for g in groups), np.int64, len(groups))[
        :, None
    ]
    base = (blocks - 1) * bs
    fill = held - base
    partial = fill != bs
    holes = np.where(partial, bs - fill, 0).sum(axis=0)
    will_fill = np.minimum(bs, target - base)
    reserved = np.where(partial, will_fill - fill, 0).sum(axis=0)
    free_slots = free_after * bs
    outside = alloc.capacity_slots - alloc.num_total_blocks * bs
    return np.stack(
        (
            num_used * bs - holes,
            reserved,
            holes - reserved,
            outside + np.where(blocked, free_slots, 0),
            np.where(blocked, 0, free_slots),
        )
    )


def _append_slots(alloc: PagedAllocator, seq_id: int, num_slots: int) -> None:
    """``num_slots`` calls of ``PagedAllocator.append_slot`` on an unshared table: a new
    block whenever the last one is full (no copy-on-write can arise: single-sequence
    groups without prefix caching never share a partly filled block)."""
    table = alloc._table_by_seq[seq_id]
    bs = alloc.block_size
    before = alloc._num_tokens_by_seq[seq_id]
    after = before + num_slots
    for _ in range(-(-after // bs) - (-(-before // bs))):
        table.append(alloc.gpu.take())
    alloc._num_tokens_by_seq[seq_id] = after
