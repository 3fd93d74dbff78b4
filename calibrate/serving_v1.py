"""Fitting a profile's serving path on a vLLM V1 server's records, on the batches of its
recorded-steps replay.

Scenario: a V1 server (a step decodes one token of every running request and spends the
rest of its token budget on prompt chunks) served a run whose per-request records give
each request's arrival, prompt and output lengths, first-token and last-token times. The
v0 reconstruction of :mod:`.serving` does not hold (its steps either prefill or decode);
what does is the run's **recorded-steps replay** (:mod:`.step_times`,
``simulator/costmodel/recorded.py``): the run replayed with every step lasting what the
server's steps lasted at that moment, a kernel profile pricing each step beside
(``RecordedStepCosts.log``: each step's start, its kernel price, its sequences, their
context tokens and the prompt tokens it computes). Its batches are pagesim's scheduler's,
on the real run's clock.

**Decode time given the replayed batches.** Request i (output o_i >= 2) sat in o_i − 1 steps
between its first and its last token, one token each. With the replay's steps that start
inside its real decode window ``[first_i, last_i)``, its decode time is predicted as::

    (o_i − 1) x mean over those steps of (kernel price + serving(step))
    serving(step) = const_s + s_per_seq x sequences + s_per_context_token x context tokens
                    + s_per_prefill_token x prompt tokens computed

(``simulator/costmodel/serving.py``'s rule, the section any profile carries). The means
do not depend on the coefficients, so the prediction is linear in them: each form of
:data:`~pagesim.simulator.costmodel.serving.SERVING_FORMS` (plus ``s_per_prefill_token``,
since a V1 step carries prompt chunks beside its decodes) is fitted by nonnegative least
squares (:func:`~pagesim.calibrate.nnls.nnls`) on each request's relative error. The form
is chosen on the fit requests alone, by two-fold cross-validation (alternate requests),
the RMS error; a form with more coefficients must win by ``selection_margin``
(:func:`~pagesim.calibrate.serving.choose_form`, the v0 fit's rule).

**Front-end delay** (issue → the scheduler sees the request), where the records time TTFT
at the client (``vllm bench serve``): the delay at which the run replayed under the kernels
plus the fitted step cost, its arrivals delayed so, has the measured median TTFT over the
requests that queued least (the lowest quarter of measured TTFTs; :func:`frontend_delay_s`,
floored at 0). On a run pagesim made with a 12 ms delay it gives 13 ms; the median over
every request, 23 ms (the fitted step cost's small error, amplified by queueing). Records that count TTFT from the engine's own queue (LLMServingSim's vLLM 0.19 runs)
hold no front-end time: 0.

Limits, said where results are printed: the batches are pagesim's scheduler's, not the
server's (their error is the ``recorded-steps`` replay's); a request preempted and
recomputed sat in more steps than it has tokens; the serving path absorbs whatever the
kernel profile misses on that server (mixed steps' attention, the TP all-reduce), not only
host work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import PurePath

import numpy as np
import pandas as pd

from pagesim.calibrate.nnls import nnls
from pagesim.calibrate.serving import Coefficients, FormFit, ServingFit, choose_form
from pagesim.errors import DataError
from pagesim.records.run import MeasuredRun
from pagesim.simulator.costmodel.recorded import LOG_COLUMNS
from pagesim.simulator.costmodel.serving import SERVING_FORMS, ServingPath

#: the per-step coefficients' units in the solver (s): ms, ms, µs, µs
UNITS = {
    "const_s": 1e-3,
    "s_per_seq": 1e-3,
    "s_per_context_token": 1e-6,
    "s_per_prefill_token": 1e-6,
}
#: the front-end delay is fitted on the requests whose measured TTFT is in this lowest
#: quantile (:func:`frontend_delay_s`)
LIGHT_QUANTILE = 0.25
_COLUMN = {
    "price": LOG_COLUMNS.index("shadow_s"),
    "s_per_seq": LOG_COLUMNS.index("num_seqs"),
    "s_per_context_token": LOG_COLUMNS.index("context_tokens"),
    "s_per_prefill_token": LOG_COLUMNS.index("prefill_tokens"),
}


@dataclass(frozen=True)
class Windows:
    """Per request the fit can use (two or more output tokens, at least one replayed step
    starting in its decode window): the means of the replay's steps in its window."""

    #: its row in the run's table
    row: np.ndarray
    #: output − 1: the steps it sat in
    steps: np.ndarray
    measured_s: np.ndarray
    #: mean per step in the window: the kernel price (s), and each coefficient's feature
    #: (1, sequences, context tokens, prompt tokens computed)
    price_s: np.ndarray
    features: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.row)


