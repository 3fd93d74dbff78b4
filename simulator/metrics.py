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
  size are means per step.

Memory stays O(1) per step: only the current window is open; rows are tuples.

``avg_batch_size`` is the mean, over steps that decode, of the number of requests
(groups) in the step's batch — running decodes plus, for Orca's mixed iterations, the
prompts prefilled with them. vLLM's prefill-only steps are excluded: the paper's
Fig. 13 counts the requests batched together while generating.
"""

from __future__ import annotations

import pandas as pd

from pagesim.allocators.base import MemoryUsage
from pagesim.simulator.plan import BatchPlan

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
        self.num_steps = 0
        self.num_decode_steps = 0
        self.decode_batch_sum = 0
        self.num_swapped_blocks = 0
        self.num_copied_blocks = 0
        self._rows: list[tuple] = []
        self._window_index = -1
        self._acc = _Window()

    def record_step(
        self,
        start_s: float,
        duration_s: float,
        plan: BatchPlan,
        usage: MemoryUsage,
        *,
        num_groups: int,
        num_decode_groups: int,
        queues: tuple[int, int, int],
        prefix_hit_tokens: int,
    ) -> None:
        """One engine step that ran ``plan`` over ``[start_s, start_s + duration_s)``."""
        self.num_steps += 1
        if num_decode_groups:
            self.num_decode_steps += 1
            self.decode_batch_sum += num_groups
        swapped = plan.num_swapped_in_blocks + plan.num_swapped_out_blocks
        self.num_swapped_blocks += swapped
        self.num_copied_blocks += plan.num_copied_blocks
        acc = self._open(start_s)
        acc.num_steps += 1
        acc.batch_sum += num_groups
        acc.prefill_tokens += plan.num_prefill_tokens
        acc.decode_tokens += plan.num_decode_tokens
        acc.copied += plan.num_copied_blocks
        acc.swapped += swapped
        acc.queue_sums[0] += queues[0]
        acc.queue_sums[1] += queues[1]
        acc.queue_sums[2] += queues[2]
        acc.prefix_hit_tokens += prefix_hit_tokens
        self._add_memory(acc, duration_s, usage)
        if self.every_step:
            self._close()

    def record_decode_run(
        self,
        start_s,
        duration_s,
        mem_slots,
        num_free_blocks,
        *,
        num_groups: int,
        num_seqs: int,
        queues: tuple[int, int, int],
    ) -> None:
        """K decode steps of one fixed batch at once (``simulator.fastforward``): what K
        :meth:`record_step` calls would record. ``start_s``/``duration_s``/
        ``num_free_blocks`` are length-K arrays, ``mem_slots`` is 5 × K (token,
        reserved, internal, external, unused); nothing copied, swapped or cache-hit.
        Window sums are added per window run, so totals differ from per-step sums only
        by floating-point rounding."""
        num_steps = len(start_s)
        self.num_steps += num_steps
        self.num_decode_steps += num_steps
        self.decode_batch_sum += num_groups * num_steps
        iv = self.sample_interval_s
        if self.every_step:
            bounds = list(range(num_steps + 1))
        elif int(start_s[0] // iv) == int(start_s[-1] // iv):
            bounds = [0, num_steps]
        else:
            index = [int(s // iv) for s in start_s.tolist()]
            bounds = [0, *(i for i in range(1, num_steps) if index[i] != index[i - 1]), num_steps]
        weighted = mem_slots * duration_s
        free_weighted = num_free_blocks * duration_s
        total = self.mem_slot_s
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            m = hi - lo
            acc = self._open(float(start_s[lo]))
            acc.num_steps += m
            acc.batch_sum += num_groups * m
            acc.decode_tokens += num_seqs * m
            acc.queue_sums[0] += queues[0] * m
            acc.queue_sums[1] += queues[1] * m
            acc.queue_sums[2] += queues[2] * m
            part = weighted[:, lo:hi].sum(axis=1).tolist()
            for i in range(5):
                total[i] += part[i]
                acc.mem_slot_s[i] += part[i]
            d = float(duration_s[lo:hi].sum())
            self.total_s += d
            acc.duration_s += d
            acc.free_block_s += float(free_weighted[lo:hi].sum())
            if self.every_step:
                self._close()

    def record_idle(self, start_s: float, duration_s: float, usage: MemoryUsage) -> None:
        """No step ran over ``[start_s, start_s + duration_s)``; memory stayed at ``usage``."""
        if duration_s <= 0:
            return
        acc = self._open(start_s)
        self._add_memory(acc, duration_s, usage)
        if self.every_step:
            self._close()

    # ---- results ------------------------------------------------------------------------

    def mem_fracs(self) -> dict[str, float]:
        """Time-weighted mean fraction of capacity per memory category over the run."""
        denom = self.total_s * self.capacity_slots
        return {
            name: (v / denom if denom > 0 else 0.0)
            for name, v in zip(MEM_FRAC_COLUMNS, self.mem_slot_s, strict=True)
        }

    @property
    def sharing_saved_frac(self) -> float:
        """Time-weighted blocks saved by sharing / blocks the sequences would hold unshared
        (the paper's §6.3 "memory saving"); 0 when nothing is held or shared."""
        held = self.mem_slot_s[0] + self.mem_slot_s[1] + self.mem_slot_s[2]
        unshared = held + self.shared_saved_slot_s
        return self.shared_saved_slot_s / unshared if unshared > 0 else 0.0

    @property
    def avg_batch_size(self) -> float:
        return self.decode_batch_sum / self.num_decode_steps if self.num_decode_steps else 0.0

    def timeseries(self) -> pd.DataFrame:
        self._close()
        return pd.DataFrame.from_records(self._rows, columns=list(TIMESERIES_COLUMNS))

    # ---- internals ------------------------------------------------------------------------

    def _open(self, start_s: float) -> _Window:
        if self.every_step:
            self._acc.t_s = start_s
            return self._acc
        index = int(start_s // self.sample_interval_s)
        if index != self._window_index:
            self._close()
            self._window_index = index
            self._acc.t_s = index * self.sample_interval_s
        return self._acc

    def _add_memory(self, acc: _Window, duration_s: float, usage: MemoryUsage) -> None:
        parts = (
            usage.token_slots,
            usage.reserved_slots,
            usage.internal_frag_slots,
            usage.external_frag_slots,
            usage.unused_slots,
        )
        total = self.mem_slot_s
        for i, slots in enumerate(parts):
            w = slots * duration_s
            total[i] += w
            acc.mem_slot_s[i] += w
        self.shared_saved_slot_s += usage.shared_saved_slots * duration_s
        self.total_s += duration_s
        acc.duration_s += duration_s
        free_blocks = (usage.external_frag_slots + usage.unused_slots) // self.block_size
        acc.free_block_s += free_blocks * duration_s

    def _close(self) -> None:
        acc = self._acc
        if acc.num_steps == 0 and acc.duration_s == 0:
            return
        d = acc.duration_s
        denom = d * self.capacity_slots
        steps = acc.num_steps
        self._rows.append(
            (
                acc.t_s,
                d,
                steps,
                acc.batch_sum / steps if steps else 0.0,
                acc.prefill_tokens,
                acc.decode_tokens,
                *((v / denom if denom > 0 else 0.0) for v in acc.mem_slot_s),
                acc.free_block_s / d if d > 0 else 0.0,
                acc.copied,
                acc.swapped,
                *((q / steps if steps else 0.0) for q in acc.queue_sums),
                acc.prefix_hit_tokens,
            )
        )
        self._acc = _Window()


class _Window:
    """Sums over the open sample window (plain attributes: this is the hot path)."""

    __slots__ = (
        "t_s",
        "duration_s",
        "num_steps",
        "batch_sum",
        "prefill_tokens",
        "decode_tokens",
        "mem_slot_s",
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
        self.mem_slot_s = [0.0] * 5
        self.free_block_s = 0.0
        self.copied = 0
        self.swapped = 0
        self.queue_sums = [0, 0, 0]
        self.prefix_hit_tokens = 0
