"""SLOs, and whether a rate meets them on its requests.

``--slo ttft_p99=500ms,tpot_p99=50ms``: each item bounds a statistic of every request's
latency, with vLLM's definitions (``simulator/vllm_metrics.py``): ``ttft``, ``tpot`` (the
requests of more than one output token), ``e2el``, and ``itl`` (every gap between two
output tokens), at a percentile ``p50``, ``p90``, ``p99`` (any ``p<q>``; numpy's linear
percentile, as vLLM's); values in ``ms`` or ``s``.

``--goodput 0.9 --slo ttft=500ms,tpot=50ms``: goodput as ``vllm bench serve --goodput``
defines it: a request is good when its TTFT, TPOT (0 for a one-token output) and E2EL are
each within the bounds given (``ttft``, ``tpot``, ``e2el``; vLLM's goodput takes no ITL);
the rate passes when at least that fraction of its requests is good.

How a rate is judged over several seeds (replicates: the same mix, other Poisson draws):
the requests of every seed are pooled and each statistic computed once on the pool; a
request the server did not finish (rejected, or still running when the run stopped) counts
as infinitely late, so it fails every bound. The ITL gaps are pooled within a run but a
run's result keeps only their statistics (``p<q>_itl_ms``), not the gaps: over seeds the
ITL statistic is the largest of the seeds' (the rate passes only if every seed does).
Each statistic's spread across seeds (every seed's own value) is reported beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.errors import ConfigError

LATENCIES = ("ttft", "tpot", "itl", "e2el")
GOODPUT_BOUNDS = ("ttft", "tpot", "e2el")
#: the per-request table's column of each latency (seconds)
COLUMN = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}

_KEY = re.compile(r"^(ttft|tpot|itl|e2el)(?:_p(\d+(?:\.\d+)?))?$")
_VALUE = re.compile(r"^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(ms|s)$")


@dataclass(frozen=True)
class Bound:
    """One SLO item: ``metric`` at percentile ``q`` (None: a per-request bound, for
    goodput) at most ``bound_ms``."""

    metric: str
    q: float | None
    bound_ms: float

    @property
    def stat(self) -> str:
        return "each" if self.q is None else f"p{self.q:g}"

    @property
    def name(self) -> str:
        return self.metric if self.q is None else f"{self.metric}_p{self.q:g}"

    def text(self) -> str:
        return f"{self.metric.upper()} {self.stat} <= {self.bound_ms:g} ms"


@dataclass(frozen=True)
class Slo:
    """The bounds, and the goodput fraction when the SLO is goodput's."""

    bounds: tuple[Bound, ...]
    goodput: float | None = None

    def text(self) -> str:
        items = ", ".join(b.text() for b in self.bounds)
        if self.goodput is None:
            return items
        return f"at least {self.goodput:.0%} of requests with {items} (vLLM's goodput)"

    @property
    def statistics(self) -> list[str]:
        """The statistics a rate is judged on: each bound's, or goodput's fraction."""
        return ["goodput"] if self.goodput is not None else [b.name for b in self.bounds]


def parse_slo(text: str, goodput: float | None = None) -> Slo:
    """``--slo`` and ``--goodput`` (module docstring), or a one-line ConfigError."""
    if goodput is not None and not 0 < goodput <= 1:
        raise ConfigError(f"--goodput {goodput}: a fraction of requests in (0, 1], e.g. 0.9")
    items = [item.strip() for item in (text or "").split(",") if item.strip()]
    if not items:
        raise ConfigError("--slo: give at least one bound, e.g. --slo ttft_p99=500ms")
    bounds = []
    for item in items:
        key, sep, value = item.partition("=")
        match = _KEY.match(key.strip().lower())
        if not sep or match is None:
            raise ConfigError(
                f"--slo {item!r}: expected METRIC_pQ=VALUE (METRIC one of {', '.join(LATENCIES)}; "
                "e.g. ttft_p99=500ms), or METRIC=VALUE with --goodput"
            )
        metric, q = match.group(1), match.group(2)
        found = _VALUE.match(value.strip().lower())
        if found is None:
            raise ConfigError(f"--slo {item!r}: the value needs a unit, ms or s (e.g. 500ms, 1s)")
        bound_ms = float(found.group(1)) * (1e3 if found.group(2) == "s" else 1.0)
        if not np.isfinite(bound_ms) or bound_ms <= 0:
            raise ConfigError(f"--slo {item!r}: the bound must be a positive time")
        if goodput is None and q is None:
            raise ConfigError(
                f"--slo {item!r}: a bound on every request is goodput's: add --goodput F, or "
                f"bound a percentile ({metric}_p99=...)"
            )
        if goodput is not None and q is not None:
            raise ConfigError(
                f"--slo {item!r}: with --goodput each bound is on every request ({metric}=...)"
            )
        if q is not None and not 0 < float(q) < 100:
            raise ConfigError(f"--slo {item!r}: the percentile must be between 0 and 100")
        if goodput is not None and metric not in GOODPUT_BOUNDS:
            raise ConfigError(f"--slo {item!r}: vLLM's goodput bounds {', '.join(GOODPUT_BOUNDS)}")
        bounds.append(Bound(metric, None if q is None else float(q), bound_ms))
    names = [b.name for b in bounds]
    if len(set(names)) != len(names):
        raise ConfigError(f"--slo: a statistic is bounded twice ({', '.join(names)})")
    return Slo(tuple(bounds), goodput)