def windows(run: MeasuredRun, log: np.ndarray) -> Windows:
    """Each request's decode window over ``log`` (``RecordedStepCosts.log`` of the run's
    recorded-steps replay, priced by a shadow cost model; module docstring)."""
    if log.ndim != 2 or log.shape[1] != len(LOG_COLUMNS) or not len(log):
        raise DataError(f"run {run.name}: the recorded-steps replay logged no steps")
    if np.isnan(log[:, _COLUMN["price"]]).any():
        raise DataError(f"run {run.name}: the recorded-steps replay was not priced (no shadow)")
    run.require_served("the decode windows of the serving fit")
    t = run.table
    out = t["output_len"].to_numpy(dtype=np.int64)
    first = t["first_token_s"].to_numpy(dtype=float)
    last = t["finish_s"].to_numpy(dtype=float)
    order = np.argsort(log[:, 0], kind="stable")
    start = log[order, 0]
    lo = np.searchsorted(start, first, side="left")
    hi = np.searchsorted(start, last, side="left")
    count = hi - lo
    keep = (out > 1) & (last > first) & (count > 0)
    lo, hi, count = lo[keep], hi[keep], count[keep]

    def mean(col: np.ndarray) -> np.ndarray:
        cum = np.concatenate([[0.0], np.cumsum(col[order])])
        return (cum[hi] - cum[lo]) / count

    ones = np.ones(len(lo))
    return Windows(
        row=np.flatnonzero(keep),
        steps=(out[keep] - 1).astype(float),
        measured_s=last[keep] - first[keep],
        price_s=mean(log[:, _COLUMN["price"]]),
        features={
            "const_s": ones,
            **{
                k: mean(log[:, _COLUMN[k]])
                for k in ("s_per_seq", "s_per_context_token", "s_per_prefill_token")
            },
        },
    )


def _names(form: str) -> tuple[str, ...]:
    return (*SERVING_FORMS[form], "s_per_prefill_token")


def predicted_decode_s(w: Windows, coefficients: dict[str, float]) -> np.ndarray:
    """Each request's decode time given the replayed batches (module docstring)."""
    serving = sum(v * w.features[k] for k, v in coefficients.items() if k in w.features)
    return w.steps * (w.price_s + serving)


def _fit_coefficients(w: Windows, form: str, mask: np.ndarray) -> dict[str, float]:
    names = _names(form)
    units = np.array([UNITS[n] for n in names])
    scale = (w.steps / w.measured_s)[mask]
    a = scale[:, None] * np.column_stack([w.features[n][mask] for n in names]) * units
    b = 1.0 - scale * w.price_s[mask]
    x = nnls(a, b)
    return {n: float(v) for n, v in zip(names, x * units, strict=True)}


def _rel(w: Windows, coefficients: dict[str, float], mask: np.ndarray) -> np.ndarray:
    return predicted_decode_s(w, coefficients)[mask] / w.measured_s[mask] - 1.0


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x**2))) if len(x) else float("nan")


def fit_form(w: Windows, form: str, fit: np.ndarray, frontend_delay_s: float = 0.0) -> FormFit:
    """``form`` fitted on the requests ``fit`` selects, and cross-validated on them."""
    coefs = _fit_coefficients(w, form, fit)
    rows = np.flatnonzero(fit)
    cv = []
    for h in (0, 1):
        half = np.zeros(len(w), dtype=bool)
        half[rows[h::2]] = True
        other = fit & ~half
        cv.append(_rel(w, _fit_coefficients(w, form, half), other))
    residuals = _rel(w, coefs, fit)
    prefill = coefs.pop("s_per_prefill_token")
    return FormFit(
        form=form,
        coefs=Coefficients(coefs, prefill, frontend_delay_s),
        decode_rms=_rms(residuals),
        ttft_rms=float("nan"),
        cv_decode_rms=_rms(np.concatenate(cv)),
        decode_residuals=residuals,
        ttft_residuals=np.array([]),
        num_requests=int(fit.sum()),
    )


