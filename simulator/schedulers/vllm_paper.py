"""The PagedAttention paper's vLLM prototype (``vllm-paper``): a documented variant of ``vllm``.

The system the paper measured is its public artifact's prototype (GitHub
``sosp-ae-39/sosp-ae-astra``, ``astra/cacheflow/master/``), not vLLM v0. It runs over
the same paged allocator (``allocators/paged.py``: the artifact's ``block_manager.py``
has the same ``can_allocate`` with a 1% watermark, ``can_append`` as "one free block
per running sequence of the group", ``can_swap_in`` as "distinct blocks + one per
sequence" against the watermark, and appends that ignore it). What differs from
``vllm`` is the order of one iteration (``scheduler.py``, ``Scheduler._schedule``),
which mixes prefill and decode in one step.

Scenario, one iteration (each rule with its artifact file):

1. Running groups, FCFS (``policy.py``: FCFS sorts by arrival time, earliest first).
   While a group cannot take one more slot per sequence, the group at the *tail* of
   running (latest arrival) is preempted, or the group itself when it is the last
   (``scheduler.py``). Preemption (``scheduler.py``, ``_preempt``): recompute for a
   single-sequence group (its blocks are freed and it goes back to ``waiting``, which
   is kept in arrival order; readmitted, it prefills prompt + generated so far),
   swap for a multi-sequence group; ``always_swap`` (here ``preemption_mode: swap``)
   swaps every group. ``preemption_mode: recompute`` still swaps multi-sequence
   groups (the artifact cannot recompute them). The artifact asserts that the CPU
   pool can take a swapped group; here the group is aborted and reported as rejected
   with the reason, as in ``vllm``. Each kept group appends one slot per sequence.
2. Swap-in, only if nothing was swapped *out* in this step (a recompute preemption
   does not stop it; ``scheduler.py``: ``while self.swapped and not
   blocks_to_swap_out``): swapped groups come back FCFS while ``can_swap_in`` is OK
   and the cap allows, each appending one slot per sequence; it stops at the first
   group that cannot come back. No token budget applies to swap-ins.
3. The token budget starts at the number of running sequences (after step 2; a
   group of ``n`` samples or ``w`` beams counts ``n`` or ``w``: the artifact creates
   every sequence of a group at admission, and so does ``vllm-paper``: the prompt's
   block table is shared by all of them from the step that prefills it; ``vllm``
   forks after that step).
4. Admission, only if nothing is swapped out (``scheduler.py``: swapped groups are
   strictly prioritized). FCFS from the head of ``waiting``; the scan stops when
   - the head was preempted in this very step;
   - ``can_allocate`` says LATER (head-of-line blocking);
   - budget + its prompt (``num_prefill_tokens``, less the tokens it maps to a pinned
     prefix: the artifact's ``prefix_astra`` counts a prefixed request's own tokens)
     > ``max_num_batched_tokens``;
   - running *groups* + its sequences > ``max_num_seqs``.
   Admitted groups join ``running`` and are prefilled in this step, beside the decodes.

The cap ``scheduler.max_num_seqs`` means here what the artifact's
``--max-num-sequences`` means: ``len(running groups) + num_seqs(candidate)``, a count of
groups plus the candidate's sequences (``vllm`` counts sequences). The artifact's
defaults are ``max_num_batched_tokens`` 2560 and ``--max-num-sequences`` 2048
(``astra/cacheflow/master/server.py``), and 20 GiB of swap (``--swap-space``); pagesim's
spec defaults are vLLM v0's (256 and 4 GiB), so a paper run sets ``max_num_seqs: 2048``
and ``allocator.swap_space_gib: 20`` (``experiments/paper_fig13.yaml``). The Figure 16
prototype (``prefix_astra/cacheflow/master/server.py``) defaults to 256 sequences.

Where the artifact cannot do something, pagesim reports instead of hanging:
a prompt longer than ``min(max_model_len, max_num_batched_tokens)``, a group with more
sequences than the cap, or one that can NEVER fit the pool is rejected with a reason
(the artifact would block its queue forever; its request filter, input + output < 2048,
keeps such requests out of its own runs).

Within a step, groups finish in the base scheduler's batch order (prefills in
admission order, then decodes by arrival, then swapped-in groups by arrival); the
artifact's ``post_step`` visits kept running groups, then swapped-in, then admitted
ones. The order only decides which free block ids are reused next, which the paged
allocator's counts do not depend on (no prefix caching in the artifact).

Speed: running groups ride the decode clock; step 1 appends in bulk when the
allocator says every sequence can take a slot (``can_append_all``). A decode-only
step is *steady* (the engine may repeat it without calling ``schedule``) under the
same condition as ``vllm``: bulk appends, nothing swapped out or in, nothing admitted,
and the head of ``waiting`` (if any) held back by memory (LATER), which stays so while
memory only shrinks; the budget and the cap are checked after memory, so a head held
by them is not steady (memory could run short later and change ``is_blocked``).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from pagesim.simulator.request import WAITING, SequenceGroup
from pagesim.simulator.schedulers.base import by_arrival
from pagesim.simulator.schedulers.step import Step
from pagesim.simulator.schedulers.vllm import (
    VllmScheduler,
)


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class VllmPaperScheduler(VllmScheduler):
    kind = "vllm-paper"
    # its steps mix admission with the decodes and its budget starts at the running
    # sequences: a blocked head does not make its steps steady
    steady_behind_blocked_head = False

    def _init_state(self) -> None:
        super()._init_state()
        #: groups preempted in the current schedule(), and whether one was swapped out
        self._preempted_ids: set[int] = set()
        self._swapped_out_now = False

    def schedule(self, now_s: float) -> Step:
        self._preempted_ids = set()
        self._swapped_out_now = False
        is_bulk = self.allocator.can_append_all()
        self._reserve_decode_slots(is_bulk)
        is_blocked = bool(self._preempted_ids)
        if not self._swapped_out_now and self._swap_in():
            is_blocked = True
        num_decode_groups = len(self.running)
        decode = self.allocator.decode_totals()
        if not self.swapped and self._admit_mixed():
            is_blocked = True
        return self._step(
            decode_groups=num_decode_groups,
            decode=decode,
            is_blocked=is_blocked,
            ticks=True,
            steady=is_bulk
            and not self.swapped
            and not self._swapped_in
            and not self._prefilled
            and (is_blocked or not self.waiting),
        )

    # ---- 1. preemption: remember who, and whether anything was swapped out -------------

    def _preempt(self, group: SequenceGroup) -> None:
        self._preempted_ids.add(group.group_id)
        super()._preempt(group)

    def _preempt_by_swap(self, group: SequenceGroup) -> None:
        self._swapped_out_now = True
        super()._preempt_by_swap(group)

    def _preempt_by_recompute(self, group: SequenceGroup) -> None:
        """Free the group and put it back in ``waiting`` at its place by arrival."""
        self._free_group(group)
        group.status = WAITING
        index = len(self.waiting)
        for i, other in enumerate(self.waiting):
            if by_arrival(other) > by_arrival(group):
                index = i
                break
        self.waiting.insert(index, group)

    # ---- 2. swap-in (vllm's), the cap counting running groups ---------------------------

    def _cap_allows(self, group: SequenceGroup) -> bool:
        """The artifact's ``--max-num-sequences``: running groups + the group's sequences."""
        return len(self.running) + group.max_num_seqs <= self.max_num_seqs

    # ---- 3-4. admission in the same step -------------------------------------------------

    def _admit_mixed(self) -> bool:
        """Admit from the head of ``waiting`` into this step (vllm's admission, the budget
        starting at the running sequences); True if it stopped on LATER."""
        return self._admit(self._num_running_seqs)[1]

    def _allocate(self, group: SequenceGroup) -> None:
        """Admit ``group`` with every one of its sequences: the artifact makes a request
        of ``n`` samples or ``w`` beams a ``SequenceGroup`` of that many sequences at
        arrival, and ``block_manager.allocate`` gives them one prompt block table (ref
        count ``n``); ``vllm`` (v0) holds one sequence until the prompt's first token
        and forks then. Memory is the same (the prompt's blocks are shared, the partly
        filled last one copied on each sequence's first append); what differs is the
        step that prefills the prompt, which here already holds ``n`` logical tables
        (the artifact's Figure 15 counts them) and which the first token then leaves as
        ``n`` sequences without forking (beam search still draws each beam's parent)."""
        super()._allocate(group)
        if group.max_num_seqs > 1 and len(group.seq_ids) == 1:
            parent = group.seq_ids[0]
            for _ in range(group.max_num_seqs - 1):
                self.allocator.fork(parent, self._new_seq_id(group))

    def _holds_back(self, group: SequenceGroup) -> bool:
        """A group preempted in this very step is not readmitted in it."""
        return group.group_id in self._preempted_ids
