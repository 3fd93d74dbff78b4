"""Allocator throughput: operations per second on a seeded random workload.

Scenario: the paper's OPT-13B / A100-40GB pool (15,728 slots). A driver replays
1,000,000 operations drawn from one seeded numpy Generator (drawn before the clock
starts): admit a request (prompt 1..512 tokens), append a token to a live sequence,
fork a sequence (paged only), or free one; when an admission does not fit, the
oldest sequence is freed instead. Each operation is one mutating allocator call
(plus the admission check it needs). Reported: the median of ``--repeats`` runs.

- paged: PagedAllocator, block 16, watermark 1%, prefix caching on (prompts start
  with one of 8 shared prefixes), copy-on-write after forks;
- buddy: ContiguousAllocator(oracle) on a BuddyHeap of 16-slot granules.

Run: ``python benchmarks/bench_allocators.py [--num-ops 1000000] [--repeats 3] [--seed 0]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from pagesim.allocators import AllocRequest, AllocStatus, ContiguousAllocator, PagedAllocator

CAPACITY_SLOTS = 15_728


def draw_ops(num_ops: int, seed: int) -> np.ndarray:
    """Columns: op kind (0 admit, 1-6 append, 7 fork, 8-9 free), a pick, a prompt length."""
    rng = np.random.default_rng(seed)
    return np.stack(
        [
            rng.integers(0, 10, num_ops),
            rng.integers(0, 2**31, num_ops),
            rng.integers(1, 513, num_ops),
        ],
        axis=1,
    ).tolist()


def run_paged(ops: list) -> int:
    alloc = PagedAllocator(
        capacity_slots=CAPACITY_SLOTS, block_size=16, watermark=0.01, is_prefix_caching=True
    )
    live: list[int] = []
    next_id = 0
    for kind, pick, prompt_len in ops:
        if kind == 0 or not live:
            next_id += 1
            prefix = pick % 8
            segments = ((prefix, min(prompt_len, 64)),)
            if prompt_len > 64:
                segments += ((1_000_000 + next_id, prompt_len - 64),)
            req = AllocRequest(next_id, next_id, prompt_len, prompt_len, segments)
            if alloc.can_allocate(req) is AllocStatus.OK:
                alloc.allocate(req)
                live.append(next_id)
            else:
                alloc.free(live.pop(0))
        elif kind <= 6:
            seq_id = live[pick % len(live)]
            if alloc.num_free_blocks > 0:
                alloc.append_slot(seq_id)
            else:
                alloc.free(live.pop(0))
        elif kind == 7:
            next_id += 1
            alloc.fork(live[pick % len(live)], next_id)
            live.append(next_id)
        else:
            alloc.free(live.pop(pick % len(live)))
    alloc.check_invariants()
    return len(ops)


def run_buddy(ops: list) -> int:
    alloc = ContiguousAllocator(policy="oracle", capacity_slots=CAPACITY_SLOTS, max_model_len=2048)
    live: list[int] = []
    next_id = 0
    for kind, pick, prompt_len in ops:
        if kind in (0, 7) or not live:
            next_id += 1
            req = AllocRequest(next_id, next_id, prompt_len, prompt_len, ())
            output_len = 1 + pick % 1024
            if alloc.can_allocate(req, output_len) is AllocStatus.OK:
                alloc.allocate(req, output_len)
                live.append(next_id)
            else:
                alloc.free(live.pop(0))
        elif kind <= 6:
            seq_id = live[pick % len(live)]
            if alloc.can_append_slots(seq_id):
                alloc.append_slot(seq_id)
            else:
                alloc.free(live.pop(live.index(seq_id)))
        else:
            alloc.free(live.pop(pick % len(live)))
    alloc.check_invariants()
    return len(ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-ops", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ops = draw_ops(args.num_ops, args.seed)
    for name, runner in (("paged", run_paged), ("buddy", run_buddy)):
        rates = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            num_ops = runner(ops)
            rates.append(num_ops / (time.perf_counter() - start))
        print(
            f"{name:6s} {statistics.median(rates):>12,.0f} ops/s "
            f"(median of {args.repeats}, {args.num_ops:,} ops, seed {args.seed})"
        )


if __name__ == "__main__":
    main()
