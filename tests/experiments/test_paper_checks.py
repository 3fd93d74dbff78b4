"""The paper's shape checks (experiments/paper_checks.py) on hand-made results tables."""

from __future__ import annotations

import pandas as pd

from pagesim.experiments.paper_checks import (
    BestCheck,
    Comparison,
    OrderCheck,
    best_rows,
    comparison_row,
    order_rows,
)
from pagesim.experiments.summary import PaperTarget, comparison_lines

LAT = "normalized_latency_s_per_tok"
RATE = "arrivals.rate_req_s"


def _curves(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"label": f"{k}+{r}", "allocator.kind": k, RATE: r, LAT: v} for k, r, v in rows]
    )


RESULTS = _curves(
    [
        ("paged", 1.0, 0.030), ("paged", 2.0, 0.040),
        ("oracle", 1.0, 0.060), ("oracle", 1.5, 0.80),
        ("max", 0.5, 0.038), ("max", 0.75, 0.35),
    ]
)  # fmt: skip


def test_order_compares_systems_at_common_rates_only_and_says_when_it_cannot():
    rows = order_rows(
        OrderCheck(by="allocator.kind", better_first=["paged", "oracle", "max"]), RESULTS
    )
    by_pair = {(r.check, r.where): r for r in rows}
    held = by_pair[("paged ≤ oracle", f"{RATE}=1")]
    assert held.holds is True and held.values == "0.03 vs 0.06"
    # oracle and max, paged and max: no rate in common -> not compared, never "holds"
    assert by_pair[("oracle ≤ max", f"no common {RATE}")].holds is None
    assert by_pair[("paged ≤ max", f"no common {RATE}")].verdict == "not compared"


def test_order_fails_when_a_worse_system_is_faster_beyond_the_tolerance():
    results = _curves([("paged", 1.0, 0.044), ("oracle", 1.0, 0.027)])
    strict = order_rows(OrderCheck(by="allocator.kind", better_first=["paged", "oracle"]), results)
    assert [r.holds for r in strict] == [False]
    # a tie within the stated tolerance holds (0.0280 is within 5 % of 0.0275)
    tie = _curves([("paged", 1.0, 0.0280), ("oracle", 1.0, 0.0275)])
    check = OrderCheck(by="allocator.kind", better_first=["paged", "oracle"], tolerance=0.05)
    assert [r.holds for r in order_rows(check, tie)] == [True]


def test_order_within_groups():
    results = _curves([("paged", 1.0, 0.03), ("oracle", 1.0, 0.05)] * 2)
    results["workload.n"] = [2, 2, 4, 4]
    results.loc[3, LAT] = 0.01  # at n = 4 oracle is faster
    check = OrderCheck(by="allocator.kind", better_first=["paged", "oracle"], within=["workload.n"])
    rows = order_rows(check, results)
    assert [(r.where, r.holds) for r in rows] == [
        (f"workload.n=2; {RATE}=1", True), (f"workload.n=4; {RATE}=1", False),
    ]  # fmt: skip


def test_comparison_and_best():
    blocks = pd.DataFrame(
        {"label": ["1", "16", "256"], "allocator.block_size": [1, 16, 256], LAT: [0.05, 0.03, 0.04]}
    )
    row = comparison_row(Comparison(claim="1 is slower", lower="16", higher="1"), blocks)
    assert row.holds is True and row.values == "0.03 vs 0.05"
    assert comparison_row(Comparison(claim="?", lower="16", higher="8"), blocks).holds is None
    best = best_rows(BestCheck(claim="16-32", x="allocator.block_size", low=16, high=32), blocks)
    assert [r.holds for r in best] == [True]
    blocks.loc[2, LAT] = 0.01
    best = best_rows(BestCheck(claim="16-32", x="allocator.block_size", low=16, high=32), blocks)
    assert [r.holds for r in best] == [False] and "allocator.block_size=256" in best[0].values


def test_best_among_the_rows_where_says():
    blocks = pd.DataFrame(
        {
            "label": ["recompute+1", "recompute+16", "swap+1", "swap+16"],
            "scheduler.preemption_mode": ["recompute", "recompute", "swap", "swap"],
            "allocator.block_size": [1, 16, 1, 16],
            LAT: [0.05, 0.03, 0.01, 0.04],
        }
    )
    check = BestCheck(claim="16-128", x="allocator.block_size", low=16, high=128,
                      where={"scheduler.preemption_mode": "recompute"})  # fmt: skip
    [row] = best_rows(check, blocks)
    assert row.holds is True and row.where.startswith("scheduler.preemption_mode=recompute")
    everywhere = check.model_copy(update={"where": {}})
    assert [r.holds for r in best_rows(everywhere, blocks)] == [False]  # swap+1 is lowest


def test_summary_shows_the_checks_and_the_stated_cause():
    target = PaperTarget(
        source="Figure X",
        order={"by": "allocator.kind", "better_first": ["paged", "oracle"]},
        cause="the steps  are\nfaster",
    )
    text = "\n".join(comparison_lines(target, RESULTS))
    assert "| paged ≤ oracle | arrivals.rate_req_s=1 | 0.03 vs 0.06 | yes |" in text
    assert "Why pagesim differs: the steps are faster" in text
