"""Small test doubles for the scheduler and engine tests.

``TinyPaged`` is a minimal paged allocator (reference-counted blocks, copy-on-write,
whole-group swap, a watermark in blocks), small enough to reason about exactly in a
story test. ``constant_step`` is a cost model whose every step takes the same time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.allocators.base import (
    Allocation,
    AllocRequest,
    AllocStatus,
    DecodeTotals,
    KVAllocator,
    Transfers,
)
from pagesim.errors import AllocatorError, InvariantError
from pagesim.workloads.trace import Trace


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TinyPaged(KVAllocator):
    kind = "paged"
    is_paged = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        watermark_blocks: int = 0,
    ):
        self._num_blocks = num_blocks
        self._block_size = block_size
        self.free_ids = list(range(num_blocks))  # lowest id first
        self.ref = [0] * num_blocks
        self.table: dict[int, list[int]] = {}
        self.length: dict[int, int] = {}
        self.group_of: dict[int, int] = {}
        self.cpu: dict[int, tuple[int, dict[int, list[int]]]] = {}  # group -> (num blocks, tables)
        self.num_cpu_free = num_cpu_blocks
        self.watermark = watermark_blocks
        self.copies = self.swap_in_blocks = self.swap_out_blocks = 0

    @property
    def capacity_slots(self) -> int:
        return self._num_blocks * self._block_size

    @property
    def block_size(self) -> int:
        return self._block_size

    def _take(self) -> int:
        if not self.free_ids:
            raise AllocatorError("TinyPaged: out of blocks")
        block = self.free_ids.pop(0)
        self.ref[block] = 1
        return block

    def _decref(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free_ids.append(block)
            self.free_ids.sort()

    def _status(self, need: int) -> AllocStatus:
        if self._num_blocks - need < self.watermark:
            return AllocStatus.NEVER
        if len(self.free_ids) - need >= self.watermark:
            return AllocStatus.OK
        return AllocStatus.LATER

    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        return self._status(cdiv(req.num_tokens, self._block_size))

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        if self.can_allocate(req) is not AllocStatus.OK:
            return None
        self.table[req.seq_id] = [
            self._take() for _ in range(cdiv(req.num_tokens, self._block_size))
        ]
        self.length[req.seq_id] = req.num_tokens
        self.group_of[req.seq_id] = req.group_id
        return Allocation()

    def _gpu_seqs(self, group_id: int) -> list[int]:
        return [s for s, g in self.group_of.items() if g == group_id and s in self.table]

    def _append_need(self, seq_id: int) -> int:
        if self.length[seq_id] % self._block_size == 0:
            return 1
        return 1 if self.ref[self.table[seq_id][-1]] > 1 else 0

    def can_append_slots(self, group_id: int) -> bool:
        return len(self.free_ids) >= sum(self._append_need(s) for s in self._gpu_seqs(group_id))

    def append_slot(self, seq_id: int) -> None:
        table = self.table[seq_id]
        if self.length[seq_id] % self._block_size == 0:
            table.append(self._take())
        elif self.ref[table[-1]] > 1:
            self._decref(table[-1])
            table[-1] = self._take()
            self.copies += 1
        self.length[seq_id] += 1

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        table = self.table[parent_seq_id]
        for block in table:
            self.ref[block] += 1
        self.table[child_seq_id] = list(table)
        self.length[child_seq_id] = self.length[parent_seq_id]
        self.group_of[child_seq_id] = self.group_of[parent_seq_id]

    def free(self, seq_id: int) -> None:
        if seq_id not in self.group_of:
            raise AllocatorError(f"TinyPaged: unknown seq {seq_id}")
        group = self.group_of.pop(seq_id)
        if seq_id in self.table:
            for block in reversed(self.table.pop(seq_id)):
                self._decref(block)
        else:
            num, tables = self.cpu[group]
            tables.pop(seq_id)
            if not tables:
                del self.cpu[group]
                self.num_cpu_free += num
        del self.length[seq_id]

    def _unique_blocks(self, seqs: list[int]) -> list[int]:
        return sorted({b for s in seqs for b in self.table[s]})

    def can_swap_out(self, group_id: int) -> bool:
        return len(self._unique_blocks(self._gpu_seqs(group_id))) <= self.num_cpu_free

    def swap_out(self, group_id: int) -> None:
        seqs = self._gpu_seqs(group_id)
        blocks = self._unique_blocks(seqs)
        self.cpu[group_id] = (
            len(blocks),
            {s: [blocks.index(b) for b in self.table[s]] for s in seqs},
        )
        for s in seqs:
            for block in self.table.pop(s):
                self._decref(block)
        self.num_cpu_free -= len(blocks)
        self.swap_out_blocks += len(blocks)

    def can_swap_in(self, group_id: int) -> AllocStatus:
        num, tables = self.cpu[group_id]
        return self._status(num + len(tables))  # vLLM v0: one new block per sequence after swap-in

    def swap_in(self, group_id: int) -> None:
        num, tables = self.cpu.pop(group_id)
        new = [self._take() for _ in range(num)]
        for s, idx in tables.items():
            self.table[s] = [new[i] for i in idx]
        counts: dict[int, int] = {}
        for idx in tables.values():
            for i in idx:
                counts[i] = counts.get(i, 0) + 1
        for i, c in counts.items():
            self.ref[new[i]] = c
        self.num_cpu_free += num
        self.swap_in_blocks += num

    def num_slots(self, seq_id: int) -> int:
        return self.length[seq_id]

    def drain_transfers(self) -> Transfers:
        out = Transfers(self.copies, self.swap_in_blocks, self.swap_out_blocks)
        self.copies = self.swap_in_blocks = self.swap_out_blocks = 0
        return out

    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        return tuple(s for s, g in self.group_of.items() if g == group_id)

    def decode_totals(self) -> DecodeTotals:
        return DecodeTotals(
            len(self.table),
            sum(self.length[s] for s in self.table),
            sum(map(len, self.table.values())),
        )

    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        fill: dict[int, int] = {}
        for s, table in self.table.items():
            for i, block in enumerate(table):
                filled = min(self._block_size, self.length[s] - i * self._block_size)
                fill[block] = max(fill.get(block, 0), filled)
        tokens = sum(fill.values())
        held = len(fill) * self._block_size
        free = len(self.free_ids) * self._block_size
        return (tokens, 0, held - tokens, free if is_blocked else 0, 0 if is_blocked else free, 0)

    def check_invariants(self) -> None:
        counts = [0] * self._num_blocks
        for table in self.table.values():
            for block in table:
                counts[block] += 1
        if counts != self.ref:
            raise InvariantError(f"TinyPaged: ref counts {self.ref} != tables {counts}")
        if sorted(self.free_ids) != [b for b in range(self._num_blocks) if counts[b] == 0]:
            raise InvariantError("TinyPaged: free list out of sync")


def constant_step(step_s: float = 0.1):
    def step_time_s(plan) -> float:
        return step_s

    return step_time_s


def make_trace(rows: list[tuple], name: str = "test") -> Trace:
    """rows: (arrival_s, prompt_len, output_len[, n[, beam_width]]); one segment per prompt."""
    full = [(*r, 1, 1)[:5] for r in rows]
    return Trace(
        pd.DataFrame(
            {
                "request_id": np.arange(len(full), dtype=np.int64),
                "arrival_s": np.array([r[0] for r in full], dtype=np.float64),
                "prompt_len": np.array([r[1] for r in full], dtype=np.int64),
                "output_len": np.array([r[2] for r in full], dtype=np.int64),
                "n": np.array([r[3] for r in full], dtype=np.int64),
                "beam_width": np.array([r[4] for r in full], dtype=np.int64),
                "segments": [((i, r[1]),) for i, r in enumerate(full)],
            }
        ),
        name=name,
    )
