"""Synthetic token lengths drawn from a :class:`LengthDist`, and the alpaca-like workload.

Rules (every draw from the one ``rng``; results are integers in ``[low, high]``):

- fixed: ``round(mean)`` for every request;
- uniform: integers in ``[low, high]`` inclusive;
- lognormal: ``exp(N(mu, sigma))`` with ``sigma^2 = ln(1 + cv^2)`` and
  ``mu = ln(mean) - sigma^2 / 2`` (so the unrounded mean is ``mean`` and the std is
  ``cv * mean``), rounded, then clipped;
- zipf: a bounded Zipf rank ``r`` in ``1..high`` with ``P(r) ~ r^-a``, scaled by
  ``mean / E[r]`` so the mean is ``mean`` before rounding and clipping.

Clipping to ``[low, high]`` moves the mean when much mass lies outside; pick the
bounds accordingly.

``alpaca-like`` is SYNTHETIC: the full Alpaca data is not shipped here, so it draws
lognormal lengths whose means are the paper's Alpaca means (19.31 prompt, 58.45
output tokens; PagedAttention, Kwon et al. SOSP 2023, §6.1) and whose spreads (cv)
are those of the GPT-2 token counts of the first 102 records of the Stanford Alpaca
data (``alpaca_data.json``, not shipped: the two cv values are the only numbers kept).
"""

from __future__ import annotations

import numpy as np

from pagesim.workloads.spec import LengthDist

ALPACA_LIKE_PROMPT = LengthDist(dist="lognormal", mean=19.31, cv=0.71, low=1, high=2048)
ALPACA_LIKE_OUTPUT = LengthDist(dist="lognormal", mean=58.45, cv=1.04, low=1, high=2048)


def sample_lengths(dist: LengthDist, num: int, rng: np.random.Generator) -> np.ndarray:
    """``num`` integer lengths from ``dist`` (see the module docstring for each rule)."""
    low, high = dist.low, max(dist.low, dist.high)
    if dist.dist == "fixed":
        values = np.full(num, float(round(dist.mean)))
    elif dist.dist == "uniform":
        return rng.integers(low, high + 1, size=num, dtype=np.int64)
    elif dist.dist == "lognormal":
        sigma2 = np.log1p(dist.cv**2)
        mu = np.log(dist.mean) - sigma2 / 2
        values = np.round(rng.lognormal(mu, np.sqrt(sigma2), size=num))
    else:
        ranks = np.arange(1, high + 1, dtype=np.float64)
        weights = ranks ** (-dist.a)
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        mean_rank = float((ranks * weights).sum() / weights.sum())
        drawn = np.searchsorted(cdf, rng.random(num), side="right") + 1
        values = np.round(drawn * (dist.mean / mean_rank))
    return np.clip(values, low, high).astype(np.int64)
