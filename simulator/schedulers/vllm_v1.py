"""vLLM's V1 scheduler (``vllm-v1``; v0.15.1 and v0.19.0), over vLLM V1's KV cache manager.

Scenario: no prefill or decode phase. Every request has ``num_computed_tokens`` and
``num_tokens`` (prompt + generated so far), and each step lets the first catch up with
the second, within one token budget (``vllm/v1/core/sched/scheduler.py``,
``Scheduler.schedule``, and the NOTE at its top). Each rule, with its file in
``vllm/v1/core/`` (v0.19.0; v0.15.1 the same unless said):

1. Budget. ``max_num_batched_tokens`` tokens per step (``max_num_scheduled_tokens``),
   spent on the running requests first, then on waiting ones.
2. Running requests (``sched/scheduler.py``, the RUNNING loop), in ``running`` order,
   which is admission order, while budget is left: a request gets ``num_tokens -
   num_computed_tokens`` tokens, capped by ``long_prefill_token_threshold`` (when > 0)
   and by the budget left; so a decoding request gets one token, and a request whose
   prompt was cut gets the rest of it, or the next chunk. Requests past the point
   where the budget ran out get nothing this step and keep their place.
3. Memory for it: ``kv_cache_manager.allocate_slots``. When it fails, the last request
   of ``running`` (the most recently admitted) is preempted and the allocation tried
   again; when the request itself is the last one, it is preempted and the RUNNING
   loop stops (``break``: the requests after it get nothing this step). Preemption
   recomputes (``_preempt_request``): its blocks are freed (they keep their keys, so
   it may find them again in the prefix cache), ``num_computed_tokens`` = 0, and it
   goes to the front of ``waiting``. V1 has no swap.
4. Waiting requests (the WAITING loop), only in a step that preempted nothing, in queue
   order while budget is left; the scan stops at the first that cannot be scheduled
   (head-of-line blocking): ``running`` holds ``max_num_seqs`` requests; or (v0.19
   only, ``scheduler_reserve_full_isl``, here ``reserve_full_prompt``, default on) its
   whole length, ``min(num_tokens, max_model_len)``, does not fit the free blocks
   with its hits (``kv_cache_manager.can_fit_full_sequence``; v0.15.1 asks only for
   the first chunk, and may admit a prompt it must then preempt); or
   ``allocate_slots`` fails. Its prefix-cache hits come first
   (``kv_cache_manager.get_computed_blocks``: whole blocks, never the last token);
   it computes ``num_tokens - hits`` (so a preempted request recomputes its outputs
   too), capped by the threshold and the budget left: the first chunk, the rest
   following in the next steps as a running request.
5. Tokens (``update_from_output``; ``sched/utils.py``, ``check_stop``). A request
   emits a token in the step whose tokens bring ``num_computed_tokens`` to
   ``num_tokens`` (the last chunk of its prompt, or a decode); a step that computes
   an earlier chunk emits nothing. It finishes in the step that emits its
   ``output_len``-th token (the trace's length: ``ignore_eos``), and its blocks are
   freed (in reverse, tail first) before the next step; within a step, requests end
   in the order they were scheduled (running order, then admissions).

What pagesim cannot serve is rejected with a reason instead of blocking the queue:
a request of ``n`` > 1 samples or beam search (V1 runs parallel samples as separate
requests and beam search outside the engine); a prompt of ``max_model_len`` tokens or
more (``v1/engine/input_processor.py``); prompt + output over ``max_model_len`` (V1
would cut the output short); a request whose tokens need more blocks than the pool
has (vLLM refuses to start when ``max_model_len`` does not fit its KV cache).

The plan. Prompt chunks are the plan's prefill fields: ``new`` = the chunk, its
context = computed + chunk, so the cost model prices chunked prefill attention over
what is cached or already computed (its last chunk too, if it is one token); a
request that emitted a token since its admission decodes (one token, context = its
tokens). ``is_blocked`` (memory accounting): a
request waited for memory (admission stopped on memory, or a preemption).

6. Async scheduling (``async_scheduling``, vLLM's ``--async-scheduling``; off here
   unless set). ``v1/engine/core.py``, ``EngineCore.step_with_batch_queue`` with a batch
   queue of two: the engine schedules step N + 1 as soon as step N is launched, before
   N's outputs are known (``sched/async_scheduler.py`` counts each running request's
   token of step N as a placeholder), and only then blocks on N's result. So the step
   that starts when step N ends was scheduled when N started: a request that reached
   the scheduler while N ran joins the step after it, one step later than without
   async scheduling. When nothing runs, the engine schedules a newcomer at once.
   The queue is FCFS, so the scan stops at the first request too new for the step.

Not modelled: async scheduling's CPU/GPU overlap (a step's host time, which the
profiles mostly do not hold, hides behind the GPU's; and the extra step the async
scheduler may give a request that its previous step finished), spec decoding,
priorities, LoRA, encoder inputs, KV connectors.

7. Without chunked prefill (``chunked_prefill: false``, vLLM's
   ``--no-enable-chunked-prefill``; ``sched/scheduler.py``, the WAITING loop, vLLM PR
   #28911): a waiting request whose new tokens exceed the budget left stops admission
   for the step (``break``) instead of taking a first chunk, so every prompt is computed
   in one step. vLLM then refuses to start unless ``max_num_batched_tokens`` is at least
   ``max_model_len`` (``config/scheduler.py``); here a request longer than the budget
   (prompt + output, so that its recompute fits too) is rejected with that reason.

Speed: decoding requests ride the decode clock (``schedulers/riders.py``). When every
running request decodes (none has tokens left to compute), the budget covers them and
the KV cache manager can give each its slot (``can_append_all``: a free block for each
that opens one), step 2 is one bulk append (``append_slot_all``, blocks handed out in
admission order, as the loop would), and when nothing waits the next steps repeat it:
the engine runs them as a steady decode span. Otherwise step 2 visits the requests one
by one, and a rider that gets no token this step leaves the clock.
"""

