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
(buddy by default, first-fit for comparison, ``artifact-buddy`` for the PagedAttention
artifact's LIFO buddy cut into ``max_model_len``-long chunks: ``artifact_buddy.py``);
the heap may round further (a buddy heap to a power of two). A group with ``max_num_seqs > 1`` (parallel samples, beam
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
forked into counts as reserved up to the group's target (``AllocRequest.target_len``).

Speed: every live sequence holds ``off + clock`` slots (``clock`` = bulk appends so
far), and each region's split is fixed when it is placed (``min(target, R)`` slots it
will fill, ``R - min(target, R)`` never filled, ``A - R`` padding), so ``usage``,
``can_append_all`` (a heap of the clock at which each region fills up) and
``append_slot_all`` are O(1). ``can_allocate`` remembers its last LATER answer until
the heap changes (the answer is a function of the heap's state).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from pagesim.allocators.artifact_buddy import ArtifactBuddyHeap
from pagesim.allocators.base import (
    NO_TRANSFERS,
    NOTHING_CACHED,
    Allocation,
    AllocRequest,
    DecodeTotals,
    KVAllocator,
    Transfers,
)
from pagesim.allocators.buddy import BuddyHeap, ceil_log2
from pagesim.allocators.first_fit import FirstFitHeap
from pagesim.allocators.status import AllocStatus
from pagesim.allocators.validation import FreedIds, check_request
from pagesim.errors import AllocatorError, ConfigError, InvariantError

POLICIES = ("max", "pow2", "oracle")
PLACEMENTS = {"buddy": BuddyHeap, "first_fit": FirstFitHeap, "artifact-buddy": ArtifactBuddyHeap}


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
        self._heap: BuddyHeap | FirstFitHeap | ArtifactBuddyHeap
        if placement == "artifact-buddy":  # chunks as long as the longest sequence
            self._heap = ArtifactBuddyHeap(num_granules, max(1, max_model_len // granule_slots))
        else:
            self._heap = PLACEMENTS[placement](num_granules)
        self._region_by_seq: dict[int, Region] = {}
        self._group_by_seq: dict[int, int] = {}
        self._seq_ids_by_group: dict[int, dict[int, None]] = {}
        self._spares_by_group: dict[int, list[Region]] = {}
        self._target_by_group: dict[int, int] = {}
        self._freed_seq_ids = FreedIds()
        self._num_copied_granules = 0
        # running totals (module docstring): held = off + clock per sequence
        self._clock = 0
        self._off_by_seq: dict[int, int] = {}
        self._sum_off = 0
        self._will_fill_total = 0
        self._internal_total = 0
        self._padding_total = capacity_slots - num_granules * granule_slots
        self._full_events: list[tuple[int, int, int]] = []  # (clock when full, seq, join id)
        self._join_id_by_seq: dict[int, int] = {}
        self._next_join_id = 0
        self._heap_version = 0
        self._later: tuple[int, int, int] | None = None  # (heap version, granules, regions)

    @classmethod
    def from_spec(
        cls,
        spec,
        *,
        capacity_slots: int,
        cpu_capacity_slots: int,
        max_model_len: int,
        shared_prefix: tuple[int, int] | None = None,
    ) -> ContiguousAllocator:
        """From an ``AllocatorSpec``: the policy is its ``kind``; granule_slots, placement
        (no CPU pool: contiguous reservations never swap; no sharing, so neither
        ``prefix_caching`` nor ``shared_prefix`` changes anything: each request reserves
        and computes its whole prompt, as the artifact's Orca does)."""
        return cls(
            policy=spec.kind,
            capacity_slots=capacity_slots,
            max_model_len=max_model_len,
            granule_slots=spec.granule_slots,
            placement=spec.placement,
        )

    @classmethod
    def pool_problem(cls, spec, *, capacity_slots: int, max_model_len: int) -> str | None:
        """Max reserves ``max_model_len`` slots for every request: a smaller pool admits none."""
        if spec.kind == "max" and capacity_slots < max_model_len:
            return (
                f"'max' reserves max_model_len = {max_model_len} slots per request, but the "
                f"KV pool has only {capacity_slots} slots: raise hardware.kv_slots or "
                "kv_budget_gib, or lower max_model_len"
            )
        return None

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
    def heap(self) -> BuddyHeap | FirstFitHeap | ArtifactBuddyHeap:
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
        query = (self._heap_version, granules, req.max_num_seqs)
        if query == self._later:
            return AllocStatus.LATER
        if self._heap.num_fit_when_empty(granules) < req.max_num_seqs:
            return AllocStatus.NEVER
        if self._heap.num_fit_now(granules) < req.max_num_seqs:
            self._later = query
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
        target = max(req.target_len, req.num_tokens)
        regions = []
        for _ in range(req.max_num_seqs):
            offset = self._heap.alloc(granules)
            if offset is None:  # num_fit_now said they fit: the heap disagrees with itself
                raise InvariantError(f"{self.kind}: heap refused a region it reported as free")
            region = Region(offset, self._heap.allocated_size(granules), reserved)
            self._count_region(region, target, +1)
            regions.append(region)
        self._heap_version += 1
        self._seq_ids_by_group[req.group_id] = {}
        self._target_by_group[req.group_id] = target
        self._spares_by_group[req.group_id] = regions[:0:-1]  # pop() hands them out in order
        self._attach(req.group_id, req.seq_id, regions[0], req.num_tokens)
        return NOTHING_CACHED

    def _count_region(self, region: Region, target: int, sign: int) -> None:
        """Add (remove) a held region's fixed split to (from) the running totals."""
        will_fill = min(target, region.reserved_slots)
        self._will_fill_total += sign * will_fill
        self._internal_total += sign * (region.reserved_slots - will_fill)
        self._padding_total += sign * (
            region.num_granules * self._granule_slots - region.reserved_slots
        )

    def _attach(self, group_id: int, seq_id: int, region: Region, num_tokens: int) -> None:
        self._region_by_seq[seq_id] = region
        self._group_by_seq[seq_id] = group_id
        self._seq_ids_by_group[group_id][seq_id] = None
        self._freed_seq_ids.discard(seq_id)
        self._join(seq_id, num_tokens)

    def _join(self, seq_id: int, held: int) -> None:
        off = held - self._clock
        self._off_by_seq[seq_id] = off
        self._sum_off += off
        join_id = self._next_join_id
        self._next_join_id += 1
        self._join_id_by_seq[seq_id] = join_id
        reserved = self._region_by_seq[seq_id].reserved_slots
        heapq.heappush(self._full_events, (reserved - off, seq_id, join_id))

    def _leave(self, seq_id: int) -> int:
        off = self._off_by_seq.pop(seq_id)
        self._sum_off -= off
        del self._join_id_by_seq[seq_id]
        return off + self._clock

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
            self._off_by_seq[s] + self._clock < self._region_by_seq[s].reserved_slots
            for s in self._seq_ids_by_group.get(group_id, ())
        )

    def can_append_all(self) -> bool:
        """Every live sequence has room left in its reservation (O(1) amortised)."""
        events = self._full_events
        while events and self._join_id_by_seq.get(events[0][1]) != events[0][2]:
            heapq.heappop(events)
        return not events or events[0][0] > self._clock

    def append_slot_all(self) -> None:
        self._clock += 1

    def append_slot(self, seq_id: int) -> None:
        region = self._live(seq_id, "append_slot")
        held = self._off_by_seq[seq_id] + self._clock
        if held >= region.reserved_slots:
            raise AllocatorError(
                f"append_slot: sequence {seq_id} is full: {region.reserved_slots} slots reserved "
                f"by policy {self.kind!r}"
            )
        self._leave(seq_id)
        self._join(seq_id, held + 1)

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
        num_tokens = self._off_by_seq[parent_seq_id] + self._clock
        self._attach(group_id, child_seq_id, spares.pop(), num_tokens)
        self._num_copied_granules += self._granules_for(num_tokens)

    def free(self, seq_id: int) -> None:
        """Release a sequence's region (to the group's spares while the group lives on)."""
        region = self._live(seq_id, "free")
        group_id = self._group_by_seq.pop(seq_id)
        del self._region_by_seq[seq_id]
        self._leave(seq_id)
        self._freed_seq_ids.add(seq_id)
        members = self._seq_ids_by_group[group_id]
        del members[seq_id]
        spares = self._spares_by_group[group_id]
        spares.append(region)
        if not members:
            target = self._target_by_group.pop(group_id)
            for spare in reversed(spares):
                self._heap.free(spare.offset_granules)
                self._count_region(spare, target, -1)
            self._heap_version += 1
            del self._seq_ids_by_group[group_id]
            del self._spares_by_group[group_id]

    def num_slots(self, seq_id: int) -> int:
        self._live(seq_id, "num_slots")
        return self._off_by_seq[seq_id] + self._clock

    def has_pending_transfers(self) -> bool:
        return self._num_copied_granules > 0

    def drain_transfers(self) -> Transfers:
        if not self._num_copied_granules:
            return NO_TRANSFERS
        out = Transfers(num_copied_blocks=self._num_copied_granules)
        self._num_copied_granules = 0
        return out

    # -- accounting --------------------------------------------------------------------------
    def decode_totals(self) -> DecodeTotals:
        """Sequences, their slots, and one region (block) each."""
        num_seqs = len(self._off_by_seq)
        return DecodeTotals(num_seqs, self._sum_off + num_seqs * self._clock, num_seqs)

    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        """Token states, reservation and internal fragmentation from the running totals."""
        token = self._sum_off + len(self._off_by_seq) * self._clock
        free_slots = self._heap.num_free_granules * self._granule_slots
        return (
            token,
            self._will_fill_total - token,
            self._internal_total,
            self._padding_total + free_slots if is_blocked else self._padding_total,
            0 if is_blocked else free_slots,
            0,
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
        g = self._granule_slots
        will_fill = internal = 0
        padding = self._capacity_slots - self._heap.num_granules * g
        for group_id, members in self._seq_ids_by_group.items():
            target = self._target_by_group[group_id]
            regions = [self._region_by_seq[s] for s in members] + self._spares_by_group[group_id]
            for region in regions:
                will_fill += min(target, region.reserved_slots)
                internal += region.reserved_slots - min(target, region.reserved_slots)
                padding += region.num_granules * g - region.reserved_slots
            for seq_id in members:
                n = self._off_by_seq[seq_id] + self._clock
                if not 0 <= n <= min(target, self._region_by_seq[seq_id].reserved_slots):
                    raise InvariantError(
                        f"{self.kind}: seq {seq_id} holds {n} slots, target {target}, "
                        f"reservation {self._region_by_seq[seq_id].reserved_slots}"
                    )
        got = (self._will_fill_total, self._internal_total, self._padding_total)
        if got != (will_fill, internal, padding):
            raise InvariantError(
                f"{self.kind}: running totals {got} != recomputed {(will_fill, internal, padding)}"
            )
        if self._sum_off != sum(self._off_by_seq.values()):
            raise InvariantError(f"{self.kind}: sum of offsets out of date")
        for seq_id, region in self._region_by_seq.items():
            if allocated[region.offset_granules] != region.num_granules:
                raise InvariantError(f"{self.kind}: region of seq {seq_id} has the wrong size")
            if region.num_granules * self._granule_slots < region.reserved_slots:
                raise InvariantError(
                    f"{self.kind}: region of seq {seq_id} smaller than its reservation"
                )
            if seq_id not in self._seq_ids_by_group[self._group_by_seq[seq_id]]:
                raise InvariantError(f"{self.kind}: seq {seq_id} missing from its group")
        if sum(len(m) for m in self._seq_ids_by_group.values()) != len(self._region_by_seq):
            raise InvariantError(f"{self.kind}: group membership out of date")
        if set(self._spares_by_group) != set(self._seq_ids_by_group):
            raise InvariantError(f"{self.kind}: spare lists and groups disagree")
