"""Fit each cost term's coefficients on its measurements, and validate on held-out points.

Form (``pagesim.simulator.costmodel.profile``)::

    time_s = const_s + max(s_per_byte * bytes, s_per_flop * flops) + sum_x s_per_x * x

with x in the term's :data:`TERM_EXTRAS` (the features that vary independently of bytes in
the grid; the others would be collinear with bytes and are left at 0).

Method: relative least squares (each row divided by its measured time, so that a 10 us
and a 10 ms kernel weigh the same) under nonnegativity (:func:`~pagesim.calibrate.nnls.nnls`,
so every coefficient stays physical). The max() is resolved by its regimes: a point is
memory-bound when its arithmetic intensity flops/bytes is below a threshold, so each
candidate threshold (the midpoints between the sorted intensities, plus all-memory and
all-compute) gives a linear problem; the best one by the true (max) model's error is then
refined by reassigning each point to the larger of its two roofline terms until the
error stops falling. A roofline coefficient whose removal changes no training prediction by
more than 1% (decode attention is never compute-bound) is not identified by the data and
is written as 0; so is the compute side when a memory-only fit is within 10% of the
best fit's squared error (decode attention's intensity is near 1 FLOP/byte, where the
two sides cannot be told apart). 20% of the points (seeded) are held out of the fit and give the
held-out MAPE and worst relative error written to the profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.calibrate.nnls import nnls_relative
from pagesim.errors import DataError
from pagesim.simulator.costmodel.profile import TERM_NAMES, Term
from pagesim.simulator.costmodel.serving import RESIDUAL_QUANTILES

HOLDOUT_FRACTION = 0.2
MIN_POINTS_FOR_HOLDOUT = 5
MAX_THRESHOLDS = 48
UNBOUND_REL_CHANGE = 0.01
PARSIMONY = 1.1

TERM_EXTRAS: dict[str, tuple[str, ...]] = {
    "gemm": (),
    "prefill_attention": ("seqs", "tokens"),  # per query token: softmax rows, Q/O traffic
    "paged_decode_attention": ("blocks", "seqs"),
    "contiguous_decode_attention": ("seqs",),
    "kv_write": (),
    "block_copy": ("blocks",),
    "swap": ("blocks",),
    "step_overhead": ("seqs",),  # per-step CPU work vs batch size (``calibrate import``)
    "pointwise": (),
    # whole steps (``calibrate import --splitwise``): per-step work, all-reduces, element-wise
    "prefill_iteration": ("seqs", "tokens"),
    "decode_iteration": ("seqs", "tokens"),
}


@dataclass(frozen=True)
class TermFit:
    term: str
    coefficients: dict[str, float]
    measured_s: np.ndarray
    predicted_s: np.ndarray
    is_heldout: np.ndarray

    @property
    def num_points(self) -> int:
        return len(self.measured_s)

    def _rel_err(self, mask: np.ndarray) -> np.ndarray:
        return np.abs(self.predicted_s[mask] - self.measured_s[mask]) / self.measured_s[mask]

    @property
    def heldout_mape(self) -> float | None:
        return float(self._rel_err(self.is_heldout).mean()) if self.is_heldout.any() else None

    @property
    def heldout_max_err(self) -> float | None:
        return float(self._rel_err(self.is_heldout).max()) if self.is_heldout.any() else None

    @property
    def train_mape(self) -> float:
        return float(self._rel_err(~self.is_heldout).mean())

    @property
    def heldout_residual_quantiles(self) -> tuple[float, ...] | None:
        """predicted / measured - 1 on the held-out points, at RESIDUAL_QUANTILES."""
        if not self.is_heldout.any():
            return None
        m = self.is_heldout
        signed = self.predicted_s[m] / self.measured_s[m] - 1.0
        return tuple(float(q) for q in np.quantile(signed, RESIDUAL_QUANTILES))

    def to_term(self, origin: str = "") -> Term:
        return Term(
            dict(self.coefficients),
            self.heldout_mape,
            self.heldout_max_err,
            self.num_points,
            origin,
            self.heldout_residual_quantiles,
        )


def predict(coefficients: dict[str, float], feats: dict[str, np.ndarray]) -> np.ndarray:
    c = coefficients.get
    out = c("const_s", 0.0) + np.maximum(
        c("s_per_byte", 0.0) * feats["bytes"], c("s_per_flop", 0.0) * feats["flops"]
    )
    for name in ("blocks", "seqs", "tokens"):
        out = out + c(f"s_per_{name[:-1]}", 0.0) * feats[name]
    return out


def _solve(feats, y, extras, is_memory) -> dict[str, float]:
    cols = {"const_s": np.ones_like(y)}
    if feats["bytes"].any():
        cols["s_per_byte"] = feats["bytes"] * is_memory
    if feats["flops"].any():
        cols["s_per_flop"] = feats["flops"] * ~is_memory
    for name in extras:
        # a feature equal to one already in (a decode step's tokens are its sequences) is
        # left out: two equal columns would split their coefficient by rounding noise, and
        # which one the fit keeps would differ by machine
        if feats[name].any() and not any(np.array_equal(feats[name], c) for c in cols.values()):
            cols[f"s_per_{name[:-1]}"] = feats[name]
    x = nnls_relative(np.column_stack(list(cols.values())), y)
    return {name: float(v) for name, v in zip(cols, x, strict=True)}


def _loss(coefficients, feats, y) -> float:
    return float(np.mean((predict(coefficients, feats) / y - 1.0) ** 2))


def fit_coefficients(
    feats: dict[str, np.ndarray], y: np.ndarray, extras: tuple[str, ...]
) -> dict[str, float]:
    """Nonnegative roofline-plus-linear coefficients for measured times ``y`` (see module doc)."""
    intensity = np.divide(
        feats["flops"], feats["bytes"], out=np.zeros_like(y), where=feats["bytes"] > 0
    )
    levels = np.unique(intensity)
    mids = (levels[1:] + levels[:-1]) / 2
    if len(mids) > MAX_THRESHOLDS:
        mids = mids[np.linspace(0, len(mids) - 1, MAX_THRESHOLDS).round().astype(int)]
    best, best_loss = None, np.inf
    for t in (np.inf, *mids[::-1], -np.inf):  # ties keep the memory-bound reading
        coefs = _solve(feats, y, extras, intensity < t)
        loss = _loss(coefs, feats, y)
        if loss < best_loss:
            best, best_loss = coefs, loss
    for _ in range(10):
        is_memory = (
            best.get("s_per_byte", 0.0) * feats["bytes"]
            >= best.get("s_per_flop", 0.0) * feats["flops"]
        )
        coefs = _solve(feats, y, extras, is_memory)
        loss = _loss(coefs, feats, y)
        if loss >= best_loss * (1 - 1e-9):
            break
        best, best_loss = coefs, loss
    memory_only = _solve(feats, y, extras, np.ones_like(y, dtype=bool))
    if _loss(memory_only, feats, y) <= PARSIMONY * best_loss:
        best = memory_only
    return _drop_unbound_roofline(best, feats)


def _drop_unbound_roofline(
    coefs: dict[str, float], feats: dict[str, np.ndarray]
) -> dict[str, float]:
    """Drop a roofline coefficient that changes no prediction by more than 1%.

    Such a coefficient binds on no point (or only within noise): the data do not identify
    it, and a fitted value would be an artefact (decode attention is never compute-bound).
    """
    full = predict(coefs, feats)
    out = dict(coefs)
    for name in ("s_per_flop", "s_per_byte"):
        if name in out:
            trial = {k: v for k, v in out.items() if k != name}
            if np.max(np.abs(predict(trial, feats) - full) / full) < UNBOUND_REL_CHANGE:
                out = trial
    return {k: v for k, v in out.items() if v > 0 or k == "const_s"}


def _features(df: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        name: df[name].to_numpy(dtype=float)
        for name in ("bytes", "flops", "blocks", "seqs", "tokens")
    }


def fit_term(
    term: str, df: pd.DataFrame, rng: np.random.Generator, extras: tuple[str, ...] | None = None
) -> TermFit:
    """Fit one term on its rows of the measurements (20% held out, chosen by ``rng``).

    ``extras`` replaces the term's :data:`TERM_EXTRAS` when the data cannot separate one of
    them from bytes (e.g. per-block cost in a table with a single block size).
    """
    if term not in TERM_EXTRAS:
        raise DataError(f"measurements: unknown term {term!r}; known terms: {list(TERM_NAMES)}")
    if len(df) == 0:
        raise DataError(f"measurements: no rows for term {term!r}")
    y = df["median_s"].to_numpy(dtype=float)
    feats = _features(df)
    is_heldout = np.zeros(len(df), dtype=bool)
    if len(df) >= MIN_POINTS_FOR_HOLDOUT:
        is_heldout[rng.permutation(len(df))[: max(1, round(HOLDOUT_FRACTION * len(df)))]] = True
    train = {k: v[~is_heldout] for k, v in feats.items()}
    coefs = fit_coefficients(train, y[~is_heldout], TERM_EXTRAS[term] if extras is None else extras)
    return TermFit(term, coefs, y, predict(coefs, feats), is_heldout)


def fit_all(
    df: pd.DataFrame,
    rng: np.random.Generator,
    extras: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, TermFit]:
    """Fit every term present in ``df``, in TERM_NAMES order (so ``rng`` use is deterministic).

    ``extras`` overrides :data:`TERM_EXTRAS` per term (see :func:`fit_term`).
    """
    extras = extras or {}
    unknown = sorted(set(df["term"]) - set(TERM_NAMES))
    if unknown:
        raise DataError(
            f"measurements: unknown term {unknown[0]!r}; known terms: {list(TERM_NAMES)}"
        )
    return {
        t: fit_term(t, df[df["term"] == t], rng, extras.get(t))
        for t in TERM_NAMES
        if (df["term"] == t).any()
    }