def frontend_delay_s(
    replay_ttft_s: Callable[[float], np.ndarray],
    measured_ttft_s: np.ndarray,
    *,
    quantile: float = LIGHT_QUANTILE,
    iterations: int = 12,
) -> float:
    """The front-end delay f at which the run, replayed with its arrivals reaching the
    scheduler f later (``replay_ttft_s(f)``: its TTFTs in the records' row order, under the
    kernels plus the fitted step cost), has median(measured − replayed TTFT) = 0 over the
    requests whose measured TTFT is in its lowest ``quantile`` (those that queued least,
    so whose TTFT the step cost's own error moves least): bisection between 0 and their
    median measured TTFT (0 where the replay without a delay is already as slow).

    Not read off the recorded-steps replay: there a request's first step lasts whatever
    real step was in progress at that moment, often a decode-only one shorter than the
    step that carried its prompt, and a request that reaches the scheduler a little earlier
    can join a whole step sooner."""
    measured = np.asarray(measured_ttft_s, dtype=float)
    ok = np.isfinite(measured)
    light = ok & (measured <= np.quantile(measured[ok], quantile))

    def gap(f: float) -> float:
        d = (measured - np.asarray(replay_ttft_s(f), dtype=float))[light]
        return float(np.median(d[np.isfinite(d)]))

    lo, hi = 0.0, float(np.median(measured[light]))
    if gap(lo) <= 0.0:
        return 0.0
    if gap(hi) > 0.0:
        return hi
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0.0 else (lo, mid)
    return (lo + hi) / 2


def fit_serving_v1(
    run: MeasuredRun,
    log: np.ndarray,
    *,
    fit_rows: np.ndarray | None = None,
    forms: list[str] | None = None,
    selection_margin: float = 0.005,
    frontend_delay: float = 0.0,
) -> tuple[ServingFit, Windows]:
    """Every form fitted on ``run``'s requests ``fit_rows`` (row indices of its table; all
    by default) over its recorded-steps replay's ``log``, the headline one chosen."""
    fit, windows_of = fit_serving_v1_runs(
        [(run, log, fit_rows)],
        forms=forms,
        selection_margin=selection_margin,
        frontend_delay=frontend_delay,
    )
    return fit, windows_of[0]


def fit_serving_v1_runs(
    runs: list[tuple[MeasuredRun, np.ndarray, np.ndarray | None]],
    *,
    forms: list[str] | None = None,
    selection_margin: float = 0.005,
    frontend_delay: float = 0.0,
) -> tuple[ServingFit, list[Windows]]:
    """Every form fitted on the requests of several runs together (each ``(run, its
    recorded-steps replay's log, its fit rows or None for all)``), the headline one chosen;
    each run's windows."""
    each = [windows(run, log) for run, log, _ in runs]
    masks = []
    for (run, _, rows), w in zip(runs, each, strict=True):
        rows = np.arange(run.num_requests) if rows is None else np.asarray(rows)
        masks.append(np.isin(w.row, rows))
    w = Windows(
        row=np.concatenate([x.row for x in each]),
        steps=np.concatenate([x.steps for x in each]),
        measured_s=np.concatenate([x.measured_s for x in each]),
        price_s=np.concatenate([x.price_s for x in each]),
        features={k: np.concatenate([x.features[k] for x in each]) for k in each[0].features},
    )
    fit = np.concatenate(masks)
    if fit.sum() < 4:
        names = ", ".join(run.name for run, _, _ in runs)
        raise DataError(
            f"run {names}: {int(fit.sum())} requests to fit the serving path on (it needs "
            "requests with two or more output tokens whose decode the replay covers)"
        )
    fits = [fit_form(w, form, fit, frontend_delay) for form in (forms or list(SERVING_FORMS))]
    sources = tuple(
        {"file": PurePath(path).name, "repository": "", "commit": "", "sha256": sha}
        for run, _, _ in runs
        for path, sha in run.sources
    )
    named = []
    for run, _, rows in runs:
        name = ", ".join(PurePath(path).name for path, _ in run.sources) or run.name
        if rows is not None:
            name += f" (requests {describe_rows(np.asarray(rows))})"
        named.append(name)
    return ServingFit(fits, choose_form(fits, selection_margin), "; ".join(named), sources), each


