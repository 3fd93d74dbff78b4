"""Time a planned grid within a budget of seconds: the most useful shapes first.

A GPU may be lent for minutes, not hours, so a calibration must end on time and still fit
every term. Three rules:

- **Order** (:func:`priority_order`): the planned shapes (the targets' and the report's)
  before the seeded random sample (``grid.SAMPLE_PREFIX``); within each of the two, the
  terms interleaved in proportion to their number of shapes (a cut leaves every term the
  same fraction of its shapes), each term's shapes in a seeded order; a contiguous
  shape is timed right after its paged twin (same ``shape_id``: the overhead target
  compares the two).
- **Estimate** (:func:`prior_cost_s`): before a shape is timed, its cost is predicted from
  the analytic profile of the GPU spec (the kernel's time over the runs the timing policy
  makes, plus the L2 flush and the launch around each run, plus allocating and filling
  the inputs), then scaled by the median ratio of measured to predicted cost of the
  shapes of the same term timed so far (of all shapes, before the term has any).
- **Stop**: a shape whose estimate does not fit in what is left is skipped (cheaper ones
  after it may still fit); nothing more is timed once the budget is spent. Skipped shapes
  are counted per term in the summary that the report prints.

Every ``checkpoint_s`` of the clock the rows timed so far are handed to ``checkpoint``
(the pipeline saves them), so a run stopped from outside still leaves its timings.
The clock is passed in: ``time.perf_counter`` on a GPU, a :class:`SimulatedClock` that the
synthetic backend advances in a dry run (the same code path, deterministic).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pagesim.calibrate.backend import Backend
from pagesim.calibrate.grid import SAMPLE_PREFIX, Case
from pagesim.calibrate.measure import case_row
from pagesim.calibrate.timing import TimingPolicy
from pagesim.simulator.costmodel.profile import TERM_NAMES, Profile

#: per timed run: the L2 flush (a memset of twice the L2), two events, a launch, a sync
RUN_OVERHEAD_S = 150e-6
#: per shape: allocating and filling its inputs (fixed part), freeing them
SETUP_S = 5e-3
#: per byte the shape's kernel touches: filling inputs on the device (random numbers)
SETUP_S_PER_BYTE = 1 / 100e9
#: swap inputs are pinned host memory, allocated at a few GB/s
PINNED_S_PER_BYTE = 1 / 3e9
CHECKPOINT_S = 20.0


class SimulatedClock:
    """A clock that only moves when told (a dry run's stand-in for the wall clock)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@dataclass(frozen=True)
class BudgetSummary:
    budget_s: float
    spent_s: float
    num_planned: int
    num_timed: int
    estimated_plan_s: float
    skipped_by_term: dict[str, int] = field(default_factory=dict)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped_by_term.values())

    def as_dict(self) -> dict:
        return {
            "budget_s": self.budget_s,
            "spent_s": self.spent_s,
            "num_planned": self.num_planned,
            "num_timed": self.num_timed,
            "estimated_plan_s": self.estimated_plan_s,
            "skipped_by_term": dict(self.skipped_by_term),
        }


def priority_order(cases: Sequence[Case], rng: np.random.Generator) -> list[Case]:
    """The cases in the order they are timed (module docstring)."""
    shape_ids = sorted({c.shape_id for c in cases})
    rank = {sid: int(r) for sid, r in zip(shape_ids, rng.permutation(len(shape_ids)), strict=True)}
    groups: dict[tuple[bool, str], list[Case]] = {}
    for case in cases:
        groups.setdefault((case.shape_id.startswith(SAMPLE_PREFIX), case.term), []).append(case)
    key: dict[tuple[str, str], tuple[bool, float]] = {}
    for (is_sample, term), group in groups.items():
        for i, case in enumerate(sorted(group, key=lambda c: rank[c.shape_id])):
            key[(term, case.shape_id)] = (is_sample, (i + 0.5) / len(group))
    for term, sid in list(key):
        if term == "contiguous_decode_attention" and ("paged_decode_attention", sid) in key:
            key[(term, sid)] = key[("paged_decode_attention", sid)]
    term_index = {t: i for i, t in enumerate(TERM_NAMES)}
    return sorted(
        cases,
        key=lambda c: (*key[(c.term, c.shape_id)], term_index.get(c.term, len(TERM_NAMES))),
    )


def prior_cost_s(case: Case, policy: TimingPolicy, prior: Profile) -> float:
    """Seconds that timing ``case`` is expected to take, before anything is measured."""
    f = case.features
    kernel_s = prior.term(case.term).time_s(f.bytes_, f.flops, f.blocks, f.seqs, f.tokens)
    runs = policy.num_warmup + policy.min_repeats
    setup_s = SETUP_S + f.bytes_ * SETUP_S_PER_BYTE
    if case.term == "swap":
        setup_s += f.bytes_ * PINNED_S_PER_BYTE
    return setup_s + runs * (kernel_s + RUN_OVERHEAD_S)


def run_budgeted(
    cases: Sequence[Case],
    backend: Backend,
    policy: TimingPolicy,
    budget_s: float,
    prior: Profile,
    clock: Callable[[], float] = time.perf_counter,
    on_progress: Callable[[int, int], None] | None = None,
    checkpoint: Callable[[pd.DataFrame], None] | None = None,
) -> tuple[pd.DataFrame, BudgetSummary]:
    """Time ``cases`` in the given order until ``budget_s`` seconds of ``clock`` are spent.

    Returns one row per timed case (``measure.case_row``, the timing statistics, ``wall_s``)
    and the summary. ``on_progress(num_done, num_cases)`` is called after every case,
    timed or skipped.
    """
    start = clock()
    last_checkpoint = start
    estimates = [prior_cost_s(c, policy, prior) for c in cases]
    ratios: dict[str, list[float]] = {}
    rows: list[dict] = []
    skipped: dict[str, int] = {}
    for i, (case, prior_s) in enumerate(zip(cases, estimates, strict=True)):
        elapsed = clock() - start
        known = ratios.get(case.term) or [r for rs in ratios.values() for r in rs]
        estimate = prior_s * (statistics.median(known) if known else 1.0)
        if elapsed >= budget_s or elapsed + estimate > budget_s:
            skipped[case.term] = skipped.get(case.term, 0) + 1
        else:
            before = clock()
            stats = backend.time_case(case, policy)
            wall_s = clock() - before
            ratios.setdefault(case.term, []).append(wall_s / prior_s)
            rows.append({**case_row(case), **stats.as_dict(), "wall_s": wall_s})
            if checkpoint is not None and clock() - last_checkpoint >= CHECKPOINT_S:
                checkpoint(pd.DataFrame(rows))
                last_checkpoint = clock()
        if on_progress is not None:
            on_progress(i + 1, len(cases))
    summary = BudgetSummary(
        budget_s=float(budget_s),
        spent_s=float(clock() - start),
        num_planned=len(cases),
        num_timed=len(rows),
        estimated_plan_s=float(sum(estimates)),
        skipped_by_term=dict(sorted(skipped.items())),
    )
    return pd.DataFrame(rows), summary
