"""The fast engine: vLLM v0 and Orca, event-driven, without SimPy.

``RunSpec.engine = "fast"`` runs here when the run is in scope (see
:func:`unsupported_reason`; anything else runs on the reference step engine, and
``RunResult.extra["fast_engine"]`` says which engine ran). In scope, every request a
single sequence (``n == 1``, ``beam_width == 1``), no prefix caching:

- ``vllm`` on the paged allocator: recompute and swap preemption, the watermark,
  ``max_num_seqs``, ``max_num_batched_tokens``, rejections;
- ``orca`` on the contiguous allocators (Max, Pow2, Oracle on a buddy or first-fit
  heap): mixed prefill + decode iterations, head-of-line blocking, rejections. The
  real allocator places and frees the reservations (placement decides external
  fragmentation); nothing else about them changes between admissions and finishes;

and for both, time limits, sample windows and ``every_step``.

Why it is fast. Without sharing, a sequence's blocks are ``ceil(held / B)`` and no
block id matters to any result, so the engine keeps counts, not block tables. And
every running group gains one slot per decode step, so with ``D`` the number of
decode steps so far, a group that holds ``h`` slots when it joins at ``D0`` holds
``off + D`` slots (``off = h - D0``) for as long as it runs. The engine keeps running
totals over the running groups::

    n_run     groups running            sum_off   sum of off  (sum held = sum_off + n_run D)
    used      blocks held               hist[r]   groups with off = r (mod B)
    internal  slots of final blocks that will never fill (internal fragmentation)

and two heaps of future events keyed by ``D``: the step at which a group finishes
(its context reaches prompt + output - 1) and the step at which it opens its final
block (from then on its internal fragmentation counts). A decode step is O(1): the
groups that open a block this step are ``hist[-D mod B]`` (those whose held slots are
a multiple of B), the step's time is ``CostModel.decode_step_time_fn`` of
``(n_run, sum held, used)`` — bit-identical to ``step_time_s`` — and the memory
breakdown is ``token = sum held``, ``reserved = used B - internal - token``, free
blocks as external fragmentation (a request is blocked) or unused. Admissions,
finishes, preemptions and swaps are events, each O(log n) or O(running groups).

Orca keeps the same ``off``/``D`` bookkeeping (every running request decodes every
iteration) and, per reservation of ``R`` slots spanning ``A`` heap slots, adds the
request's target to ``sum target`` (reserved = sum target - sum held), ``R - target``
to the internal fragmentation and ``A - R`` to the heap padding (external
fragmentation), as ``ContiguousAllocator.usage`` counts them. A blocked head of the
queue is asked again only after the heap changed.

vLLM v0's ``can_append_slots`` (a free block for each group, visited FCFS) passes for
every group when ``free > opened``; otherwise the step takes the exact slow path:
the groups are visited one by one in FCFS order and the latest arrivals preempted,
as ``VllmScheduler._reserve_decode_slots`` does.

Exactness (``tests/simulator/test_fastengine.py`` runs both engines on seeded random
configurations): the same schedule, the same step durations bit for bit (arrival
times are chained the way SimPy computes them), the same per-step memory; only run
totals are summed window by window instead of step by step, so they agree to
floating-point rounding (1e-9 relative is asserted; counts are exact).

Inter-token gaps (vLLM's ITL samples, ``simulator/token_gaps.py``) are recorded in
bulk too: a decode step adds one count for the groups whose previous token came from
the previous decode step, and one per distinct time for the groups that joined since
(a prefill, a swap-in); a recompute's prefill adds its own gap. The multiset equals
the step engine's.

Debug mode (``check_invariants``): after every step the running totals are
recomputed from the running groups and compared.
"""

from __future__ import annotations

import heapq
import time
from array import array
from bisect import insort
from collections import deque

import numpy as np
import pandas as pd

