"""Per-step observations -> a sampled time series and time-weighted run totals.

The engine reports every step (and every idle period between steps) once, with the
memory breakdown that held during it (``allocator.usage`` right after
``schedule()``: the state the step runs in; for an idle period, the state it idles
in). :class:`StepRecorder` keeps

- run totals: slot-seconds per memory category (time-weighted; idle time counts
  with its own usage), steps, and the batch-size sum over steps that decode;
- one time-series row per sample window of ``metrics.sample_interval_s`` simulated
  seconds, or per step with ``metrics.every_step``. A window holds the steps and
  idle periods that *start* in it (a step is never split); its memory columns are
  time-weighted means over them, its counts are sums, its queue lengths and batch
  size are means per step. ``mem_shared_saved_frac`` (the last column) is what
  sharing saves (``MemoryUsage.shared_saved_slots``) as a fraction of capacity, so
  that per step the logical / physical block ratio of a paged pool is
  ``(held + saved) / held`` with held = token + reserved + internal fractions (see
  ``reducers.py``, the paper artifact's Fig. 15).

Memory stays O(1) per step: only the current window is open; rows are tuples.

``avg_batch_size`` is the mean, over steps that decode, of the number of requests
(groups) in the step's batch — running decodes plus, for Orca's mixed iterations, the
prompts prefilled with them. vLLM's prefill-only steps are excluded: the paper's
Fig. 13 counts the requests batched together while generating.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from pagesim.allocators.base import MemoryUsage

if TYPE_CHECKING:
    from pagesim.simulator.schedulers.step import Step

TIMESERIES_COLUMNS = (
    "t_s",
    "duration_s",
    "num_steps",
    "batch_size",
    "num_prefill_tokens",
    "num_decode_tokens",
    "mem_token_frac",
    "mem_reserved_frac",
    "mem_internal_frag_frac",
    "mem_external_frag_frac",
    "mem_unused_frac",
    "num_free_blocks",
    "num_copied_blocks",
    "num_swapped_blocks",
    "num_waiting",
    "num_running",
    "num_swapped",
    "prefix_hit_tokens",
    "mem_shared_saved_frac",
)

MEM_FRAC_COLUMNS = TIMESERIES_COLUMNS[6:11]


class StepRecorder:
    """Accumulates step observations (see the module docstring)."""

    def __init__(
        self, *, capacity_slots: int, block_size: int, sample_interval_s: float, every_step: bool
    ):
        self.capacity_slots = capacity_slots
        self.block_size = block_size
        self.sample_interval_s = sample_interval_s
        self.every_step = every_step
        #: slot-seconds of token / reserved / internal / external / unused over the run
        self.mem_slot_s = [0.0] * 5
        #: slot-seconds saved by sharing (see MemoryUsage.shared_saved_slots)
        self.shared_saved_slot_s = 0.0
        self.total_s = 0.0
        self._num_steps = 0
        self._num_decode_steps = 0
        self._decode_batch_sum = 0
        #: steady decode steps recorded by :meth:`record_decode` whose counts are not
        #: yet in the open window (all with the same counts: ``_run_counts``)
        self._run_steps = 0
        self._run_counts: tuple[int, int, tuple[int, int, int]] = (0, 0, (0, 0, 0))
        self.num_swapped_blocks = 0
        self.num_copied_blocks = 0
        self._rows: list[tuple] = []
        self._window_index = -1
        #: a start time below this is in the open window for certain (a bound a hair
        #: short of the window's end; at or past it, :meth:`_open` decides exactly)
        self._window_sure_end_s = -math.inf
        self._acc = _Window()

    def record_step(self, start_s: float, duration_s: float, step: Step) -> None:
        """One engine step that ran ``step`` over ``[start_s, start_s + duration_s)``."""
        plan = step.plan
        num_groups = step.num_groups
        self._num_steps += 1
        if step.num_decode_groups:
            self._num_decode_steps += 1
            self._decode_batch_sum += num_groups
        acc = self._open(start_s)
        acc.num_steps += 1
        acc.batch_sum += num_groups
        acc.prefill_tokens += plan.num_prefill_tokens
        acc.decode_tokens += plan.num_decode_seqs
        if plan.num_copied_blocks or plan.num_swapped_in_blocks or plan.num_swapped_out_blocks:
            swapped = plan.num_swapped_in_blocks + plan.num_swapped_out_blocks
            self.num_swapped_blocks += swapped
            self.num_copied_blocks += plan.num_copied_blocks
            acc.copied += plan.num_copied_blocks
            acc.swapped += swapped
        queue_sums = acc.queue_sums
        queue_sums[0] += step.num_waiting
        queue_sums[1] += step.num_running
        queue_sums[2] += step.num_swapped
        acc.prefix_hit_tokens += step.prefix_hit_tokens
        self._add_memory(acc, duration_s, step.usage_slots)
        if self.every_step:
            self._close()

    def record_decode(
        self,
        start_s: float,
        duration_s: float,
        num_groups: int,
        num_seqs: int,
        queues: tuple[int, int, int],
        usage_slots: tuple[int, int, int, int, int, int],
    ) -> None:
        """A decode step with nothing prefilled, swapped or hit in the prefix cache,
        given by its numbers (the engine's decode spans): what :meth:`record_step`
        records for such a step (its copies, if any, given first to
        :meth:`record_copies`). ``usage_slots`` is ``KVAllocator.usage_slots``.

        Its counts (steps, batch, tokens, queues) are added to the window when it
        closes or the counts change (:meth:`_add_run`): a decode span's steps share
        them (the engine passes the same ``queues`` object), so a step costs its
        memory sums only."""
        counts = self._run_counts
        if queues is not counts[2] or num_groups != counts[0] or num_seqs != counts[1]:
            self._add_run()
            self._run_counts = (num_groups, num_seqs, queues)
        acc = self._acc
        if start_s >= self._window_sure_end_s:  # else the open window (:meth:`_open`)
            acc = self._open(start_s)
        self._run_steps += 1
        self._add_memory(acc, duration_s, usage_slots)
        if self.every_step:
            self._close()

    def record_copies(self, start_s: float, num_blocks: int) -> None:
        """The blocks copied (copy-on-write) by the decode step starting at ``start_s``
        that :meth:`record_decode` records next: what :meth:`record_step` counts of a
        plan's copies."""
        acc = self._open(start_s)
        self.num_copied_blocks += num_blocks
        acc.copied += num_blocks

    def record_idle(self, start_s: float, duration_s: float, usage: MemoryUsage) -> None:
        """No step ran over ``[start_s, start_s + duration_s)``; memory stayed at ``usage``."""
        if duration_s <= 0:
            return
        acc = self._open(start_s)
        self._add_memory(acc, duration_s, _slots(usage))
        if self.every_step:
            self._close()

    # ---- results ------------------------------------------------------------------------

    def mem_fracs(self) -> dict[str, float]:
        """Time-weighted mean fraction of capacity per memory category over the run."""
        self._close()
        denom = self.total_s * self.capacity_slots
        return {
            name: (v / denom if denom > 0 else 0.0)
            for name, v in zip(MEM_FRAC_COLUMNS, self.mem_slot_s, strict=True)
        }

    @property
    def sharing_saved_frac(self) -> float:
        """Time-weighted blocks saved by sharing / blocks the sequences would hold unshared
        (the paper's §6.3 "memory saving"); 0 when nothing is held or shared."""
        self._close()
        held = self.mem_slot_s[0] + self.mem_slot_s[1] + self.mem_slot_s[2]
        unshared = held + self.shared_saved_slot_s
        return self.shared_saved_slot_s / unshared if unshared > 0 else 0.0

    @property
    def avg_batch_size(self) -> float:
        num_decode_steps = self.num_decode_steps
        return self.decode_batch_sum / num_decode_steps if num_decode_steps else 0.0

    @property
    def num_steps(self) -> int:
        self._add_run()
        return self._num_steps

    @property
    def num_decode_steps(self) -> int:
        self._add_run()
        return self._num_decode_steps

    @property
    def decode_batch_sum(self) -> int:
        self._add_run()
        return self._decode_batch_sum

    def timeseries(self) -> pd.DataFrame:
        self._close()
        return pd.DataFrame.from_records(self._rows, columns=list(TIMESERIES_COLUMNS))

    # ---- internals ------------------------------------------------------------------------

    def _open(self, start_s: float) -> _Window:
        if start_s < self._window_sure_end_s:  # the open window (never under every_step)
            return self._acc
        if self.every_step:
            self._acc.t_s = start_s
            return self._acc
        index = int(start_s // self.sample_interval_s)
        if index != self._window_index:
            self._close()
            self._window_index = index
            self._acc.t_s = index * self.sample_interval_s
            # 1e-12 relative is far wider than any rounding of the floor division
            self._window_sure_end_s = (index + 1) * self.sample_interval_s * (1 - 1e-12)
        return self._acc

    def _add_memory(
        self, acc: _Window, duration_s: float, slots: tuple[int, int, int, int, int, int]
    ) -> None:
        """Slot-seconds of each category (``slots`` as ``KVAllocator.usage_slots``), into
        the open window (the run totals take each window's sums when it closes)."""
        token, reserved, internal, external, unused, saved = slots
        acc.token_slot_s += token * duration_s
        acc.reserved_slot_s += reserved * duration_s
        acc.internal_slot_s += internal * duration_s
        acc.external_slot_s += external * duration_s
        acc.unused_slot_s += unused * duration_s
        acc.shared_saved_slot_s += saved * duration_s
        acc.duration_s += duration_s
        acc.free_block_s += (external + unused) // self.block_size * duration_s

    def _add_run(self) -> None:
        """The counts of the decode steps :meth:`record_decode` deferred, into the open
        window and the run totals."""
        num = self._run_steps
        if not num:
            return
        self._run_steps = 0
        num_groups, num_seqs, queues = self._run_counts
        self._num_steps += num
        self._num_decode_steps += num
        self._decode_batch_sum += num_groups * num
        acc = self._acc
        acc.num_steps += num
        acc.batch_sum += num_groups * num
        acc.decode_tokens += num_seqs * num
        queue_sums = acc.queue_sums
        queue_sums[0] += queues[0] * num
        queue_sums[1] += queues[1] * num
        queue_sums[2] += queues[2] * num

    def _close(self) -> None:
        self._add_run()
        acc = self._acc
        if acc.num_steps == 0 and acc.duration_s == 0:
            return
        total = self.mem_slot_s
        mem_slot_s = acc.mem_slot_s
        for i, slot_s in enumerate(mem_slot_s):
            total[i] += slot_s
        self.shared_saved_slot_s += acc.shared_saved_slot_s
        self.total_s += acc.duration_s
        self._rows.append(
            self._row(
                acc.t_s,
                acc.duration_s,
                acc.num_steps,
                acc.batch_sum,
                acc.prefill_tokens,
                acc.decode_tokens,
                mem_slot_s,
                acc.free_block_s,
                acc.copied,
                acc.swapped,
                acc.queue_sums,
                acc.prefix_hit_tokens,
                acc.shared_saved_slot_s,
            )
        )
        self._acc = _Window()

    def _row(
        self,
        t_s,
        d,
        steps,
        batch_sum,
        prefill_tokens,
        decode_tokens,
        mem_slot_s,
        free_block_s,
        copied,
        swapped,
        queue_sums,
        prefix_hit_tokens,
        shared_saved_slot_s,
    ) -> tuple:
        """A TIMESERIES_COLUMNS row from a window's sums."""
        denom = d * self.capacity_slots
        return (
            t_s,
            d,
            steps,
            batch_sum / steps if steps else 0.0,
            prefill_tokens,
            decode_tokens,
            *([v / denom for v in mem_slot_s] if denom > 0 else [0.0] * len(mem_slot_s)),
            free_block_s / d if d > 0 else 0.0,
            copied,
            swapped,
            *([q / steps for q in queue_sums] if steps else [0.0] * len(queue_sums)),
            prefix_hit_tokens,
            shared_saved_slot_s / denom if denom > 0 else 0.0,
        )


def _slots(usage: MemoryUsage) -> tuple[int, int, int, int, int, int]:
    """``usage`` without its capacity: token, reserved, internal, external, unused and
    shared-saved slots (``KVAllocator.usage_slots``; MemoryUsage is that tuple after
    ``capacity_slots``)."""
    return usage[1:]


class _Window:
    """Sums over the open sample window (plain attributes: this is the hot path)."""

    __slots__ = (
        "t_s",
        "duration_s",
        "num_steps",
        "batch_sum",
        "prefill_tokens",
        "decode_tokens",
        "token_slot_s",
        "reserved_slot_s",
        "internal_slot_s",
        "external_slot_s",
        "unused_slot_s",
        "shared_saved_slot_s",
        "free_block_s",
        "copied",
        "swapped",
        "queue_sums",
        "prefix_hit_tokens",
    )

    def __init__(self) -> None:
        self.t_s = 0.0
        self.duration_s = 0.0
        self.num_steps = 0
        self.batch_sum = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        # slot-seconds per memory category (float attributes for sums:
        # docs/compiled_modules.md)
        self.token_slot_s = 0.0
        self.reserved_slot_s = 0.0
        self.internal_slot_s = 0.0
        self.external_slot_s = 0.0
        self.unused_slot_s = 0.0
        self.shared_saved_slot_s = 0.0
        self.free_block_s = 0.0
        self.copied = 0
        self.swapped = 0
        self.queue_sums = [0, 0, 0]
        self.prefix_hit_tokens = 0

    @property
    def mem_slot_s(self) -> list[float]:
        """The five memory categories' slot-seconds (MEM_FRAC_COLUMNS' order)."""
        return [
            self.token_slot_s,
            self.reserved_slot_s,
            self.internal_slot_s,
            self.external_slot_s,
            self.unused_slot_s,
        ]
