"""DistServe's two stages on pagesim's vllm (v0) scheduler.

vLLM v0's steps are all-prefill or all-decode, FCFS, with a request cap and a token cap
per step: a prefill-only instance is the v0 scheduler with nothing to decode, and a
decode-only instance is the v0 scheduler whose requests arrive already prefilled. So the
stages reuse ``schedulers.vllm.VllmScheduler`` (its admission, watermark, preemption and
the engine's decode spans) with DistServe's caps as ``max_num_seqs`` /
``max_num_batched_tokens`` (``fleet.spec.StageSpec``), and change only what DistServe
does differently (GitHub ``LLMServe/DistServe``):

- :class:`PrefillStage`: a request's copy here generates one token (its first) and
  finishes, but keeps its blocks until its KV has moved to a decode instance
  (``distserve/context_stage_scheduler.py`` lines 101-102 and 145-157: requests
  finished but not accepted by the decoding stage stay in ``unaccepted_queue`` and
  their blocks count against new batches; the decoding engine frees them after the
  migration, ``clear_migrated_blocks_callback`` in ``distserve/engine.py`` line 131);
- :class:`DecodeStage`: requests handed over wait in an unaccepted queue; after each
  step (``decoding_stage_scheduler.py`` ``post_process``, lines 247-259) the head is
  accepted, FCFS, while the prompt blocks of the requests waiting to decode stay below
  ``waiting_block_prop_threshold`` of the pool and its own prompt's blocks are free;
  accepting allocates those blocks and starts the migration. A migrated request joins
  the decode batch at the next step while the batch has fewer than ``max_num_seqs``
  requests (``_check_add_to_cur_batch``, lines 131-150), else waits, holding its blocks.
  Its first decode step writes its first token's KV (the prompt's KV came over the
  link), as every vLLM decode step does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.base import reservation_never_fits_reason
from pagesim.simulator.schedulers.step import Step
from pagesim.simulator.schedulers.vllm import VllmScheduler


class PrefillStage(VllmScheduler):
    """DistServe's context stage (module docstring): a finished prompt keeps its blocks
    until :meth:`release`."""

    kind = "vllm-prefill"

    def _finish(self, group: SequenceGroup, now_s: float, *, free: bool = True) -> None:
        super()._finish(group, now_s, free=False)

    def release(self, group: SequenceGroup) -> None:
        """The request's KV has moved to its decode instance: free its blocks here."""
        self._free_group(group)


class DecodeStage(VllmScheduler):
    """DistServe's decoding stage (module docstring). ``add`` hands a request over;
    ``start_migration(group, now_s)`` is called for each request accepted (the fleet
    prices the move and calls :meth:`migration_ended` when it is over)."""

    kind = "vllm-decode"

    def _init_state(self) -> None:
        super()._init_state()
        self.unaccepted: deque[SequenceGroup] = deque()
        #: migrated, waiting for room in the batch (holding their blocks)
        self.migrated: deque[SequenceGroup] = deque()
        self.num_migrated_blocks = 0
        self.waiting_block_prop_threshold = 0.05
        self.start_migration: Callable[[SequenceGroup, float], None] | None = None

    def add(self, group: SequenceGroup) -> None:
        """A request finished its prefill and was sent here: it waits to be accepted."""
        self.unaccepted.append(group)
        self._steady = False

    def migration_ended(self, group: SequenceGroup) -> None:
        """The request's KV has arrived: it decodes from the next step with room."""
        self.migrated.append(group)
        self._steady = False

    def schedule(self, now_s: float) -> Step:
        self._accept(now_s)
        migrated = self.migrated
        alloc = self.allocator
        while migrated and len(self.running) < self.max_num_seqs:
            group = migrated[0]
            seq_id = self._new_seq_id(group)
            req = group.alloc_request(seq_id)._replace(num_tokens=group.prompt_len)
            if alloc.allocate(req) is None:
                group.seq_ids.clear()
                break
            migrated.popleft()
            self.num_migrated_blocks -= self._blocks(group.prompt_len)
            self._start_running(group)
        return super().schedule(now_s)

    def _blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self._block_size)

    def _accept(self, now_s: float) -> None:
        """DistServe's ``should_accept``: the head while the blocks of the requests
        accepted and not yet decoding stay below the threshold and its prompt's blocks
        are free beside theirs (pagesim sets those blocks aside by count and allocates
        them when the request joins the batch: the engine's bulk decode appends a slot to
        every sequence a pool holds)."""
        alloc = self.allocator
        total_blocks = alloc.capacity_slots // self._block_size
        limit = total_blocks * self.waiting_block_prop_threshold
        while self.unaccepted:
            group = self.unaccepted[0]
            need = self._blocks(group.prompt_len)
            if need > total_blocks:
                self.unaccepted.popleft()
                self._reject(
                    group,
                    reservation_never_fits_reason(
                        "decode instance's", group.prompt_len, 0, 1, alloc.capacity_slots
                    ),
                )
                continue
            if self.num_migrated_blocks >= limit:
                return
            if self.num_migrated_blocks + need > alloc.num_free_blocks:
                return
            self.unaccepted.popleft()
            self.num_migrated_blocks += need
            assert self.start_migration is not None
            self.start_migration(group, now_s)
