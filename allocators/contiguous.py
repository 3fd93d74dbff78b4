"""ContiguousAllocator: Orca-style per-sequence reservations (Max, Pow2, Oracle).

Modelling rules (PagedAttention paper, §2.3 and §6.1): before PagedAttention, a
serving system stored each sequence's KV cache in one contiguous region reserved
at admission, sized by a policy:

- ``max``: ``max_model_len`` slots (Orca (Max): 2048);
- ``pow2``: prompt + the next power of two >= the true output length (true 25 -> 32),
  capped at ``max(max_model_len, prompt + output)`` since no sequence outgrows the
  model's window;
- ``oracle``: prompt + the true output length.

Pow2 and Oracle model an oracle of the output length, so they are told it
explicitly at ``allocate`` (``needs_true_output_len``); a missing value is an error.

A reservation of ``R`` slots takes ``ceil(R / granule_slots)`` granules from a heap
(buddy by default, first-fit for comparison); the heap may round further (a buddy
heap to a power of two). A group with ``max_num_seqs > 1`` (parallel samples, beam
search) reserves one region per sequence at admission; ``fork`` hands the child the
next spare region and copies the parent's context into it (counted in
``Transfers.num_copied_blocks`` in granules). Freeing a sequence of a group that
still has live sequences returns its region to the group's spares (beam search
drops a beam and forks another into its region: free the dropped beams *before*
forking the kept ones, since while all ``max_num_seqs`` beams live every region is
held); the last free of a group releases every region. A sequence never grows past
its reservation.

Accounting (``usage``), per region of ``A`` allocated slots holding ``R`` reserved::

    |<------------------------- A (heap block) ------------------------->|
    |<-------------------- R (reservation) ------------------>|<-padding->|
    |<-- n tokens -->|<-- reserved: up to target -->|<-int.->|
    token_slots       reserved_slots                 internal   external

Heap padding (granule and power-of-two rounding) and the slots past the last whole
granule count as external fragmentation (the paper's Figure 2 puts Pow2/Oracle's
waste mostly under "external fragmentation & others"); free granules are external
fragmentation while a request is blocked, unused otherwise. A spare region not yet
forked into counts as reserved up to the group's longest target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pagesim.allocators.base import (
    Allocation,
    AllocRequest,
    AllocStatus,
    KVAllocator,
    MemoryUsage,
    Transfers,
)
from pagesim.allocators.buddy import BuddyHeap, ceil_log2
from pagesim.allocators.first_fit import FirstFitHeap
from pagesim.allocators.validation import check_request, target_of
from pagesim.errors import AllocatorError, ConfigError, InvariantError

POLICIES = ("max", "pow2", "oracle")
PLACEMENTS = {"buddy": BuddyHeap, "first_fit": FirstFitHeap}


@dataclass(frozen=True, slots=True)
class Region:
    """One contiguous reservation: where it is in the heap and how much the request asked for."""

    offset_granules: int
    num_granules: int
    reserved_slots: int


class ContiguousAllocator(KVAllocator):
    """Contiguous reservations placed on a buddy or first-fit heap (see the module docstring)."""

    is_paged = False

    def __init__(
        self,
        *,
        policy: str,
        capacity_slots: int,
        max_model_len: int,
        granule_slots: int = 16,
        placement: str = "buddy",
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(
                f"allocator.kind: unknown contiguous policy {policy!r}; allowed {POLICIES}"
            )
        if placement not in PLACEMENTS:
            raise ConfigError(
                f"allocator.placement: unknown placement {placement!r}; allowed {tuple(PLACEMENTS)}"
            )
        if granule_slots <= 0:
            raise ConfigError(f"allocator.granule_slots must be >= 1, got {granule_slots}")
        if max_model_len < 1:
            raise ConfigError(f"max_model_len must be >= 1, got {max_model_len}")
        num_granules = capacity_slots // granule_slots
        if num_granules < 1:
            raise ConfigError(
                f"KV pool of {capacity_slots} slots is smaller than one granule "
                f"(allocator.granule_slots={granule_slots})"
            )
        self.kind = policy
        self.needs_true_output_len = policy != "max"
        self.placement = placement
        self._capacity_slots = capacity_slots
        self._granule_slots = granule_slots
        self._max_model_len = max_model_len
        self._heap: BuddyHeap | FirstFitHeap = PLACEMENTS[placement](num_granules)
        self._region_by_seq: dict[int, Region] = {}
        self._num_tokens_by_seq: dict[int, int] = {}
        self._group_by_seq: dict[int, int] = {}
        self._seq_ids_by_group: dict[int, dict[int, None]] = {}
        self._spares_by_group: dict[int, list[Region]] = {}
        self._freed_seq_ids: set[int] = set()
        self._num_copied_granules = 0

    # -- properties -------------------------------------------------------------------------
    @property
    def capacity_slots(self) -> int:
        return self._capacity_slots

    @property
    def block_size(self) -> int:
        return self._granule_slots

    @property
    def num_total_blocks(self) -> int:
        """Granules in the heap."""
        return self._heap.num_granules

    @property
    def num_free_blocks(self) -> int:
        """Free granules in the heap."""
        return self._heap.num_free_granules

    @property
    def heap(self) -> BuddyHeap | FirstFitHeap:
        """The placement heap (read it, do not mutate it)."""
        return self._heap

    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        """Live sequences of a group (empty if the group holds nothing)."""
        return tuple(self._seq_ids_by_group.get(group_id, ()))

    def region(self, seq_id: int) -> Region:
        """The region a live sequence holds (its heap span and its reservation)."""
        return self._live(seq_id, "region")

    def num_spare_regions(self, group_id: int) -> int:
        """Regions reserved for the group that no sequence holds yet."""
        return len(self._spares_by_group.get(group_id, ()))

    # -- reservations ------------------------------------------------------------------------
    def reservation_slots(self, req: AllocRequest, true_output_len: int | None = None) -> int:
        """Slots the policy reserves for one sequence of ``req``."""
        if self.kind == "max":
            return self._max_model_len
        if true_output_len is None:
            raise AllocatorError(
                f"allocator {self.kind!r} needs the true output length of group {req.group_id} "
                "(pass true_output_len to can_allocate/allocate)"
            )
        if true_output_len < 0:
            raise AllocatorError(f"true_output_len must be >= 0, got {true_output_len}")
        if self.kind == "oracle":
            return max(req.prompt_len + true_output_len, req.num_tokens)
        pow2 = 1 << ceil_log2(true_output_len) if true_output_len > 0 else 0
        cap = max(self._max_model_len, req.prompt_len + true_output_len)
        return max(min(req.prompt_len + pow2, cap), req.num_tokens)

    def _granules_for(self, reserved_slots: int) -> int:
        return max(1, -(-reserved_slots // self._granule_slots))

    def can_allocate(self, req: AllocRequest, true_output_len: int | None = None) -> AllocStatus:
        """NEVER if the (rounded) regions exceed an empty pool; LATER if no holes fit now; else OK."""
        check_request(req)
        reserved = self.reservation_slots(req, true_output_len)
        if req.num_tokens > reserved:
            return AllocStatus.NEVER
        granules = self._granules_for(reserved)
        if self._heap.num_fit_when_empty(granules) < req.max_num_seqs:
            return AllocStatus.NEVER
        if self._heap.num_fit_now(granules) < req.max_num_seqs:
            return AllocStatus.LATER
        return AllocStatus.OK

    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        """Reserve ``max_num_seqs`` regions; ``req.seq_id`` takes the first. None if not OK now."""
        if self.can_allocate(req, true_output_len) is not AllocStatus.OK:
            return None
        if req.seq_id in self._region_by_seq:
            raise AllocatorError(f"allocate: sequence {req.seq_id} already holds a region")
        if req.group_id in self._seq_ids_by_group:
            raise AllocatorError(f"allocate: group {req.group_id} is already admitted")
        reserved = self.reservation_slots(req, true_output_len)
        granules = self._granules_for(reserved)
        regions = []
        for _ in range(req.max_num_seqs):
            offset = self._heap.alloc(granules)
            if offset is None:  # num_fit_now said they fit: the heap disagrees with itself
                raise InvariantError(f"{self.kind}: heap refused a region it reported as free")
            regions.append(Region(offset, self._heap.allocated_size(granules), reserved))
        self._seq_ids_by_group[req.group_id] = {}
        self._spares_by_group[req.group_id] = regions[:0:-1]  # pop() hands them out in order
        self._attach(req.group_id, req.seq_id, regions[0], req.num_tokens)
        return Allocation(num_cached_tokens=0)

    def _attach(self, group_id: int, seq_id: int, region: Region, num_tokens: int) -> None:
        self._region_by_seq[seq_id] = region
        self._num_tokens_by_seq[seq_id] = num_tokens
        self._group_by_seq[seq_id] = group_id
        self._seq_ids_by_group[group_id][seq_id] = None
        self._freed_seq_ids.discard(seq_id)

    def _live(self, seq_id: int, verb: str) -> Region:
        region = self._region_by_seq.get(seq_id)
        if region is None:
            state = "already freed" if seq_id in self._freed_seq_ids else "never allocated"
            raise AllocatorError(f"{verb}: unknown sequence {seq_id} ({state})")
        return region

    # -- growth, forks, frees -----------------------------------------------------------------
    def can_append_slots(self, group_id: int) -> bool:
        """Every live sequence of the group has room left in its reservation."""
        return all(
            self._num_tokens_by_seq[s] < self._region_by_seq[s].reserved_slots
            for s in self._seq_ids_by_group.get(group_id, ())
        )

    def append_slot(self, seq_id: int) -> None:
        region = self._live(seq_id, "append_slot")
        if self._num_tokens_by_seq[seq_id] >= region.reserved_slots:
            raise AllocatorError(
                f"append_slot: sequence {seq_id} is full: {region.reserved_slots} slots reserved "
                f"by policy {self.kind!r}"
            )
        self._num_tokens_by_seq[seq_id] += 1

    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child takes the group's next spare region and a copy of the parent's context."""
        self._live(parent_seq_id, "fork")
        if child_seq_id in self._region_by_seq:
            raise AllocatorError(f"fork: child sequence {child_seq_id} already exists")
        group_id = self._group_by_seq[parent_seq_id]
        spares = self._spares_by_group[group_id]
        if not spares:
            raise AllocatorError(
                f"fork: group {group_id} has no spare region left (it reserved one per sequence "
                "at admission: raise AllocRequest.max_num_seqs)"
            )
        num_tokens = self._num_tokens_by_seq[parent_seq_id]
        self._attach(group_id, child_seq_id, spares.pop(), num_tokens)
        self._num_copied_granules += self._granules_for(num_tokens)

    def free(self, seq_id: int) -> None:
        """Release a sequence's region (to the group's spares while the group lives on)."""
        region = self._live(seq_id, "free")
        group_id = self._group_by_seq.pop(seq_id)
        del self._region_by_seq[seq_id]
        del self._num_tokens_by_seq[seq_id]
        self._freed_seq_ids.add(seq_id)
        members = self._seq_ids_by_group[group_id]
        del members[seq_id]
        spares = self._spares_by_group[group_id]
        spares.append(region)
        if not members:
            for spare in reversed(spares):
                self._heap.free(spare.offset_granules)
            del self._seq_ids_by_group[group_id]
            del self._spares_by_group[group_id]

    def num_slots(self, seq_id: int) -> int:
        self._live(seq_id, "num_slots")
        return self._num_tokens_by_seq[seq_id]

    def drain_transfers(self) -> Transfers:
        out = Transfers(num_copied_blocks=self._num_copied_granules)
        self._num_copied_granules = 0
        return out

    # -- accounting --------------------------------------------------------------------------
    def usage(self, target_len_by_seq: Mapping[int, int], is_blocked: bool) -> MemoryUsage:
        g = self._granule_slots
        token = reserved = internal = padding = 0
        for group_id, members in self._seq_ids_by_group.items():
            group_target = 0
            for seq_id in members:
                region = self._region_by_seq[seq_id]
                n = self._num_tokens_by_seq[seq_id]
                target = target_of(target_len_by_seq, seq_id, n)
                group_target = max(group_target, target)
                will_fill = max(n, min(target, region.reserved_slots))
                token += n
                reserved += will_fill - n
                internal += region.reserved_slots - will_fill
                padding += region.num_granules * g - region.reserved_slots
            for region in self._spares_by_group[group_id]:
                will_fill = min(group_target, region.reserved_slots)
                reserved += will_fill
                internal += region.reserved_slots - will_fill
                padding += region.num_granules * g - region.reserved_slots
        free_slots = self._heap.num_free_granules * g
        padding += self._capacity_slots - self._heap.num_granules * g
        return MemoryUsage(
            capacity_slots=self._capacity_slots,
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=internal,
            external_frag_slots=padding + (free_slots if is_blocked else 0),
            unused_slots=0 if is_blocked else free_slots,
        )

    def check_invariants(self) -> None:
        self._heap.check_invariants()
        held = [r.offset_granules for r in self._region_by_seq.values()]
        held += [r.offset_granules for rs in self._spares_by_group.values() for r in rs]
        allocated = self._heap.allocated_blocks()
        if sorted(held) != sorted(allocated):
            raise InvariantError(
                f"{self.kind}: regions held {sorted(held)} != heap blocks {sorted(allocated)}"
            )
        for seq_id, region in self._region_by_seq.items():
            if allocated[region.offset_granules] != region.num_granules:
                raise InvariantError(f"{self.kind}: region of seq {seq_id} has the wrong size")
            if region.num_granules * self._granule_slots < region.reserved_slots:
                raise InvariantError(
                    f"{self.kind}: region of seq {seq_id} smaller than its reservation"
                )
            if not 0 <= self._num_tokens_by_seq[seq_id] <= region.reserved_slots:
                raise InvariantError(f"{self.kind}: seq {seq_id} outgrew its reservation")
            if seq_id not in self._seq_ids_by_group[self._group_by_seq[seq_id]]:
                raise InvariantError(f"{self.kind}: seq {seq_id} missing from its group")
        if sum(len(m) for m in self._seq_ids_by_group.values()) != len(self._region_by_seq):
            raise InvariantError(f"{self.kind}: group membership out of date")
        if set(self._spares_by_group) != set(self._seq_ids_by_group):
            raise InvariantError(f"{self.kind}: spare lists and groups disagree")
