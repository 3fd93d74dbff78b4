"""The headline comparison (experiments/paper_headline.py) on hand-made curves: where a
curve crosses a bound, what a ratio of two sustained rates may claim, and the report's
section with the paper's claims beside."""

from __future__ import annotations

import pandas as pd
import pytest
from pydantic import ValidationError

from pagesim.experiments.paper_headline import (
    AT_LEAST,
    AT_MOST,
    BELOW,
    EXACT,
    UNKNOWN,
    Bound,
    Claim,
    HeadlineSpec,
    Ratio,
    Sustained,
    SustainedSpec,
    claim_holds,
    headline_lines,
    panel_result,
    ratio,
    sustained_rate,
)
from pagesim.experiments.summary import paper_headline, paper_targets

LAT = "normalized_latency_s_per_tok"
RATE = "arrivals.rate_req_s"


def _curve(points: list[tuple[float, float]], label: str = "x") -> pd.DataFrame:
    rows = [{"label": label, RATE: r, LAT: v} for r, v in points]
    return pd.DataFrame(rows, columns=["label", RATE, LAT])


def test_the_rate_where_the_curve_crosses_the_bound_is_interpolated():
    curve = _curve([(1.0, 0.03), (2.0, 0.04), (3.0, 0.08), (4.0, 0.5)])
    found = sustained_rate(curve, 0.06)
    assert found.relation == EXACT
    assert found.rate == pytest.approx(2.5)  # 0.04 -> 0.08 between 2 and 3: 0.06 at 2.5


def test_the_first_crossing_counts_even_if_the_curve_comes_back_under():
    curve = _curve([(1.0, 0.03), (2.0, 0.09), (3.0, 0.05)])
    assert sustained_rate(curve, 0.06) == Sustained(1.5, EXACT)


def test_a_curve_that_never_crosses_gives_a_lower_bound_and_one_over_from_the_start_an_upper():
    curve = _curve([(2.0, 0.04), (1.0, 0.03)])  # the order of the rows does not matter
    assert sustained_rate(curve, 0.06) == Sustained(2.0, AT_LEAST)
    assert sustained_rate(curve, 0.01) == Sustained(1.0, BELOW)
    with pytest.raises(ValueError):
        sustained_rate(_curve([]), 0.06)


@pytest.mark.parametrize(
    ("vllm", "baseline", "relation"),
    [
        (EXACT, EXACT, EXACT),
        (AT_LEAST, EXACT, AT_LEAST),
        (EXACT, BELOW, AT_LEAST),
        (AT_LEAST, BELOW, AT_LEAST),
        (EXACT, AT_LEAST, AT_MOST),
        (BELOW, EXACT, AT_MOST),
        (BELOW, AT_LEAST, AT_MOST),
        (AT_LEAST, AT_LEAST, UNKNOWN),
        (BELOW, BELOW, UNKNOWN),
    ],
)
def test_a_ratio_keeps_only_the_relation_its_two_rates_allow(vllm, baseline, relation):
    found = ratio(Sustained(4.0, vllm), Sustained(2.0, baseline))
    assert found == Ratio(2.0, relation)


@pytest.mark.parametrize(
    ("found", "holds"),
    [
        (Ratio(2.0, EXACT), True),
        (Ratio(1.6, EXACT), False),
        (Ratio(2.8, EXACT), False),
        (Ratio(3.0, AT_LEAST), False),  # above the range whatever it is
        (Ratio(2.0, AT_LEAST), None),
        (Ratio(1.5, AT_MOST), False),
        (Ratio(2.0, AT_MOST), None),
        (Ratio(2.0, UNKNOWN), None),
    ],
)
def test_a_claim_holds_only_when_the_ratio_says_so(found, holds):
    claim = Claim(source="§6.2", baseline="Orca (Oracle)", datasets=["sharegpt"], low=1.7, high=2.7)
    assert claim_holds(claim, found) is holds


