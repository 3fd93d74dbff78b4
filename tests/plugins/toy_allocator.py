"""A toy allocator plug-in, in one file: every sequence holds exactly its tokens.

No blocks, no reservation, no sharing (a fork copies its parent's tokens): the ideal
allocator, an upper bound for the others. It implements the interface of
``pagesim.allocators.base.KVAllocator`` and nothing more; registering it is one line
(``ALLOCATORS["toy-exact"] = ExactAllocator``), which the test does at test time.
"""

from __future__ import annotations

from pagesim.allocators import base
from pagesim.allocators.base import Allocation, AllocRequest, DecodeTotals, Transfers
from pagesim.allocators.status import AllocStatus
from pagesim.errors import AllocatorError, InvariantError


class ExactAllocator(base.KVAllocator):
    kind = "toy-exact"
    #: token-granular, so it runs under the schedulers that grow sequences slot by slot
    is_paged = True

    def __init__(self, capacity_slots: int) -> None:
        self._capacity_slots = capacity_slots
        self._held_by_seq: dict[int, int] = {}
        self._seq_ids_by_group: dict[int, list[int]] = {}
        self._group_by_seq: dict[int, int] = {}
        self._num_held = 0

    @classmethod
    def from_spec(cls, spec, *, capacity_slots, cpu_capacity_slots, max_model_len, shared_prefix):
        return cls(capacity_slots)

    @property
    def capacity_slots(self) -> int:
        return self._capacity_slots

    @property
    def block_size(self) -> int:
        return 1

    @property
    def _num_free(self) -> int:
        return self._capacity_slots - self._num_held

    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        if req.num_tokens > self._capacity_slots:
            return AllocStatus.NEVER
        return AllocStatus.OK if req.num_tokens <= self._num_free else AllocStatus.LATER

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        if self.can_allocate(req) is not AllocStatus.OK:
            return None
        self._seq_ids_by_group[req.group_id] = []
        self._hold(req.group_id, req.seq_id, req.num_tokens)
        return base.NOTHING_CACHED

    def _hold(self, group_id: int, seq_id: int, num_tokens: int) -> None:
        if seq_id in self._held_by_seq:
            raise AllocatorError(f"toy-exact: sequence {seq_id} already holds slots")
        self._held_by_seq[seq_id] = num_tokens
        self._group_by_seq[seq_id] = group_id
        self._seq_ids_by_group[group_id].append(seq_id)
        self._num_held += num_tokens

    def can_append_slots(self, group_id: int) -> bool:
        return self._num_free >= len(self._seq_ids_by_group.get(group_id, ()))

    def append_slot(self, seq_id: int) -> None:
        if not self._num_free:
            raise AllocatorError(f"toy-exact: no free slot for sequence {seq_id}")
        self._held_by_seq[seq_id] += 1
        self._num_held += 1

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        num_tokens = self._held_by_seq[parent_seq_id]
        if num_tokens > self._num_free:
            raise AllocatorError(f"toy-exact: no room to copy sequence {parent_seq_id}")
        self._hold(self._group_by_seq[parent_seq_id], child_seq_id, num_tokens)

    def free(self, seq_id: int) -> None:
        if seq_id not in self._held_by_seq:
            raise AllocatorError(f"toy-exact: unknown sequence {seq_id}")
        self._num_held -= self._held_by_seq.pop(seq_id)
        group_id = self._group_by_seq.pop(seq_id)
        members = self._seq_ids_by_group[group_id]
        members.remove(seq_id)
        if not members:
            del self._seq_ids_by_group[group_id]

    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        return tuple(self._seq_ids_by_group.get(group_id, ()))

    def num_slots(self, seq_id: int) -> int:
        return self._held_by_seq[seq_id]

    def decode_totals(self) -> DecodeTotals:
        # one "block" per sequence, as for a contiguous cache
        return DecodeTotals(len(self._held_by_seq), self._num_held, len(self._held_by_seq))

    def drain_transfers(self) -> Transfers:
        return base.NO_TRANSFERS

    def has_pending_transfers(self) -> bool:
        return False

    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        free = self._num_free
        return (self._num_held, 0, 0, free if is_blocked else 0, 0 if is_blocked else free, 0)

    def check_invariants(self) -> None:
        if self._num_held != sum(self._held_by_seq.values()) or self._num_free < 0:
            raise InvariantError("toy-exact: held slots out of date")