from pagesim.allocators.base import AllocRequest, AllocStatus, KVAllocator
from pagesim.errors import InvariantError
from pagesim.simulator.costmodel.model import CostModel
from pagesim.simulator.metrics import StepRecorder
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.result import REQUEST_COLUMNS, RunResult
from pagesim.simulator.schedulers.base import reservation_never_fits_reason
from pagesim.simulator.schedulers.vllm import (
    SWAP_IN_NEVER,
    SWAP_OUT_ABORTED,
    never_fits_reason,
    prompt_limit_reason,
)
from pagesim.simulator.spec import RunSpec, SchedulerSpec
from pagesim.simulator.summary import run_result
from pagesim.simulator.token_gaps import TokenGaps
from pagesim.workloads.trace import Trace

# request states (one byte each)
_PENDING, _WAITING, _RUNNING, _SWAPPED, _FINISHED, _REJECTED, _UNFINISHED = range(7)
_STATUS_NAMES = ("pending", "waiting", "running", "swapped", "finished", "rejected", "unfinished")
_NONE, _PREFILL, _DECODE = range(3)


def unsupported_reason(spec: RunSpec, trace: Trace) -> str | None:
    """Why the fast engine cannot run ``spec`` on ``trace`` (None: it can)."""
    reason = spec_unsupported_reason(spec)
    if reason is not None:
        return reason
    table = trace.table
    if len(table) == 0:
        return "an empty trace"
    if (table["n"].to_numpy() > 1).any() or (table["beam_width"].to_numpy() > 1).any():
        return "parallel sampling or beam search (multi-sequence groups share blocks)"
    return None


def spec_unsupported_reason(spec: RunSpec) -> str | None:
    """:func:`unsupported_reason` from the spec alone (the trace may still rule it out)."""
    if spec.scheduler.kind not in ("vllm", "orca"):
        return f"scheduler {spec.scheduler.kind!r}: it runs vllm and orca"
    if spec.allocator.prefix_caching:
        return "prefix caching (block contents matter, not only block counts)"
    if spec.workload.n > 1 or spec.workload.beam_width > 1:
        return "parallel sampling or beam search (multi-sequence groups share blocks)"
    return None


def run_fast(
    trace: Trace,
    *,
    scheduler: SchedulerSpec,
    allocator: KVAllocator,
    cost_model: CostModel,
    max_model_len: int,
    sample_interval_s: float = 1.0,
    every_step: bool = False,
    max_sim_time_s: float | None = None,
    check_invariants: bool = False,
    progress: bool = False,
    wall_start: float | None = None,
    token_gaps: TokenGaps | None = None,
) -> RunResult:
    """Replay ``trace`` (in scope: :func:`unsupported_reason` is None) and return the
    RunResult the step engine would return. ``allocator`` only supplies the pool's
    parameters; it is not touched. Inter-token gaps go into ``token_gaps`` when given."""
    wall_start = time.perf_counter() if wall_start is None else wall_start
    recorder = StepRecorder(
        capacity_slots=allocator.capacity_slots,
        block_size=allocator.block_size,
        sample_interval_s=sample_interval_s,
        every_step=every_step,
    )
    run = _FastRun(
        trace,
        scheduler,
        allocator,
        cost_model,
        max_model_len=max_model_len,
        recorder=recorder,
        max_sim_time_s=max_sim_time_s,
        check_invariants=check_invariants,
        token_gaps=token_gaps if token_gaps is not None else TokenGaps(),
    )
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=run.num_requests, unit="req", desc="simulate (fast)")
    run.run(bar)
    if bar is not None:
        bar.update(run.num_requests - bar.n)
        bar.close()
    result = run_result(
        trace,
        run.requests_frame(),
        recorder,
        end_s=run.end_s,
        num_preemptions=run.num_preemptions,
        prefix_hit_rate=allocator.prefix_cache.hit_rate,
        wall_start=wall_start,
    )
    result.extra["fast_engine"] = 1.0
    return result


def _simpy_arrival_times(arrival_s: list[float]) -> list[float]:
    """The times SimPy processes the arrivals at: each is ``now + (arrival - now)`` from
    the previous one (the step engine's arrivals process), which may differ from
    ``arrival`` in the last bit; step times chain from these values."""
    out = []
    now = 0.0
    for a in arrival_s:
        if a > now:
            now = now + (a - now)
        out.append(now)
    return out