def fit_serving_v1_timed(
    runs: list[tuple[MeasuredRun, np.ndarray, np.ndarray | None]],
    replay_ttft_s: Callable[[ServingPath], np.ndarray],
    measured_ttft_s: np.ndarray,
    **kw,
) -> tuple[ServingFit, list[Windows], float]:
    """The fit of :func:`fit_serving_v1_runs` with the front-end delay of client-timed
    records (module docstring): the step coefficients first (they do not depend on the
    delay), then the delay at which ``replay_ttft_s(serving path)`` (the runs replayed closed
    loop under the kernels plus that path: their TTFTs, in the order of ``measured_ttft_s``;
    NaN where a request is not to count) meets the measured TTFTs
    (:func:`frontend_delay_s`), then every form again with it. Also the delay."""
    steps_only, _ = fit_serving_v1_runs(runs, **kw)
    path = steps_only.serving_path()
    delay = frontend_delay_s(
        lambda f: replay_ttft_s(replace(path, frontend_delay_s=f)), measured_ttft_s
    )
    fit, each = fit_serving_v1_runs(runs, frontend_delay=delay, **kw)
    return fit, each, delay


def describe_rows(rows: np.ndarray) -> str:
    """Row indices as 1-based ranges ('1-150', '1-10, 21-30')."""
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    if not len(rows):
        return "none"
    breaks = np.flatnonzero(np.diff(rows) != 1)
    starts = np.concatenate([[rows[0]], rows[breaks + 1]])
    ends = np.concatenate([rows[breaks], [rows[-1]]])
    return ", ".join(
        f"{s + 1}-{e + 1}" if e > s else f"{s + 1}" for s, e in zip(starts, ends, strict=True)
    )


def decode_errors(w: Windows, coefficients: dict[str, float], mask: np.ndarray) -> dict[str, float]:
    """Errors of the mean and the median decode time of the requests ``mask`` selects."""
    pred = predicted_decode_s(w, coefficients)[mask]
    meas = w.measured_s[mask]
    return {
        "mean": float(pred.mean() / meas.mean() - 1.0),
        "p50": float(np.median(pred) / np.median(meas) - 1.0),
        "requests": int(mask.sum()),
    }


def all_coefficients(fit: FormFit) -> dict[str, float]:
    """A fitted form's per-step coefficients, ``s_per_prefill_token`` included."""
    return {**fit.coefs.step, "s_per_prefill_token": fit.coefs.s_per_prefill_token}


def table(fit: ServingFit) -> pd.DataFrame:
    """One row per form (as :meth:`ServingFit.table`, without the TTFT column)."""
    return fit.table().drop(columns=["ttft_rms"])


def form_lines(fit: ServingFit) -> list[str]:
    """A Markdown table of every form fitted: coefficients, fit and cross-validated errors."""
    lines = [
        "| form | chosen | ms per step | ms per sequence | µs per context token | µs per prefill token | decode RMS | decode RMS, 2-fold CV |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table(fit).to_dict("records"):
        lines.append(
            f"| {r['form']} | {'**yes**' if r['chosen'] else 'no'} | {r['const_ms']:.3f} | "
            f"{r['per_seq_ms']:.3f} | {r['per_context_token_us']:.3f} | "
            f"{r['per_prefill_token_us']:.3f} | {r['decode_rms']:.2%} | {r['decode_cv_rms']:.2%} |"
        )
    return lines
