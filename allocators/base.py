"""The one interface every KV-cache allocator implements.

Allocators are plain objects the scheduler calls (no SimPy). They manage a pool of
token slots and can say at any instant where every slot goes.

Identity
    A *sequence group* is one request: ``n`` parallel samples or a beam of width
    ``k`` are sequences of one group. As in vLLM v0, a group is admitted with one
    sequence holding the prompt; the scheduler forks the others after the prefill.
    Group and sequence ids are ints handed out by the simulator.

Life of a group (the verbs, in the order a scheduler uses them)::

    can_allocate(req)  -> OK | LATER | NEVER       admission check (paged: watermark)
    num_pinned_tokens(req) -> int                   prompt tokens held pinned (not computed)
    allocate(req)      -> Allocation | None         prompt slots for req.seq_id
    fork(parent, child)                             child shares every block of parent
    can_append_slots(group_id) -> bool              room for one more token per running seq
    append_slot(seq_id)                             one slot; may open a block or copy-on-write
    can_append_all() / append_slot_all()            the same for every sequence at once (bulk)
    can_swap_out / swap_out / can_swap_in / swap_in (paged: whole groups, all or nothing)
    free(seq_id)                                    release a sequence's slots
    drain_transfers() -> Transfers                  copies and swaps since the last drain
    decode_totals() -> DecodeTotals                 sequences, slots and blocks they hold
    usage(is_blocked) -> MemoryUsage                 (usage_slots: the same as a tuple)
    check_invariants()

The bulk verbs are the fast path of a step in which every sequence the allocator holds
appends one slot (a vLLM decode step, an Orca iteration): ``can_append_all`` is a
sufficient condition for the per-group checks to pass in any order (when it is False
the scheduler visits the groups one by one), and ``append_slot_all`` has the effect of
``append_slot`` on every sequence. Allocators keep running totals so that both, and
``usage``, cost O(1) per step for sequences that share nothing.

What allocators may know
    Token counts and prompt content segments. The true output length is passed only
    to allocators whose ``needs_true_output_len`` is True (the Pow2 and Oracle
    contiguous variants, which model an oracle), explicitly, at ``allocate``.
    ``AllocRequest.target_len`` is each sequence's final length, for the hindsight
    accounting of ``usage`` only (forks inherit it); it must not influence any
    allocation decision.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from pagesim.allocators.status import AllocStatus
from pagesim.errors import AllocatorError, InvariantError


class AllocRequest(NamedTuple):
    """What an allocator is told when a group asks to be admitted.

    ``num_tokens`` is the number of slots to hold now: the prompt length on first
    admission, prompt + tokens generated so far when a recomputed group comes back.
    ``segments`` describe the prompt's content (see ``workloads.trace``); only the
    first ``prompt_len`` tokens have content identity (generated tokens are unique).
    ``max_num_seqs`` is how many sequences the group may fork into (n, or the beam
    width), for allocators that reserve per sequence up front. ``target_len`` is the
    final length of each of its sequences (hindsight accounting only; 0 = what it holds
    now).
    """

    group_id: int
    seq_id: int
    prompt_len: int
    num_tokens: int
    segments: tuple[tuple[int, int], ...]
    max_num_seqs: int = 1
    target_len: int = 0


class Allocation(NamedTuple):
    """Result of a successful ``allocate``: how much of the prompt came from the prefix cache."""

    num_cached_tokens: int = 0


#: an allocation with nothing served from the prefix cache (what most ``allocate`` calls
#: return: one named tuple, not one per admission)
NOTHING_CACHED = Allocation()


@dataclass(frozen=True)
class Transfers:
    """Block copies and swap transfers done since the last ``drain_transfers``.

    Counts are in blocks of ``block_size`` slots (for contiguous allocators, in granules).
    """

    num_copied_blocks: int = 0
    num_swapped_in_blocks: int = 0
    num_swapped_out_blocks: int = 0


#: no copies and no swaps (returned by ``drain_transfers`` on most steps)
NO_TRANSFERS = Transfers()


class DecodeTotals(NamedTuple):
    """What a decode step over every sequence on the GPU reads (after the appends):
    the number of sequences, the slots they hold (their context lengths) summed, and the
    blocks their tables hold summed (a block shared by k tables counts k times; for a
    contiguous allocator, one region per sequence)."""

    num_seqs: int
    num_slots: int
    num_blocks: int


class _MemoryUsageFields(NamedTuple):
    capacity_slots: int
    token_slots: int
    reserved_slots: int
    internal_frag_slots: int
    external_frag_slots: int
    unused_slots: int
    shared_saved_slots: int = 0


class MemoryUsage(_MemoryUsageFields):
    """Where every slot of the KV pool is at one instant (the paper's Figure 2 categories).

    - token_slots: slots holding KV of tokens already computed;
    - reserved_slots: slots a sequence holds now and will fill before it finishes;
    - internal_frag_slots: slots a sequence holds and will never fill (hindsight);
    - external_frag_slots: free slots while a request waits for memory it cannot get,
      plus allocator padding (a buddy allocator's rounding of a reservation up to a
      power of two: held, but by the allocator's rule, not the request's);
    - unused_slots: free slots while nobody waits for memory.

    Shared blocks count once. The five sum to ``capacity_slots`` (checked on construction).

    ``shared_saved_slots`` is what sharing saves now: the slots the live sequences
    would hold if each had its own copy of every block, minus the slots they hold
    (0 for allocators that never share). The paper's §6.3 "memory saving" is its
    time-weighted ratio to the unshared total.

    An immutable named tuple (one is made every engine step, so it is cheap to build).
    """

    __slots__ = ()

    def __new__(
        cls,
        capacity_slots: int,
        token_slots: int,
        reserved_slots: int,
        internal_frag_slots: int,
        external_frag_slots: int,
        unused_slots: int,
        shared_saved_slots: int = 0,
    ) -> MemoryUsage:
        self = tuple.__new__(
            cls,
            (
                capacity_slots,
                token_slots,
                reserved_slots,
                internal_frag_slots,
                external_frag_slots,
                unused_slots,
                shared_saved_slots,
            ),
        )
        if (
            token_slots < 0
            or reserved_slots < 0
            or internal_frag_slots < 0
            or external_frag_slots < 0
            or unused_slots < 0
            or shared_saved_slots < 0
            or token_slots
            + reserved_slots
            + internal_frag_slots
            + external_frag_slots
            + unused_slots
            != capacity_slots
        ):
            raise InvariantError(f"memory usage does not add up to capacity: {self}")
        return self

    @property
    def held_slots(self) -> int:
        """Slots held by sequences (token states + reservation + internal fragmentation)."""
        return self.token_slots + self.reserved_slots + self.internal_frag_slots


@dataclass(frozen=True)
class PrefixCacheCounters:
    """Cumulative prefix-cache lookups, in blocks and in tokens (queried = hit + miss)."""

    hit_blocks: int = 0
    queried_blocks: int = 0
    hit_tokens: int = 0
    queried_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        """Fraction of queried prompt tokens served from the cache (0 when none queried)."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class KVAllocator(ABC):
    """Base of every allocator. Subclasses document their modelling rules and sources.

    A class registered in ``registry.ALLOCATORS`` also has ``from_spec(spec, *,
    capacity_slots, cpu_capacity_slots, max_model_len, shared_prefix)``, which builds it
    from an ``AllocatorSpec`` (``shared_prefix``: the workload's shared prefix as a
    (segment id, tokens) content segment, or None), and may say with
    :meth:`pool_problem` why a pool could never serve a request.
    """

    #: short name used in configs and outputs, e.g. "paged", "max", "pow2", "oracle"
    kind: str = "abstract"
    #: True for allocators that are told the true output length at admission
    needs_true_output_len: bool = False
    #: True for block-based allocators (swap, fork sharing, prefix caching available)
    is_paged: ClassVar[bool] = False
    #: the verbs a scheduler uses on it: ``allocator`` (this interface's) or
    #: ``kv-cache-manager`` (vLLM V1's ``allocate_slots``, ``allocators/paged_v1.py``);
    #: a scheduler runs only on allocators that speak its ``kv_interface``
    kv_interface: ClassVar[str] = "allocator"

    @classmethod
    def pool_problem(cls, spec, *, capacity_slots: int, max_model_len: int) -> str | None:
        """Why a pool of ``capacity_slots`` could never serve a request under ``spec`` (an
        ``AllocatorSpec``), in words that follow "allocator.kind: "; None when it may.
        Asked before a run is built (``make_allocator``, the experiments' preflight)."""
        return None

    @property
    @abstractmethod
    def capacity_slots(self) -> int:
        """Token slots in the GPU pool."""

    @property
    @abstractmethod
    def block_size(self) -> int:
        """Slots per block (contiguous allocators: slots per granule)."""

    @abstractmethod
    def can_allocate(
        self, req: AllocRequest, true_output_len: int | None = None
    ) -> AllocStatus: ...

    @abstractmethod
    def allocate(self, req: AllocRequest, true_output_len: int | None = None) -> Allocation | None:
        """Hold ``req.num_tokens`` slots for ``req.seq_id``, or return None (nothing changed)."""

    def num_pinned_tokens(self, req: AllocRequest) -> int:
        """Leading prompt tokens of ``req`` whose KV the allocator holds pinned: the
        request maps them and never computes them, so they are not part of the prompt a
        scheduler budgets (0 unless a paged pool pins a shared prefix)."""
        return 0

    @abstractmethod
    def can_append_slots(self, group_id: int) -> bool:
        """Whether every running sequence of the group can take one more token now."""

    @abstractmethod
    def append_slot(self, seq_id: int) -> None:
        """One more slot for ``seq_id``. Raises AllocatorError if impossible."""

    def can_append_all(self) -> bool:
        """Sufficient for ``can_append_slots`` of every group while all of them append.
        False (the default) sends the scheduler down the per-group path."""
        return False

    def append_costs(self, group_ids: list[int]) -> list[tuple[int, int]] | None:
        """For a visit of the running groups that checks each group and appends to all
        of them at the end (``append_slot_all``): per group, the free blocks its
        ``can_append_slots`` asks for and the blocks its appends take, as if the groups
        before it had appended. None when that cannot be said without appending (the
        default: the caller appends group by group)."""
        return None

    def append_slot_all(self) -> None:
        """``append_slot`` for every sequence held (``can_append_all`` said True)."""
        raise AllocatorError(f"{self.kind} allocator has no bulk append")

    @abstractmethod
    def decode_totals(self) -> DecodeTotals:
        """Sequences held, their slots and their blocks (see :class:`DecodeTotals`)."""

    @abstractmethod
    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """Make ``child_seq_id`` a sequence of the parent's group sharing its slots."""

    @abstractmethod
    def free(self, seq_id: int) -> None:
        """Release ``seq_id``'s slots. Unknown or already-freed ids raise AllocatorError."""

    def free_and_fork(self, seq_ids: list[int], forks: list[tuple[int, int]]) -> None:
        """A beam step of one group: ``free`` each of ``seq_ids``, then ``fork(parent,
        child)`` for each pair of ``forks``, in order. A child may take the id of a
        sequence freed in the same call (the schedulers give the i-th fork the i-th freed
        id while there is one). An allocator may do it in one pass; the outcome is that
        of the calls, up to which free block each sequence is given (the slots, blocks,
        sharing and copies are the same)."""
        for seq_id in seq_ids:
            self.free(seq_id)
        for parent_seq_id, child_seq_id in forks:
            self.fork(parent_seq_id, child_seq_id)

    def can_swap_out(self, group_id: int) -> bool:
        return False

    def swap_out(self, group_id: int) -> None:
        raise AllocatorError(f"{self.kind} allocator cannot swap")

    def can_swap_in(self, group_id: int) -> AllocStatus:
        return AllocStatus.NEVER

    def swap_in(self, group_id: int) -> None:
        raise AllocatorError(f"{self.kind} allocator cannot swap")

    @abstractmethod
    def seq_ids(self, group_id: int) -> tuple[int, ...]:
        """Live sequences of a group (empty if the group holds nothing)."""

    @abstractmethod
    def num_slots(self, seq_id: int) -> int:
        """Tokens currently held by ``seq_id`` (its context length)."""

    @abstractmethod
    def drain_transfers(self) -> Transfers:
        """Copies and swaps since the last call; resets the tally."""

    def has_pending_transfers(self) -> bool:
        """Whether copies or swaps happened since the last ``drain_transfers``. The
        default says yes, which is always safe (steady decode runs then go step by step
        through ``schedule()``); an allocator that tallies its transfers answers exactly."""
        return True

    def usage(self, is_blocked: bool) -> MemoryUsage:
        """The exact breakdown now (``is_blocked``: a request waits for memory)."""
        return MemoryUsage(self.capacity_slots, *self.usage_slots(is_blocked))

    @abstractmethod
    def usage_slots(self, is_blocked: bool) -> tuple[int, int, int, int, int, int]:
        """:meth:`usage` as a plain tuple: token, reserved, internal and external
        fragmentation, unused, and shared-saved slots (the hot path's form)."""

    def append_all_measured(
        self, is_blocked: bool
    ) -> tuple[int, int, int, tuple[int, int, int, int, int, int]] | None:
        """A bulk decode step in one call: None (nothing changed) unless
        ``can_append_all`` and no copy or swap waits to be drained (it belongs in a
        step's plan: the caller takes the per-step path); else ``append_slot_all``, then
        ``decode_totals`` (its three numbers) and ``usage_slots(is_blocked)``, in one
        flat tuple."""
        if self.has_pending_transfers() or not self.can_append_all():
            return None
        self.append_slot_all()
        return (*self.decode_totals(), self.usage_slots(is_blocked))

    def append_all_copying(
        self, is_blocked: bool
    ) -> tuple[int, int, int, tuple[int, int, int, int, int, int], int] | None:
        """The bulk decode step that ``append_all_measured`` leaves to the caller because
        its appends copy blocks (forks appending into a shared last block): None (nothing
        changed) unless ``can_append_all`` and nothing waited to be drained before;
        else ``append_slot_all``, ``decode_totals``, ``usage_slots(is_blocked)`` and the
        blocks the step copied (``drain_transfers``), in one flat tuple."""
        if self.has_pending_transfers() or not self.can_append_all():
            return None
        self.append_slot_all()
        transfers = self.drain_transfers()
        if transfers.num_swapped_in_blocks or transfers.num_swapped_out_blocks:
            raise InvariantError(f"{self.kind} allocator: a bulk append swapped blocks")
        return (
            *self.decode_totals(),
            self.usage_slots(is_blocked),
            transfers.num_copied_blocks,
        )

    def cached_prefix_tokens(self, req: AllocRequest) -> int:
        """Leading prompt tokens of ``req`` whose KV this pool's prefix cache holds now (whole
        blocks, at most ``num_tokens - 1``), looked up without changing anything: what a
        prefix-aware router asks each replica. 0 for an allocator without a prefix cache."""
        return 0

    @property
    def prefix_cache(self) -> PrefixCacheCounters:
        return PrefixCacheCounters()

    @abstractmethod
    def check_invariants(self) -> None:
        """Raise InvariantError if the bookkeeping is inconsistent."""