from __future__ import annotations

from typing import cast

from mypy_extensions import mypyc_attr

from pagesim.allocators.paged_v1 import PagedV1Allocator
from pagesim.errors import InvariantError
from pagesim.simulator.plan import Prefill
from pagesim.simulator.request import RUNNING, WAITING, SequenceGroup
from pagesim.simulator.schedulers.base import Scheduler
from pagesim.simulator.schedulers.step import Step


def _by_schedule_order(work: tuple[int, int, SequenceGroup]) -> int:
    """Groups end in the order they were scheduled: by sequence id, given at admission."""
    return work[1]


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class VllmV1Scheduler(Scheduler):
    kind = "vllm-v1"
    needs_paged = True
    kv_interface = "kv-cache-manager"
    pairing_note = "it allocates through vLLM V1's allocate_slots"
    rides_clock = True

    def _init_state(self) -> None:
        super()._init_state()
        self._threshold = self.spec.long_prefill_token_threshold
        self._reserve_full = self.spec.reserve_full_prompt is not False
        self._chunking = self.spec.chunked_prefill is not False
        # None: the release's default, resolved by simulate() (simulator/vllm_releases.py)
        self._async = bool(self.spec.async_scheduling)
        self._kv = cast(PagedV1Allocator, self.allocator)
        #: num_computed_tokens of the running groups that do not ride the clock (a rider
        #: has computed every token but its newest)
        self._computed: dict[SequenceGroup, int] = {}
        #: the groups this step schedules one by one, with their new tokens, in order
        self._chunks: list[tuple[SequenceGroup, int]] = []
        #: running groups that have not emitted a token since their admission (their
        #: chunks, the last one too, are prefills; the others' tokens are decodes)
        self._prefilling: dict[SequenceGroup, None] = {}

    # ---- the step ------------------------------------------------------------------
    def schedule(self, now_s: float) -> Step:
        budget = self.max_num_batched_tokens
        kv = self._kv
        pre = Prefill()
        decode = (0, 0, 0)
        ticks = preempted = False
        num_decode_groups = 0
        if self.running:
            num_running = len(self.running)
            if not self._individual and num_running <= budget and kv.can_append_all():
                # 2. every running request decodes one token, and each gets its slot
                kv.append_slot_all()
                decode = kv.decode_sums()
                num_decode_groups = num_running
                budget -= num_running
                ticks = True
            else:
                budget, preempted, ticks, decode = self._schedule_running(budget, pre)
                num_decode_groups = decode[0]
        is_blocked = preempted
        hits = 0
        if not preempted and self.waiting:
            # 6. async scheduling: this step was scheduled when the one before it started
            cutoff_s = now_s
            if self._async and self.running and self.prev_step_start_s < now_s:
                cutoff_s = self.prev_step_start_s
            is_blocked, hits = self._schedule_waiting(budget, pre, cutoff_s)
        return self._step(
            decode_groups=num_decode_groups,
            decode=decode,
            is_blocked=is_blocked,
            ticks=ticks,
            steady=ticks
            and not preempted
            and not self._individual
            and not self.waiting
            and len(self.running) <= self.max_num_batched_tokens,
            prefill=(pre.num_seqs, pre.num_tokens, pre.context_sum, pre.scores),
            prefix_hit_tokens=hits,
        )

    def _schedule_running(
        self, budget: int, pre: Prefill
    ) -> tuple[int, bool, bool, tuple[int, int, int]]:
        """Rules 2 and 3, one request at a time: the budget left, whether anything was
        preempted, whether riders decode (the clock ticks), and the decodes' totals."""
        kv = self._kv
        bs = self._block_size
        threshold = self._threshold
        order = list(self.running)
        # the requests left are order[i:end]: scheduled from the front, preempted from the back
        i, end = 0, len(order)
        preempted = ticks = False
        num_decodes = context_sum = num_blocks = 0
        while i < end and budget > 0:
            group = order[i]
            num_tokens = group.num_context_tokens
            is_riding = group.clock is not None
            computed = num_tokens - 1 if is_riding else self._computed[group]
            num_new = num_tokens - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            seq_id = group.seq_ids[0]
            is_allocated = kv.allocate_slots(seq_id, num_new)
            while not is_allocated:
                end -= 1
                victim = order[end]
                self._preempt(victim)
                preempted = True
                if victim is group:
                    break
                is_allocated = kv.allocate_slots(seq_id, num_new)
            if not is_allocated:
                break
            budget -= num_new
            i += 1
            if is_riding:
                ticks = True
            else:
                self._chunks.append((group, num_new))
            if group in self._prefilling:
                pre.add(num_new, computed + num_new)
            else:
                num_decodes += 1
                context_sum += num_tokens
                num_blocks += -(-num_tokens // bs)
        for j in range(i, end):
            group = order[j]
            if group.clock is not None:  # no token this step: off the clock
                self._computed[group] = group.num_context_tokens - 1
                self._stop_riding(group)
                self._individual[group] = None
        return budget, preempted, ticks, (num_decodes, context_sum, num_blocks)

    def _schedule_waiting(self, budget: int, pre: Prefill, cutoff_s: float) -> tuple[bool, int]:
        """Rule 4: admit from the head of ``waiting`` the requests that reached the
        scheduler by ``cutoff_s`` (rule 6); whether it stopped for memory, and the prompt
        tokens the admitted requests found in the prefix cache."""
        kv = self._kv
        waiting = self.waiting
        threshold = self._threshold
        delay_s = self.arrival_delay_s
        num_hit_tokens = 0
        while waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                break
            group = waiting[0]
            if group.arrival_s + delay_s > cutoff_s:
                break  # it reached the scheduler after this step was scheduled
            reason = self._never_reason(group)
            if reason:
                waiting.popleft()
                self._reject(group, reason)
                continue
            req = self._admission_request(group)
            num_tokens = req.num_tokens
            hit = kv.find_cached(req)
            num_new = num_tokens - hit
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                if not self._chunking:
                    break  # rule 7: the whole prompt or nothing
                num_new = budget
            if self._reserve_full and not kv.can_fit(req, min(num_tokens, self.max_model_len)):
                return True, num_hit_tokens
            seq_id = self._next_seq_id
            if kv.admit(group.alloc_request(seq_id), num_new) is None:
                return True, num_hit_tokens
            waiting.popleft()
            self._new_seq_id(group)
            group.num_cached_tokens += hit
            num_hit_tokens += hit
            group.status = RUNNING
            self.running[group] = None
            self._num_running_seqs += 1
            self._individual[group] = None
            self._computed[group] = hit
            self._prefilling[group] = None
            self._chunks.append((group, num_new))
            pre.add(num_new, hit + num_new)
            budget -= num_new
        return False, num_hit_tokens

    def _never_reason(self, group: SequenceGroup) -> str:
        """Why the head of ``waiting`` can never be served here ("" when it can)."""
        if group.max_num_seqs > 1:
            return (
                f"vllm-v1 serves one sequence per request (n = {group.n}, beam width "
                f"{group.beam_width}): vLLM V1 runs parallel samples as separate requests "
                "and beam search outside its engine"
            )
        if group.prompt_len >= self.max_model_len:
            return (
                f"prompt of {group.prompt_len} tokens: vLLM V1 takes prompts shorter than "
                f"max_model_len = {self.max_model_len}"
            )
        if group.prompt_len + group.output_len > self.max_model_len:
            return (
                f"prompt {group.prompt_len} + output {group.output_len} exceeds max_model_len "
                f"= {self.max_model_len} (vLLM V1 would cut the output short)"
            )
        length = group.prompt_len + group.output_len
        if not self._chunking and length > self.max_num_batched_tokens:
            return (
                f"prompt {group.prompt_len} + output {group.output_len} exceeds "
                f"max_num_batched_tokens = {self.max_num_batched_tokens} without chunked "
                "prefill (vLLM then needs max_num_batched_tokens >= max_model_len)"
            )
        num_blocks = -(-group.num_context_tokens // self._block_size)
        if num_blocks > self._kv.num_usable_blocks:
            return (
                f"needs {num_blocks} blocks for {group.num_context_tokens} tokens, more than "
                f"the KV pool's {self._kv.num_usable_blocks} usable blocks"
            )
        return ""

    def finish_step(self, step: Step, now_s: float) -> None:
        """Rule 5: the riders decoded a token each; a request scheduled one by one emits
        one when its computed tokens reach its tokens. Ends in scheduling order."""
        work: list[tuple[int, int, SequenceGroup]] = []
        if self._ticks:
            self.tick(now_s)
            for group in self._pop_due_riders():
                work.append((0, group.seq_ids[0], group))
        chunks = self._chunks
        if chunks:
            self._chunks = []
            computed_by_group = self._computed
            for group, num_new in chunks:
                computed = computed_by_group[group] + num_new
                computed_by_group[group] = computed
                if computed == group.num_context_tokens:
                    if group in self._prefilling:
                        del self._prefilling[group]
                    work.append((0, group.seq_ids[0], group))
        if not work:
            if not self._steady and self.steady_after_plain_step:
                self._steady_blocked = False
                self._steady = self._steady_after_advance(False)
            return
        if len(work) > 1:
            work.sort(key=_by_schedule_order)
        self._advance(work, now_s)

    def finish_due(self, now_s: float) -> bool:
        """``DecodeRiders.finish_due``, the riders ending in scheduling order."""
        due = self._pop_due_riders()
        if not due:
            return False
        work = [(0, group.seq_ids[0], group) for group in due]
        if len(work) > 1:
            work.sort(key=_by_schedule_order)
        self._advance(work, now_s)
        return True

    def _steady_after_advance(self, ended: bool) -> bool:
        """The next step is a bulk decode of every running request when nothing waits,
        every running request decodes, and the budget covers them all."""
        return (
            self.rides_clock
            and not self.waiting
            and not self._individual
            and len(self.running) <= self.max_num_batched_tokens
        )

    # ---- the groups' state ------------------------------------------------------------
    def _ride(self, group: SequenceGroup) -> None:
        self._computed.pop(group, None)
        super()._ride(group)

    def _stop_running(self, group: SequenceGroup) -> None:
        self._computed.pop(group, None)
        self._prefilling.pop(group, None)
        super()._stop_running(group)

    def _finish(self, group: SequenceGroup, now_s: float, *, free: bool = True) -> None:
        """A request ends: its blocks go back (``free_finished``: no request can hit the
        ones holding its generated tokens)."""
        if free and group.seq_ids:
            self._kv.free_finished(group.seq_ids[0])
            group.seq_ids = []
            self._num_frees += 1
        super()._finish(group, now_s, free=False)

    def _preempt(self, group: SequenceGroup) -> None:
        """Rule 3: recompute (blocks freed, back to the front of ``waiting``)."""
        group.num_preemptions += 1
        self.num_preemptions += 1
        self._stop_running(group)
        self._free_group(group)
        group.status = WAITING
        self.waiting.appendleft(group)

    def check_invariants(self) -> None:
        """The queues; each running request holds its computed tokens' slots (and, until
        the step ends, those of the tokens scheduled in it)."""
        self._check_queues()
        scheduled = dict(self._chunks)
        for group in self.running:
            held = self._kv.num_slots(group.seq_ids[0])
            num_tokens = group.num_context_tokens
            if group.clock is not None:
                ok = held in (num_tokens - 1, num_tokens)
            else:
                ok = held == self._computed[group] + scheduled.get(group, 0) <= num_tokens
            if not ok:
                raise InvariantError(
                    f"vllm-v1: group {group.group_id} holds {held} slots with {num_tokens} "
                    f"tokens (computed: {self._computed.get(group)})"
                )
        if set(self._computed) != set(self._individual) or not set(self._prefilling) <= set(
            self._computed
        ):
            raise InvariantError("vllm-v1: computed tokens kept for the wrong groups")