def test_up_to_claims_start_at_one():
    claim = Claim(source="§6.2", baseline="FT", datasets=["sharegpt"], high=22.0)
    assert claim_holds(claim, Ratio(10.0, EXACT)) is True
    assert claim_holds(claim, Ratio(0.9, EXACT)) is False


def test_a_bound_is_relative_or_absolute_never_both():
    assert Bound(name="2x", unloaded_factor=2.0).value(0.03) == pytest.approx(0.06)
    assert Bound(name="1 s", s_per_tok=1.0).value(0.03) == 1.0
    for kwargs in ({}, {"unloaded_factor": 2.0, "s_per_tok": 1.0}):
        with pytest.raises(ValidationError):
            Bound(name="?", **kwargs)


PANEL = SustainedSpec(
    subfigure="12x",
    panel="toy",
    dataset="sharegpt",
    vllm="v",
    baselines={"Orca (Oracle)": "o", "FT": "f"},
)
RESULTS = pd.concat(
    [
        _curve([(1.0, 0.02), (2.0, 0.03), (4.0, 0.05)], "v"),
        _curve([(0.5, 0.02), (1.0, 0.06)], "o"),
        _curve([(0.1, 0.05)], "f"),
    ]
)


def test_a_panel_reads_every_system_against_the_panels_unloaded_latency():
    found = panel_result(PANEL, "toy_experiment", RESULTS, Bound(name="2x", unloaded_factor=2.0))
    assert found.bound_s_per_tok == pytest.approx(0.04)  # twice the lowest latency, 0.02
    assert found.rates["vLLM"] == Sustained(3.0, EXACT)
    assert found.rates["Orca (Oracle)"] == Sustained(0.75, EXACT)
    assert found.rates["FT"] == Sustained(0.1, BELOW)
    assert found.ratios == {"Orca (Oracle)": Ratio(4.0, EXACT), "FT": Ratio(30.0, AT_LEAST)}
    with pytest.raises(ValueError, match="no points labelled"):
        panel_result(PANEL, "toy", RESULTS[RESULTS["label"] != "f"], Bound(name="b", s_per_tok=1))


def test_the_section_shows_each_bound_the_claims_and_the_cause():
    spec = HeadlineSpec(
        source="the abstract",
        bounds=[Bound(name="2x", unloaded_factor=2.0), Bound(name="1 s/token", s_per_tok=1.0)],
        claims=[
            Claim(source="§6.2", baseline="Orca (Oracle)", datasets=["sharegpt"], low=1.7, high=2.7)
        ],  # fmt: skip
        cause="the steps  are\nfaster",
    )
    text = "\n".join(headline_lines(spec, [("toy_experiment", PANEL, RESULTS)]))
    assert "Sustained request rate (req/s) under 2x:" in text
    assert "| 12x | toy | toy_experiment | 0.04 | 3 | 0.75 | < 0.1 | 4.00x | ≥ 30.00x |" in text
    assert "Sustained request rate (req/s) under 1 s/token:" in text
    assert "| §6.2 | vLLM ÷ Orca (Oracle), sharegpt: 1.7-2.7x | toy 4.00x (out) |" in text
    assert "Why pagesim differs: the steps are faster" in text


def test_every_shipped_panel_names_systems_of_its_own_experiment():
    """Each ``sustained`` entry's labels are labels its experiment produces."""
    from pagesim.experiments.paper_suite import suite_experiments
    from pagesim.experiments.points import expand_points
    from pagesim.experiments.validate import load_experiment

    targets = paper_targets()
    panels = 0
    for name in suite_experiments():
        spec = load_experiment(name)
        target = targets.get(spec.paper_figure or "")
        if target is None or target.sustained is None:
            continue
        labels = {p.label for p in expand_points(spec)}
        wanted = {target.sustained.vllm, *target.sustained.baselines.values()}
        assert wanted <= labels, (name, wanted - labels)
        panels += 1
    assert panels >= 6  # 13B, 66B and 175B on ShareGPT and Alpaca
    assert {c.baseline for c in paper_headline().claims} >= {"Orca (Oracle)", "Orca (Max)"}