def percentiles_needed(slo: Slo) -> list[float]:
    """The percentiles a run must report (``metrics.percentiles``) for the ITL bounds."""
    return sorted({b.q for b in slo.bounds if b.q is not None} | {50.0, 90.0, 99.0})


def _latency_ms(requests: pd.DataFrame, metric: str) -> np.ndarray:
    """Each request's latency (ms), infinite for one not finished; TPOT only for outputs
    of more than one token."""
    done = (requests["status"] == "finished").to_numpy()
    values = requests[COLUMN[metric]].to_numpy(dtype=float) * 1e3
    values = np.where(done, values, np.inf)
    if metric == "tpot":
        values = values[(requests["output_len"].to_numpy() > 1) | ~done]
    return values


def _good(requests: pd.DataFrame, slo: Slo) -> np.ndarray:
    done = (requests["status"] == "finished").to_numpy()
    good = done.copy()
    multi = requests["output_len"].to_numpy() > 1
    for b in slo.bounds:
        values = requests[COLUMN[b.metric]].to_numpy(dtype=float) * 1e3
        if b.metric == "tpot":
            values = np.where(multi, values, 0.0)
        good &= np.where(done, values, np.inf) <= b.bound_ms
    return good


def statistic(slo: Slo, name: str, runs: list) -> float:
    """``name`` (one of ``slo.statistics``) over ``runs`` (RunResults of one rate, one per
    seed; one run: that seed's own value): the pooled value (module docstring)."""
    if name == "goodput":
        good = np.concatenate([_good(r.requests, slo) for r in runs])
        return float(good.mean()) if len(good) else float("nan")
    bound = next(b for b in slo.bounds if b.name == name)
    assert bound.q is not None
    if bound.metric == "itl":
        key = f"p{bound.q:g}_itl_ms"
        values = [float(r.summary.get(key, np.nan)) for r in runs]
        return float(np.max(values)) if values else float("nan")
    pooled = np.concatenate([_latency_ms(r.requests, bound.metric) for r in runs])
    if len(pooled) == 0:
        return float("nan")
    return (
        float(np.percentile(pooled, bound.q))
        if np.isfinite(pooled).all()
        else _inf_pct(pooled, bound.q)
    )


def _inf_pct(values: np.ndarray, q: float) -> float:
    """numpy's linear percentile with infinite values ranked last (np.percentile would
    give NaN between an infinite and a finite neighbour)."""
    ordered = np.sort(values)
    position = q / 100 * (len(ordered) - 1)
    low, high = int(np.floor(position)), int(np.ceil(position))
    if not np.isfinite(ordered[high]):
        return float("inf")
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def passes(slo: Slo, name: str, value: float) -> bool:
    """Whether ``value`` of statistic ``name`` meets the SLO."""
    if not np.isfinite(value) and name == "goodput":
        return False
    if name == "goodput":
        assert slo.goodput is not None
        return value >= slo.goodput
    bound = next(b for b in slo.bounds if b.name == name)
    return bool(value <= bound.bound_ms)


def bound_of(slo: Slo, name: str) -> float:
    """The line a chart draws for statistic ``name``: its bound (ms) or goodput's fraction."""
    if name == "goodput":
        assert slo.goodput is not None
        return slo.goodput
    return next(b for b in slo.bounds if b.name == name).bound_ms
