"""Spread of a cost model: one run's draw of how wrong each fitted term may be.

An interval around a prediction (``docs/intervals.md``) replays a run several times; in
each replicate the cost model is perturbed by multipliers drawn once for the whole run (a
kernel that is slow is slow all run, so the residuals must not average out over steps):

- ``cost``: one multiplier per kernel term that keeps its held-out residuals
  (``Term.heldout_residual_quantiles``, predicted / measured - 1 on points the fit did not
  see): a residual ``r`` is drawn from them and the term's time is multiplied by
  ``1 / (1 + r)`` (what the measured time was, given the prediction). A term without
  residuals (the analytic profile's, a projected one's fill-ins) is not varied, and the
  spread says so.
- ``serving``: one multiplier on the serving path's step cost from its decode-time fit
  residuals, and one on its front-end delay from its TTFT fit residuals, the same way.

A residual is drawn from its quantiles by inverse-CDF interpolation: uniform ``u`` in
[0, 1], linear between the quantiles at ``RESIDUAL_QUANTILES`` and extended linearly past
the outer two (so a few draws fall outside the 5-95% range). Deterministic: the draws come
from the generator given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pagesim.simulator.costmodel.profile import Profile
from pagesim.simulator.costmodel.serving import RESIDUAL_QUANTILES

SPREAD_SOURCES = ("seeds", "cost", "serving")


def draw_residual(quantiles: tuple[float, ...], u: float) -> float:
    """The residual at probability ``u`` (module docstring: inverse CDF from the quantiles)."""
    p = np.asarray(RESIDUAL_QUANTILES)
    q = np.asarray(quantiles, dtype=float)
    if u < p[0]:
        return float(q[0] - (p[0] - u) * (q[1] - q[0]) / (p[1] - p[0]))
    if u > p[-1]:
        return float(q[-1] + (u - p[-1]) * (q[-1] - q[-2]) / (p[-1] - p[-2]))
    return float(np.interp(u, p, q))


def _multiplier(quantiles: tuple[float, ...], u: float) -> float:
    r = draw_residual(quantiles, u)
    return 1.0 / max(1.0 + r, 0.05)  # a residual of -95% or less would mean a 20x slower term


@dataclass(frozen=True)
class SpreadDraw:
    """One replicate's multipliers, by term (and ``serving_step``, ``frontend_delay``)."""

    multipliers: dict[str, float]
    #: terms that keep no residuals, so are not varied
    fixed_terms: tuple[str, ...] = ()


def draw(profile: Profile, sources: tuple[str, ...], rng: np.random.Generator) -> SpreadDraw:
    """This replicate's multipliers for ``profile`` (terms in name order, then the serving
    path), one uniform per varied quantity."""
    out: dict[str, float] = {}
    fixed = []
    if "cost" in sources:
        for name in sorted(profile.terms):
            term = profile.terms[name]
            if term.heldout_residual_quantiles is None:
                fixed.append(name)
                continue
            out[name] = _multiplier(term.heldout_residual_quantiles, float(rng.random()))
    serving = profile.serving
    if "serving" in sources and serving is not None:
        for key, quantity in (("decode_time", "serving_step"), ("ttft", "frontend_delay")):
            quantiles = serving.residual_quantiles.get(key)
            if quantiles is not None:
                out[quantity] = _multiplier(quantiles, float(rng.random()))
    return SpreadDraw(out, tuple(fixed))


def apply(profile: Profile, spread: SpreadDraw) -> Profile:
    """``profile`` with every varied term's coefficients (so its time) multiplied."""
    m = spread.multipliers
    terms = {
        name: replace(term, coefficients={k: v * m[name] for k, v in term.coefficients.items()})
        if name in m
        else term
        for name, term in profile.terms.items()
    }
    serving = profile.serving
    if serving is not None and ("serving_step" in m or "frontend_delay" in m):
        step = m.get("serving_step", 1.0)
        serving = replace(
            serving,
            coefficients={k: v * step for k, v in serving.coefficients.items()},
            frontend_delay_s=serving.frontend_delay_s * m.get("frontend_delay", 1.0),
        )
    return profile.with_terms(terms=terms, serving=serving)