class _FastRun:
    """One run's state; :meth:`run` is the event loop (module docstring)."""

    def __init__(
        self,
        trace: Trace,
        sched: SchedulerSpec,
        alloc: KVAllocator,
        cost: CostModel,
        *,
        max_model_len: int,
        recorder: StepRecorder,
        max_sim_time_s: float | None,
        check_invariants: bool,
        token_gaps: TokenGaps,
    ) -> None:
        table = trace.table
        self.table = table
        self.num_requests = len(table)
        self.arrival = _simpy_arrival_times(table["arrival_s"].tolist())
        self.prompt = table["prompt_len"].tolist()
        self.output = table["output_len"].tolist()
        self.sched = sched
        self.alloc = alloc
        self.cost = cost
        self.prompt_limit = min(max_model_len, sched.max_num_batched_tokens)
        self.recorder = recorder
        self.max_sim_time_s = max_sim_time_s
        self.check = check_invariants
        self.token_gaps = token_gaps
        # results
        n = self.num_requests
        self.status = bytearray(n)
        self.reason: dict[int, str] = {}
        self.first_token_s = [float("nan")] * n
        self.finish_s = [float("nan")] * n
        self.num_preempted = [0] * n
        self.num_preemptions = 0
        self.end_s = 0.0

    # ---- the event loop -----------------------------------------------------------------

    def run(self, bar=None) -> None:  # noqa: C901, PLR0912, PLR0915 — one loop, kept flat for speed
        alloc, sched, cost, rec = self.alloc, self.sched, self.cost, self.recorder
        is_orca = sched.kind == "orca"
        bs = alloc.block_size  # block size, or granule size of a contiguous heap
        total = alloc.num_total_blocks
        capacity = alloc.capacity_slots
        outside = capacity - total * bs
        if is_orca:
            wm = cpu_total = 0
            true_len = alloc.needs_true_output_len
        else:
            wm = alloc.watermark_blocks
            cpu_total = alloc.num_cpu_total_blocks
        is_swap_mode = sched.preemption_mode == "swap"
        max_seqs = sched.max_num_seqs
        max_batched = sched.max_num_batched_tokens
        prompt_limit = self.prompt_limit
        arrival, prompt, output = self.arrival, self.prompt, self.output
        target = [p + o for p, o in zip(prompt, output, strict=True)]
        num_req = self.num_requests
        limit_s = float("inf") if self.max_sim_time_s is None else self.max_sim_time_s
        status, reason = self.status, self.reason
        first_token_s, finish_s, num_preempted = (
            self.first_token_s,
            self.finish_s,
            self.num_preempted,
        )
        decode_time = cost.decode_step_time_fn(is_paged=not is_orca)
        step_time = cost.step_time_s
        prefill_time_by_len: dict[int, float] = {}
        heappush, heappop = heapq.heappush, heapq.heappop

        # per request: slots held = off + D while running; admissions so far (stales heap
        # entries); tokens generated before the current admission; slots held while swapped
        off = [0] * num_req
        epoch = [0] * num_req
        gen = [0] * num_req
        held_swapped: dict[int, int] = {}
        # inter-token gaps (simulator/token_gaps.py): every running group decodes in every
        # decode step, so its latest token came out at t_dec (the end of the latest decode
        # step) unless it is *fresh*: (re)joined since then, its latest token at tok_t[i]
        # (a prefill's end, or its last token before a swap-out). fresh counts them by
        # tok_t; fresh_mark[i] == num_dec_done marks one. Gaps of a decode step: t - t_dec
        # for the others, t - tok_t for the fresh; a recompute's prefill: t - tok_t.
        gap_s, gap_count = array("d"), array("q")  # (gap, count) pairs, handed over at the end
        tok_t = [0.0] * num_req
        fresh_mark = [-1] * num_req
        fresh: dict[float, int] = {}
        num_dec_done = 0
        t_dec = 0.0

        # running totals (module docstring); orca: sum of targets, reservation slots past
        # the targets (internal fragmentation), heap spans past the reservations (padding)
        n_run = sum_off = used = internal = 0
        tgt_total = int_total = pad_total = 0
        span_by_req: dict[int, tuple[int, int]] = {}
        # the heap changes only at allocations and frees: a LATER head is asked again only
        # after one (the contiguous allocators' answers are functions of the heap state)
        heap_version = 0
        later_req = later_version = -1
        heap_free_slots = alloc.num_free_blocks * bs if is_orca else 0
        hist = [0] * bs
        running: list[int] = []  # FCFS (request index = arrival order)
        waiting: deque[int] = deque()
        swapped: list[int] = []
        cpu_used = 0
        finish_heap: list[tuple[int, int, int]] = []  # (D at the finishing step, i, epoch)
        final_heap: list[tuple[int, int, int]] = []  # (D at which the final block opens, i, epoch)
        D = 0
        t = 0.0
        nxt = 0
        num_ended = 0

        # run counters and the open sample window's sums
        iv = rec.sample_interval_s
        every_step = rec.every_step
        num_steps = num_decode_steps = decode_batch_sum = num_swapped_blocks = 0
        w_index = -1
        w_t = 0.0
        w_steps = w_batch = w_pre = w_dec = w_q0 = w_q1 = w_q2 = w_swapped = 0
        w_m0 = w_m1 = w_m2 = w_m3 = w_m4 = w_free = w_dur = 0.0

        def join(i: int, held: int) -> None:
            """Group ``i`` is on the GPU holding ``held`` slots at the current D."""
            nonlocal n_run, sum_off, used, internal
            o = held - D
            off[i] = o
            ep = epoch[i] = epoch[i] + 1
            n_run += 1
            sum_off += o
            hist[o % bs] += 1
            used += -(-held // bs)
            insort(running, i)
            status[i] = _RUNNING
            tg = target[i]
            r = tg % bs
            if r:  # the final block will hold r of bs slots
                if held > tg - r:
                    internal += bs - r
                else:
                    heappush(final_heap, (tg - r + 1 - o, i, ep))
            heappush(finish_heap, (tg - 1 - o, i, ep))

        def leave(i: int) -> tuple[int, int]:
            """Group ``i`` leaves the GPU: (slots, blocks) it held."""
            nonlocal n_run, sum_off, used, internal
            o = off[i]
            held = o + D
            blocks = -(-held // bs)
            n_run -= 1
            sum_off -= o
            hist[o % bs] -= 1
            used -= blocks
            tg = target[i]
            r = tg % bs
            if r and held > tg - r:
                internal -= bs - r
            running.remove(i)
            epoch[i] += 1
            return held, blocks

        def join_reservation(i: int) -> None:
            """Orca admitted request ``i`` (its region is allocated) holding its prompt."""
            nonlocal n_run, sum_off, tgt_total, int_total, pad_total
            region = alloc.region(i)
            reserved = region.reserved_slots
            tg = target[i]
            if reserved < tg:
                raise InvariantError(
                    f"fast engine: request {i}'s {alloc.kind} reservation of {reserved} slots is "
                    f"below its final length {tg}"
                )
            span = region.num_granules * bs
            span_by_req[i] = (reserved, span)
            o = prompt[i] - D
            off[i] = o
            ep = epoch[i] = epoch[i] + 1
            n_run += 1
            sum_off += o
            tgt_total += tg
            int_total += reserved - tg
            pad_total += span - reserved
            running.append(i)  # admitted in FCFS order after every running request
            status[i] = _RUNNING
            heappush(finish_heap, (tg - 1 - o, i, ep))

        def leave_reservation(i: int) -> None:
            nonlocal n_run, sum_off, tgt_total, int_total, pad_total, heap_version, heap_free_slots
            reserved, span = span_by_req.pop(i)
            tg = target[i]
            n_run -= 1
            sum_off -= off[i]
            tgt_total -= tg
            int_total -= reserved - tg
            pad_total -= span - reserved
            running.remove(i)
            epoch[i] += 1
            alloc.free(i)
            heap_version += 1
            heap_free_slots = alloc.num_free_blocks * bs

        def end(i: int, state: int, why: str = "") -> None:
            nonlocal num_ended
            status[i] = state
            if why:
                reason[i] = why
            num_ended += 1

        def flush() -> None:
            nonlocal w_steps, w_batch, w_pre, w_dec, w_q0, w_q1, w_q2, w_swapped
            nonlocal w_m0, w_m1, w_m2, w_m3, w_m4, w_free, w_dur
            rec.add_window(
                w_t,
                w_dur,
                w_steps,
                w_batch,
                w_pre,
                w_dec,
                (w_m0, w_m1, w_m2, w_m3, w_m4),
                w_free,
                (w_q0, w_q1, w_q2),
                w_swapped,
            )
            w_steps = w_batch = w_pre = w_dec = w_q0 = w_q1 = w_q2 = w_swapped = 0
            w_m0 = w_m1 = w_m2 = w_m3 = w_m4 = w_free = w_dur = 0.0
            if bar is not None:
                bar.update(num_ended - bar.n)

        stopped = False
        while True:
            while nxt < num_req and arrival[nxt] <= t:
                waiting.append(nxt)
                status[nxt] = _WAITING
                nxt += 1

            # ---- schedule (VllmScheduler.schedule; at most twice, as the step engine) ----
            kind = _NONE
            admitted: list[int] = []
            swapped_in = swapped_out = 0
            blocked = False
            num_decoding = n_run
            if is_orca:  # OrcaScheduler.schedule: every running request decodes, then admit
                if n_run:
                    D += 1
                while waiting and n_run + 1 <= max_seqs:
                    i = waiting[0]
                    if i == later_req and heap_version == later_version:
                        blocked = True  # LATER stays LATER until the heap changes
                        break
                    req = AllocRequest(
                        group_id=i,
                        seq_id=i,
                        prompt_len=prompt[i],
                        num_tokens=prompt[i],
                        segments=(),
                    )
                    state = alloc.can_allocate(req, output[i] if true_len else None)
                    if state is AllocStatus.LATER:
                        blocked = True
                        later_req, later_version = i, heap_version
                        break
                    waiting.popleft()
                    if state is AllocStatus.NEVER:
                        end(
                            i,
                            _REJECTED,
                            reservation_never_fits_reason(
                                alloc.kind, prompt[i], output[i], 1, capacity
                            ),
                        )
                        continue
                    alloc.allocate(req, output[i] if true_len else None)
                    heap_version += 1
                    heap_free_slots = alloc.num_free_blocks * bs
                    join_reservation(i)
                    admitted.append(i)
                if admitted or num_decoding:
                    kind = _PREFILL if admitted else _DECODE
            for _attempt in () if is_orca else (0, 1):
                blocked = False
                admitted = []
                swapped_in = swapped_out = 0
                if waiting and not swapped:
                    num_batched = 0
                    num_seqs = n_run
                    while waiting:
                        i = waiting[0]
                        num_tokens = prompt[i] + gen[i]
                        if num_tokens > prompt_limit:
                            waiting.popleft()
                            end(i, _REJECTED, prompt_limit_reason(num_tokens, prompt_limit))
                            continue
                        required = -(-num_tokens // bs)
                        if total - required < wm:
                            waiting.popleft()
                            end(i, _REJECTED, never_fits_reason(num_tokens, capacity))
                            continue
                        if total - used - required < wm:
                            blocked = True
                            break
                        if num_batched + num_tokens > max_batched or num_seqs + 1 > max_seqs:
                            break
                        waiting.popleft()
                        join(i, num_tokens)
                        admitted.append(i)
                        num_batched += num_tokens
                        num_seqs += 1
                    if admitted:
                        kind = _PREFILL
                        break
                if not n_run and not swapped:
                    break
                # decode: one more slot for every running group, preempting from the tail
                preempted = False
                if total - used <= hist[-D % bs]:
                    free = total - used
                    queue = deque(running)
                    while queue:
                        g = queue.popleft()
                        while free < 1:
                            preempted = True
                            victim = queue.pop() if queue else g
                            held, blocks = leave(victim)
                            if fresh_mark[victim] == num_dec_done:  # latest token: tok_t
                                left = fresh[tok_t[victim]] - 1
                                if left:
                                    fresh[tok_t[victim]] = left
                                else:
                                    del fresh[tok_t[victim]]
                                fresh_mark[victim] = -1
                            else:
                                tok_t[victim] = t_dec
                            free += blocks
                            num_preempted[victim] += 1
                            self.num_preemptions += 1
                            if is_swap_mode:
                                if blocks <= cpu_total - cpu_used:
                                    cpu_used += blocks
                                    swapped_out += blocks
                                    held_swapped[victim] = held
                                    swapped.append(victim)
                                    status[victim] = _SWAPPED
                                else:
                                    end(victim, _REJECTED, SWAP_OUT_ABORTED)
                            else:
                                gen[victim] = held - prompt[victim] + 1
                                waiting.appendleft(victim)
                                status[victim] = _WAITING
                            if victim == g:
                                break
                        else:
                            if (off[g] + D) % bs == 0:
                                free -= 1
                    if preempted:
                        blocked = True
                if n_run:
                    used += hist[-D % bs]
                    D += 1
                    while final_heap and final_heap[0][0] <= D:
                        d, i, ep = heappop(final_heap)
                        if ep == epoch[i]:
                            tg = target[i]
                            internal += bs - tg % bs
                if not preempted and swapped:
                    swapped.sort()
                    num_seqs = n_run
                    while swapped:
                        i = swapped[0]
                        held = held_swapped[i]
                        blocks = -(-held // bs)
                        required = blocks + 1
                        if total - required < wm:
                            swapped.pop(0)
                            del held_swapped[i]
                            cpu_used -= blocks
                            end(i, _REJECTED, SWAP_IN_NEVER)
                            continue
                        if total - used - required < wm:
                            blocked = True
                            break
                        if num_seqs + 1 > max_seqs:
                            break
                        swapped.pop(0)
                        del held_swapped[i]
                        cpu_used -= blocks
                        swapped_in += blocks
                        join(i, held + 1)  # swapped in, then its decode slot appended
                        fresh[tok_t[i]] = fresh.get(tok_t[i], 0) + 1
                        fresh_mark[i] = num_dec_done
                        num_seqs += 1
                if n_run or swapped_out:
                    kind = _DECODE
                    break

            # ---- idle until the next arrival, or the end of the run ---------------------------
            if kind == _NONE:
                if nxt == num_req:
                    if waiting or n_run or swapped:
                        raise InvariantError(
                            f"{sched.kind} (fast engine) is stuck at t={t:.3f}s: {len(waiting)} waiting, "
                            f"{n_run} running, {len(swapped)} swapped, and nothing can run"
                        )
                    self.end_s = t
                    break
                end_t = arrival[nxt]
                duration = end_t - t
                num_step_groups = num_prefill_tokens = num_decode_tokens = 0
            # ---- or the step's duration --------------------------------------------------------
            elif is_orca:
                num_step_groups = num_decoding + len(admitted)
                num_decode_tokens = num_decoding
                num_prefill_tokens = 0
                if admitted:
                    lens = tuple(prompt[i] for i in admitted)
                    num_prefill_tokens = sum(lens)
                    duration = step_time(
                        BatchPlan(
                            prefill_new_lens=lens,
                            prefill_context_lens=lens,
                            decode_context_lens=tuple(off[i] + D for i in running[:num_decoding]),
                            block_size=bs,
                            is_paged=False,
                        )
                    )
                else:
                    duration = decode_time(n_run, sum_off + n_run * D, n_run)
            elif kind == _PREFILL:
                num_step_groups = len(admitted)
                lens = [off[i] + D for i in admitted]
                num_prefill_tokens = sum(lens)
                if num_step_groups == 1:
                    duration = prefill_time_by_len.get(num_prefill_tokens)
                    if duration is None:
                        duration = prefill_time_by_len[num_prefill_tokens] = step_time(
                            BatchPlan(
                                prefill_new_lens=(num_prefill_tokens,),
                                prefill_context_lens=(num_prefill_tokens,),
                                block_size=bs,
                            )
                        )
                else:
                    duration = step_time(
                        BatchPlan(
                            prefill_new_lens=tuple(lens),
                            prefill_context_lens=tuple(lens),
                            block_size=bs,
                        )
                    )
                num_decode_tokens = 0
            else:
                num_step_groups = num_decode_tokens = n_run
                num_prefill_tokens = 0
                if swapped_in or swapped_out:
                    duration = step_time(
                        BatchPlan(
                            decode_context_lens=tuple(off[i] + D for i in running),
                            num_swapped_in_blocks=swapped_in,
                            num_swapped_out_blocks=swapped_out,
                            block_size=bs,
                        )
                    )
                else:
                    duration = decode_time(n_run, sum_off + n_run * D, used)
            if kind != _NONE:
                end_t = t + duration
            if end_t >= limit_s:  # the step in flight (or the idle period) is abandoned
                stopped = True
                break

            # ---- record the step or idle period (memory as it stands after the schedule) -------
            if every_step:
                w_t = t
            else:
                index = int(t // iv)
                if index != w_index:
                    flush()
                    w_index = index
                    w_t = index * iv
            tok = sum_off + n_run * D
            if is_orca:
                res, intl, ext = tgt_total - tok, int_total, outside + pad_total
                free_slots = heap_free_slots
            else:
                res, intl, ext = used * bs - internal - tok, internal, outside
                free_slots = (total - used) * bs
            if kind != _NONE:
                num_steps += 1
                if num_decode_tokens:  # steps that decode; orca's batch counts its prefills too
                    num_decode_steps += 1
                    decode_batch_sum += num_step_groups
                moved = swapped_in + swapped_out
                num_swapped_blocks += moved
                w_steps += 1
                w_batch += num_step_groups
                w_pre += num_prefill_tokens
                w_dec += num_decode_tokens
                w_q0 += len(waiting)
                w_q1 += n_run
                w_q2 += len(swapped)
                w_swapped += moved
            w_m0 += tok * duration
            w_m1 += res * duration
            w_m2 += intl * duration
            if blocked:
                w_m3 += (ext + free_slots) * duration
            else:
                w_m3 += ext * duration
                w_m4 += free_slots * duration
            w_free += (ext + free_slots) // bs * duration
            w_dur += duration
            if every_step:
                flush()

            # ---- the step ends: tokens, finishes --------------------------------------------------
            t = end_t
            if kind == _NONE:
                continue
            if is_orca:  # every running request decoded in the previous iteration too
                if num_decoding:
                    gap_s.append(t - t_dec)
                    gap_count.append(num_decoding)
                t_dec = t
                for i in admitted:
                    first_token_s[i] = t
                while finish_heap and finish_heap[0][0] <= D:
                    d, i, ep = heappop(finish_heap)
                    if ep == epoch[i]:
                        leave_reservation(i)
                        finish_s[i] = t
                        end(i, _FINISHED)
            elif kind == _PREFILL:
                for i in admitted:
                    if (
                        first_token_s[i] != first_token_s[i]
                    ):  # NaN: a recomputed group keeps its own
                        first_token_s[i] = t
                    else:
                        gap_s.append(t - tok_t[i])
                        gap_count.append(1)
                    tok_t[i] = t
                    if gen[i] + 1 >= output[i]:
                        leave(i)
                        finish_s[i] = t
                        end(i, _FINISHED)
                    else:
                        fresh[t] = fresh.get(t, 0) + 1
                        fresh_mark[i] = num_dec_done
            else:
                if n_run:
                    num_fresh = 0
                    if fresh:
                        for fresh_t, count in fresh.items():
                            gap_s.append(t - fresh_t)
                            gap_count.append(count)
                            num_fresh += count
                        fresh.clear()
                    if n_run > num_fresh:
                        gap_s.append(t - t_dec)
                        gap_count.append(n_run - num_fresh)
                    t_dec = t
                    num_dec_done += 1
                while finish_heap and finish_heap[0][0] <= D:
                    d, i, ep = heappop(finish_heap)
                    if ep == epoch[i]:
                        leave(i)
                        finish_s[i] = t
                        end(i, _FINISHED)
            if self.check and is_orca:
                self._check_orca(D, running, off, target, span_by_req, n_run, sum_off, tgt_total)
            elif self.check:
                self._check(D, running, off, target, n_run, sum_off, used, internal, hist, bs)
                if total - used < 0 or cpu_used < 0 or cpu_used > cpu_total:
                    raise InvariantError(
                        f"fast engine: {total - used} free GPU blocks, {cpu_used} CPU blocks used"
                    )

        if stopped:
            self.end_s = limit_s
            why = f"not finished at max_sim_time_s = {self.max_sim_time_s}"
            for i in sorted([*waiting, *running, *swapped]):
                end(i, _UNFINISHED, why)
            why = f"arrives after max_sim_time_s = {self.max_sim_time_s}"
            for i in range(nxt, num_req):
                end(i, _UNFINISHED, why)
        flush()  # the open window (nothing when empty)
        self.token_gaps.add_many(
            np.frombuffer(gap_s, dtype=np.float64), np.frombuffer(gap_count, dtype=np.int64)
        )
        rec.add_counts(
            num_steps=num_steps,
            num_decode_steps=num_decode_steps,
            decode_batch_sum=decode_batch_sum,
            num_swapped_blocks=num_swapped_blocks,
        )

    @staticmethod
    def _check_orca(D, running, off, target, span_by_req, n_run, sum_off, tgt_total) -> None:
        """Orca's running totals recomputed from the running requests (debug mode)."""
        got = (n_run, sum_off, tgt_total, sorted(span_by_req))
        expected = (len(running), sum(off[i] for i in running), sum(target[i] for i in running))
        if got != (*expected, running) or running != sorted(running):
            raise InvariantError(f"fast engine (orca) totals drifted at D={D}: {got} != {expected}")
        for i in running:
            held = off[i] + D
            if not 1 <= held < target[i] or span_by_req[i][0] < target[i]:
                raise InvariantError(f"request {i} holds {held} slots, target {target[i]}")

    @staticmethod
    def _check(D, running, off, target, n_run, sum_off, used, internal, hist, bs) -> None:
        """Every running total recomputed from the running groups (debug mode)."""
        held = [off[i] + D for i in running]
        expected = {
            "n_run": len(running),
            "sum_off": sum(off[i] for i in running),
            "used": sum(-(-h // bs) for h in held),
            "internal": sum(
                bs - target[i] % bs
                for i, h in zip(running, held, strict=True)
                if target[i] % bs and h > target[i] - target[i] % bs
            ),
        }
        got = {"n_run": n_run, "sum_off": sum_off, "used": used, "internal": internal}
        residues = [0] * bs
        for i in running:
            residues[off[i] % bs] += 1
        if got != expected or residues != hist or running != sorted(running):
            raise InvariantError(f"fast engine totals drifted at D={D}: {got} != {expected}")
        for i, h in zip(running, held, strict=True):
            if not 1 <= h < target[i]:
                raise InvariantError(f"request {i} holds {h} slots, target {target[i]}")

    # ---- results ------------------------------------------------------------------------

    def requests_frame(self) -> pd.DataFrame:
        """REQUEST_COLUMNS, one row per request in request_id order (as the step engine)."""
        t = self.table
        codes = np.frombuffer(bytes(self.status), dtype=np.uint8)
        left = np.flatnonzero(codes < _FINISHED)
        if left.size:
            raise InvariantError(
                f"fast engine: request {int(left[0])} ended the run {_STATUS_NAMES[codes[left[0]]]}"
            )
        done = codes == _FINISHED
        arrival = t["arrival_s"].to_numpy(dtype=np.float64)
        output = t["output_len"].to_numpy()
        nan = np.nan
        first = np.where(done, np.asarray(self.first_token_s, dtype=np.float64), nan)
        finish = np.where(done, np.asarray(self.finish_s, dtype=np.float64), nan)
        e2e = finish - arrival
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(output > 1, (finish - first) / (output - 1), nan)
        names = np.array(_STATUS_NAMES, dtype=object)[codes]
        reasons = np.full(len(t), "", dtype=object)
        for i, why in self.reason.items():
            reasons[i] = why
        columns = {
            "request_id": t["request_id"].to_numpy(),
            "arrival_s": arrival,
            "prompt_len": t["prompt_len"].to_numpy(),
            "output_len": output,
            "n": t["n"].to_numpy(),
            "beam_width": t["beam_width"].to_numpy(),
            "status": names,
            "reason": reasons,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - arrival,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "normalized_latency_s_per_tok": e2e / output,
            "num_preemptions": np.asarray(self.num_preempted, dtype=np.int64),
            "num_cached_tokens": np.zeros(len(t), dtype=np.int64),
        }
        assert tuple(columns) == REQUEST_COLUMNS, "request columns drifted"
        return pd.DataFrame(columns)
