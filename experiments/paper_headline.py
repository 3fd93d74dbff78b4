"""The paper's headline claim, computed: the request rate each system sustains at the same
level of latency, per model and dataset, and vLLM's ratio over each baseline.

The paper's abstract claims 2-4x the throughput of FasterTransformer and Orca "with the
same level of latency"; §6.2 reads it off Figure 12 (normalized latency against request
rate): on ShareGPT vLLM sustains 1.7-2.7x the request rate of Orca (Oracle), 2.7-8x that of
Orca (Max) and up to 22x that of FasterTransformer. ``paper_targets.yaml`` gives each
Figure 12 panel's systems (``sustained``: its point labels) and, under ``headline``, the
bounds and the paper's claims. The rules, fixed before any ratio was computed:

- a panel's *unloaded latency* is the lowest normalized latency any of its systems shows;
- a *bound* is a multiple of it (``unloaded_factor``: latency has begun to rise) or a
  normalized latency in s/token (``s_per_tok``: the top of the paper's axes);
- a system's *sustained rate*: going up its rates, the first whose latency is over the
  bound and the rate where the straight line from the rate before it crosses the bound
  (linear interpolation); at least its highest rate (``≥``) if no rate is over the bound,
  below its lowest (``<``) if even that one is;
- vLLM's *ratio* over a baseline divides the two sustained rates and keeps the relation
  their bounds allow (``=``, ``≥``, ``≤``, or ``?`` when they allow nothing).

Nothing here reads the paper's numbers to decide anything: the claims are printed beside
the ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pydantic import Field, model_validator

from pagesim.experiments.mdtable import table
from pagesim.experiments.paper_checks import LATENCY, RATE
from pagesim.specbase import StrictSpec

#: What a sustained rate or a ratio is: the value itself, a lower or an upper bound of it,
#: or nothing (a ratio of two lower bounds).
EXACT, AT_LEAST, BELOW, AT_MOST, UNKNOWN = "=", "≥", "<", "≤", "?"


class SustainedSpec(StrictSpec):
    """One Figure 12 panel of the headline: the paper's subfigure (rows are sorted by it),
    its name, dataset and systems (point labels)."""

    subfigure: str
    panel: str
    dataset: str
    vllm: str
    baselines: dict[str, str] = Field(min_length=1)
    x: str = RATE
    metric: str = LATENCY


class Bound(StrictSpec):
    """A normalized-latency bound: ``unloaded_factor`` x the panel's unloaded latency, or
    ``s_per_tok`` (exactly one)."""

    name: str
    unloaded_factor: float | None = Field(default=None, gt=1)
    s_per_tok: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Bound:
        if (self.unloaded_factor is None) == (self.s_per_tok is None):
            raise ValueError("a bound gives exactly one of unloaded_factor and s_per_tok")
        return self

    def value(self, unloaded_s_per_tok: float) -> float:
        if self.s_per_tok is not None:
            return self.s_per_tok
        assert self.unloaded_factor is not None
        return self.unloaded_factor * unloaded_s_per_tok


class Claim(StrictSpec):
    """A ratio the paper states: vLLM over ``baseline`` on ``datasets``, in [low, high]
    (``low`` None: "up to high")."""

    source: str
    baseline: str
    datasets: list[str] = Field(min_length=1)
    low: float | None = None
    high: float


class HeadlineSpec(StrictSpec):
    source: str
    bounds: list[Bound] = Field(min_length=1)
    claims: list[Claim] = Field(default_factory=list)
    cause: str = ""


@dataclass(frozen=True)
class Sustained:
    """A sustained rate: ``rate`` with ``relation`` (EXACT, AT_LEAST or BELOW)."""

    rate: float
    relation: str

    def __str__(self) -> str:
        prefix = "" if self.relation == EXACT else f"{self.relation} "
        return f"{prefix}{self.rate:.3g}"


@dataclass(frozen=True)
class Ratio:
    value: float
    relation: str

    def __str__(self) -> str:
        if self.relation == UNKNOWN:
            return f"? ({self.value:.2f}x of two bounds the same way)"
        prefix = "" if self.relation == EXACT else f"{self.relation} "
        return f"{prefix}{self.value:.2f}x"


def sustained_rate(curve: pd.DataFrame, bound: float, x: str = RATE, metric: str = LATENCY
                   ) -> Sustained:  # fmt: skip
    """The rate ``curve`` (one system's points) sustains under ``bound`` (module docstring)."""
    curve = curve.sort_values(x)
    xs, ys = curve[x].astype(float).tolist(), curve[metric].astype(float).tolist()
    if not xs:
        raise ValueError("a sustained rate needs at least one point")
    for i, (rate, latency) in enumerate(zip(xs, ys, strict=True)):
        if latency <= bound:
            continue
        if i == 0:
            return Sustained(rate, BELOW)
        x0, y0 = xs[i - 1], ys[i - 1]
        return Sustained(x0 + (bound - y0) / (latency - y0) * (rate - x0), EXACT)
    return Sustained(xs[-1], AT_LEAST)


def ratio(vllm: Sustained, baseline: Sustained) -> Ratio:
    """vLLM's sustained rate over the baseline's, with the relation their bounds allow."""
    value = vllm.rate / baseline.rate
    up = vllm.relation == AT_LEAST or baseline.relation == BELOW
    down = vllm.relation == BELOW or baseline.relation == AT_LEAST
    if up and down:
        return Ratio(value, UNKNOWN)
    return Ratio(value, AT_LEAST if up else AT_MOST if down else EXACT)


@dataclass(frozen=True)
class PanelResult:
    """One panel under one bound: each system's sustained rate and vLLM's ratios."""

    subfigure: str
    name: str
    experiment: str
    dataset: str
    bound_s_per_tok: float
    rates: dict[str, Sustained]
    ratios: dict[str, Ratio]


def panel_result(spec: SustainedSpec, experiment: str, results: pd.DataFrame, bound: Bound
                 ) -> PanelResult:  # fmt: skip
    labels = results["label"].astype(str)
    systems = {"vLLM": spec.vllm, **spec.baselines}
    missing = [label for label in systems.values() if not (labels == label).any()]
    if missing:
        raise ValueError(f"{experiment}: no points labelled {missing} in the results")
    unloaded = float(results[labels.isin(list(systems.values()))][spec.metric].min())
    limit = bound.value(unloaded)
    rates = {
        name: sustained_rate(results[labels == label], limit, spec.x, spec.metric)
        for name, label in systems.items()
    }
    ratios = {name: ratio(rates["vLLM"], rates[name]) for name in spec.baselines}
    return PanelResult(spec.subfigure, spec.panel, experiment, spec.dataset, limit, rates, ratios)


def _fmt_claim(claim: Claim) -> str:
    low = f"{claim.low:g}-" if claim.low is not None else "up to "
    return f"{low}{claim.high:g}x"


def claim_holds(claim: Claim, found: Ratio) -> bool | None:
    """Whether ``found`` lies in the claim's range (None when its relation cannot say)."""
    low = claim.low if claim.low is not None else 1.0
    if found.relation == EXACT:
        return low <= found.value <= claim.high
    if found.relation == AT_LEAST:
        return False if found.value > claim.high else None
    if found.relation == AT_MOST:
        return False if found.value < low else None
    return None


def headline_lines(spec: HeadlineSpec, panels: list[tuple[str, SustainedSpec, pd.DataFrame]]
                   ) -> list[str]:  # fmt: skip
    """The report's headline section: per bound, a table of sustained rates and ratios,
    then the paper's claims beside pagesim's ratios, then the stated cause."""
    if not panels:
        return ["No experiment of this suite names a Figure 12 panel (`sustained`)."]
    panels = sorted(panels, key=lambda p: (p[1].subfigure, p[0]))
    baselines = list(dict.fromkeys(b for _, s, _ in panels for b in s.baselines))
    lines = [f"Source: {spec.source}.", ""]
    by_bound: dict[str, list[PanelResult]] = {}
    for bound in spec.bounds:
        results = [panel_result(s, name, r, bound) for name, s, r in panels]
        by_bound[bound.name] = results
        header = ["figure", "panel", "experiment", "bound (s/token)", "vLLM", *baselines]
        header += [f"vLLM ÷ {b}" for b in baselines]
        rows = []
        for p in results:
            row = [
                p.subfigure,
                p.name,
                p.experiment,
                f"{p.bound_s_per_tok:.3g}",
                str(p.rates["vLLM"]),
            ]
            row += [str(p.rates[b]) if b in p.rates else "-" for b in baselines]
            row += [str(p.ratios[b]) if b in p.ratios else "-" for b in baselines]
            rows.append(row)
        lines += [f"Sustained request rate (req/s) under {bound.name}:", ""]
        lines += table(header, rows) + [""]
    if spec.claims:
        header = ["the paper", "claim", *[f"pagesim, {name}" for name in by_bound]]
        rows = []
        for claim in spec.claims:
            row = [claim.source, f"vLLM ÷ {claim.baseline}, {', '.join(claim.datasets)}: "
                   f"{_fmt_claim(claim)}"]  # fmt: skip
            for results in by_bound.values():
                found = []
                for p in results:
                    if p.dataset in claim.datasets and claim.baseline in p.ratios:
                        r = p.ratios[claim.baseline]
                        verdict = {True: "in", False: "out", None: "undecided"}[
                            claim_holds(claim, r)
                        ]
                        found.append(f"{p.name} {r} ({verdict})")
                row.append("; ".join(found) or "-")
            rows.append(row)
        lines += ["The paper's claims beside these ratios:", ""] + table(header, rows)
    if spec.cause.strip():
        lines += ["", f"Why pagesim differs: {' '.join(spec.cause.split())}"]
    return lines
