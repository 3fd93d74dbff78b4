"""Fitting a profile's serving path on a real server's per-request records, without simulating.

Scenario: a vLLM v0 server (a step either prefills the prompts it admits or decodes one
token of every running sequence) served a run whose per-request records give each
request's arrival, prompt and output lengths, first-token and last-token times
(:mod:`pagesim.records.run`). The GPU kernels' time of any step comes from a
kernel profile (``kernels``: a cost model without a serving path). What the server spent
beyond the kernels is read off the records:

1. **Prefill steps.** First tokens produced within :data:`CLUSTER_GAP_S` of each other
   came out of one prefill step (the records show such groups, their members a fraction
   of a millisecond apart, and groups tens of milliseconds apart: one step apart); the
   step's prompts are those requests', padded to the longest where the server padded
   (``padding``).
2. **Concurrency.** Request j decodes from its first token to its last; between two
   consecutive such events the running set is constant: ``n`` requests whose contexts
   (prompt + tokens generated, interpolated linearly in time between the first and the
   last token) sum to ``ctx``. Each of these segments has the kernels' decode step time
   for its state (``kernels.decode_time_fn``, the blocks ``sum(ceil(context / block))``).
3. **Decode time given the measured concurrency.** With step costs ``tau_d = kernels +
   serving(n, ctx)`` and prefill steps ``tau_p`` (each ending at its first tokens), the
   server makes ``busy / tau_d`` decode steps in a segment whose ``busy`` time is not
   taken by a prefill step. Request i's predicted decode time is the prefill steps' time
   in its life plus ``output − 1`` decode steps at the mean predicted step time of its
   life (busy time over predicted steps): the sum of the steps during its life. Beside
   the measured one (last − first token) it is what :func:`decode_time_errors` reports,
   for any run: the step cost's error with the scheduler taken out (the concurrency is
   the real one).
4. **TTFT given the measured state.** Request i reaches the scheduler at arrival +
   ``frontend_delay_s``; it waits for the step in flight (the rest of a prefill step of
   another group, else half a decode step of the state then, else nothing) and its own
   prefill step: ``f + wait + tau_p``. A request that queued longer (behind more than one
   other prefill step, or for memory) waits more than this says: the fit leaves such
   requests out (:func:`unqueued`); reports show every request.

The fit (:func:`fit_serving`), for each form of :data:`SERVING_FORMS` on the fit runs'
requests, minimises squared errors by bounded least squares (:mod:`.lsq`): the form's
per-step coefficients on decode times, each request's error relative to its own decode
time (3); then ``frontend_delay_s`` and ``s_per_prefill_token`` on TTFTs, each error
relative to the run's mean TTFT (4: a request's own wait is noise of the order of its
TTFT, and relative to each request's own value that noise biases the fit low); twice
over (each depends on the other through the prefill steps). Every form is reported; the headline
form is chosen on the fit runs alone, by two-fold cross-validation (requests alternately
in two halves: each half's fit predicts the other half's decode times), the RMS error;
a form with more coefficients must beat one with fewer by ``selection_margin``.

Limits, said where the results are printed: a V1 server (chunked prefill: steps mix
prefills and decodes) needs another reconstruction; a request preempted and recomputed
is counted as decoding throughout; the serving path absorbs whatever the kernel profile
misses on this server (e.g. an older attention kernel), not only host work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np
import pandas as pd

from pagesim.calibrate.lsq import least_squares
from pagesim.records.run import MeasuredRun
from pagesim.simulator.costmodel.serving import (
    RESIDUAL_QUANTILES,
    SERVING_FORMS,
    ServingPath,
)

#: first tokens closer than this came out of one prefill step (a decode step of the
#: servers this fits takes tens of milliseconds; one step's outputs, a fraction of one)
CLUSTER_GAP_S = 0.005
#: per-step coefficients' units in the solver (s): ms, ms, µs; prefill token: µs; delay: ms
_STEP_UNITS = {"const_s": 1e-3, "s_per_seq": 1e-3, "s_per_context_token": 1e-6}
_PREFILL_UNIT = 1e-6
_DELAY_UNIT = 1e-3


@dataclass
class Timeline:
    """One run's reconstruction (module docstring, 1-2): what no coefficient changes."""

    run: MeasuredRun
    #: per prefill step: its end (s), the kernels' time, sequences, context and computed tokens
    prefill_end_s: np.ndarray
    prefill_kernel_s: np.ndarray
    prefill_seqs: np.ndarray
    prefill_ctx: np.ndarray
    prefill_tokens: np.ndarray
    #: per request: the index of its prefill step
    cluster: np.ndarray
    #: decode segments: bounds (M + 1), and per segment the running requests, their
    #: context sum and the kernels' decode step time (M)
    bounds: np.ndarray
    seg_n: np.ndarray
    seg_ctx: np.ndarray
    seg_kernel_s: np.ndarray


def _clusters(first_token_s: np.ndarray) -> np.ndarray:
    order = np.argsort(first_token_s, kind="stable")
    gaps = np.diff(first_token_s[order]) > CLUSTER_GAP_S
    ids_sorted = np.concatenate([[0], np.cumsum(gaps)])
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = ids_sorted
    return ids


def reconstruct(
    run: MeasuredRun, kernels, *, block_size: int = 16, padding: bool = False
) -> Timeline:
    """The run's prefill steps and decode segments (module docstring, 1-2), with the
    kernels' time of each (``kernels``: ``step_time_s(plan)`` and ``decode_time_fn``)."""
    from pagesim.simulator.plan import BatchPlan

    run.require_served("the serving path's reconstruction of its steps")
    t = run.table
    ft = t["first_token_s"].to_numpy(dtype=float)
    fin = t["finish_s"].to_numpy(dtype=float)
    prompt = t["prompt_len"].to_numpy(dtype=np.int64)
    out = t["output_len"].to_numpy(dtype=np.int64)
    cluster = _clusters(ft)
    num_clusters = int(cluster.max()) + 1
    end = np.array([ft[cluster == k].min() for k in range(num_clusters)])
    kernel_p = np.empty(num_clusters)
    seqs = np.empty(num_clusters)
    ctx = np.empty(num_clusters)
    tokens = np.empty(num_clusters)
    for k in range(num_clusters):
        lens = prompt[cluster == k].tolist()
        computed = [max(lens)] * len(lens) if padding and len(lens) > 1 else lens
        plan = BatchPlan.from_lens(prefill_new_lens=computed, block_size=block_size)
        kernel_p[k] = kernels.step_time_s(plan)
        seqs[k], ctx[k], tokens[k] = len(lens), plan.prefill_context_sum, plan.num_prefill_tokens
    # decode segments between consecutive joins and leaves, and a long last one in which
    # the last request decodes alone (a slow prediction may run past the records' end)
    bounds = np.unique(np.concatenate([ft, fin]))
    tail = max(60.0, 10 * (bounds[-1] - bounds[0]))
    bounds = np.append(bounds, bounds[-1] + tail)
    mid = (bounds[:-1] + bounds[1:]) / 2
    running = (ft[None, :] <= mid[:, None]) & (mid[:, None] < fin[None, :])
    life = np.maximum(fin - ft, 1e-9)
    generated = 1 + (out - 1) * np.clip((mid[:, None] - ft[None, :]) / life[None, :], 0, 1)
    ctx_each = prompt[None, :] + generated
    seg_n = running.sum(axis=1)
    last = int(np.argmax(fin))
    seg_n[-1] = 1
    seg_ctx = np.where(running, ctx_each, 0).sum(axis=1)
    seg_ctx[-1] = prompt[last] + out[last]
    blocks = np.where(running, np.ceil(ctx_each / block_size), 0).sum(axis=1)
    blocks[-1] = math.ceil(seg_ctx[-1] / block_size)
    decode = kernels.decode_time_fn(is_paged=True)
    seg_kernel = np.array(
        [
            decode(int(n), int(round(c)), int(b)) if n else 0.0
            for n, c, b in zip(seg_n, seg_ctx, blocks, strict=True)
        ]
    )
    return Timeline(
        run, end, kernel_p, seqs, ctx, tokens, cluster, bounds, seg_n, seg_ctx, seg_kernel
    )


@dataclass(frozen=True)
class Coefficients:
    """A serving path's coefficients (s), as the fit varies them."""

    step: dict[str, float]
    s_per_prefill_token: float = 0.0
    frontend_delay_s: float = 0.0

    def step_s(self, n, ctx):
        s = self.step
        return (
            s.get("const_s", 0.0)
            + s.get("s_per_seq", 0.0) * n
            + s.get("s_per_context_token", 0.0) * ctx
        )

    def prefill_s(self, tl: Timeline) -> np.ndarray:
        return (
            tl.prefill_kernel_s
            + self.step_s(tl.prefill_seqs, tl.prefill_ctx)
            + self.s_per_prefill_token * tl.prefill_tokens
        )


def _prefill_overlap(tl: Timeline, tau_p: np.ndarray) -> np.ndarray:
    """Per decode segment, the time prefill steps take of it."""
    start = tl.prefill_end_s - tau_p
    lo = np.maximum(tl.bounds[:-1, None], start[None, :])
    hi = np.minimum(tl.bounds[1:, None], tl.prefill_end_s[None, :])
    return np.clip(hi - lo, 0, None).sum(axis=1)


def predicted_decode_s(tl: Timeline, coefs: Coefficients) -> np.ndarray:
    """Per request, its decode time given the measured concurrency (module docstring, 3):
    the prefill steps in its life plus ``output − 1`` decode steps at the mean predicted
    decode step time of its life (its decode-busy time over the decode steps predicted in
    it); NaN for a one-token output."""
    tau_p = coefs.prefill_s(tl)
    width = np.diff(tl.bounds)
    busy = np.clip(width - _prefill_overlap(tl, tau_p), 0, None)
    tau_d = tl.seg_kernel_s + coefs.step_s(tl.seg_n, tl.seg_ctx)
    steps = np.where(tl.seg_n > 0, busy / np.maximum(tau_d, 1e-12), 0.0)
    clock = np.concatenate([[0.0], np.cumsum(steps)])
    busy_clock = np.concatenate([[0.0], np.cumsum(busy)])
    t = tl.run.table
    ft = t["first_token_s"].to_numpy(dtype=float)
    fin = t["finish_s"].to_numpy(dtype=float)
    out = t["output_len"].to_numpy(dtype=float)
    num_steps = np.interp(fin, tl.bounds, clock) - np.interp(ft, tl.bounds, clock)
    busy_s = np.interp(fin, tl.bounds, busy_clock) - np.interp(ft, tl.bounds, busy_clock)
    prefill_s = (fin - ft) - busy_s
    with np.errstate(divide="ignore", invalid="ignore"):
        decode_s = (out - 1) * busy_s / num_steps
    return np.where((out > 1) & (num_steps > 0), prefill_s + decode_s, np.nan)


def predicted_ttft_s(tl: Timeline, coefs: Coefficients) -> np.ndarray:
    """Per request, its TTFT given the measured state (module docstring, 4)."""
    tau_p = coefs.prefill_s(tl)
    t = tl.run.table
    seen = t["arrival_s"].to_numpy(dtype=float) + coefs.frontend_delay_s
    start = tl.prefill_end_s - tau_p
    inside = (start[None, :] <= seen[:, None]) & (seen[:, None] < tl.prefill_end_s[None, :])
    inside[np.arange(len(seen)), tl.cluster] = False  # its own step is not a wait
    rest = np.where(inside, tl.prefill_end_s[None, :] - seen[:, None], 0.0).max(axis=1)
    seg = np.clip(np.searchsorted(tl.bounds, seen, side="right") - 1, 0, len(tl.seg_n) - 1)
    decoding = (tl.seg_n[seg] > 0) & (seen >= tl.bounds[0])
    half_step = 0.5 * (tl.seg_kernel_s[seg] + coefs.step_s(tl.seg_n[seg], tl.seg_ctx[seg]))
    wait = np.where(inside.any(axis=1), rest, np.where(decoding, half_step, 0.0))
    return coefs.frontend_delay_s + wait + tau_p[tl.cluster]


def unqueued(tl: Timeline) -> np.ndarray:
    """Per request: whether at most one other prefill step ended between its arrival and
    its own first token (it waited for the step in flight, not in a queue)."""
    t = tl.run.table
    arrival = t["arrival_s"].to_numpy(dtype=float)
    own = tl.prefill_end_s[tl.cluster]
    ends = np.sort(tl.prefill_end_s)
    between = np.searchsorted(ends, own, side="left") - np.searchsorted(ends, arrival, side="right")
    return between <= 1


def measured_decode_s(run: MeasuredRun) -> np.ndarray:
    t = run.table
    out = t["output_len"].to_numpy()
    return np.where(out > 1, (t["finish_s"] - t["first_token_s"]).to_numpy(dtype=float), np.nan)


def measured_ttft_s(run: MeasuredRun) -> np.ndarray:
    t = run.table
    return (t["first_token_s"] - t["arrival_s"]).to_numpy(dtype=float)


def _rel(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    return pred[ok] / meas[ok] - 1.0


@dataclass(frozen=True)
class FormFit:
    """One form fitted on the fit runs, and its two-fold cross-validated error."""

    form: str
    coefs: Coefficients
    decode_rms: float
    ttft_rms: float
    cv_decode_rms: float
    decode_residuals: np.ndarray
    ttft_residuals: np.ndarray
    num_requests: int


def _fit(timelines: list[Timeline], form: str, masks: list[np.ndarray]) -> Coefficients:
    names = SERVING_FORMS[form]
    units = np.array([_STEP_UNITS[n] for n in names])
    meas_d = [measured_decode_s(tl.run) for tl in timelines]
    meas_t = [measured_ttft_s(tl.run) for tl in timelines]
    coefs = Coefficients(step={n: 0.0 for n in names})

    def with_step(x: np.ndarray) -> Coefficients:
        step = {n: float(v) for n, v in zip(names, x * units, strict=True)}
        return Coefficients(step, coefs.s_per_prefill_token, coefs.frontend_delay_s)

    def with_ttft(x: np.ndarray) -> Coefficients:
        return Coefficients(coefs.step, float(x[0] * _PREFILL_UNIT), float(x[1] * _DELAY_UNIT))

    def decode_res(x: np.ndarray) -> np.ndarray:
        c = with_step(x)
        return np.concatenate(
            [
                _rel(predicted_decode_s(tl, c)[m], d[m])
                for tl, d, m in zip(timelines, meas_d, masks, strict=True)
            ]
        )

    def ttft_res(x: np.ndarray) -> np.ndarray:
        c = with_ttft(x)
        return np.concatenate(
            [
                (predicted_ttft_s(tl, c)[m] - d[m]) / d[m].mean()
                for tl, d, m in zip(timelines, meas_t, ttft_masks, strict=True)
            ]
        )

    # TTFT is fitted on requests that did not queue behind another prefill step (at most
    # one other step's first tokens between their arrival and their own): what the
    # predictor of (4) models; a request that queued for memory or behind several
    # batches would bias the delay and the prefill term
    ttft_masks = [m & unqueued(tl) for tl, m in zip(timelines, masks, strict=True)]
    x_step = np.zeros(len(names))
    x_ttft = np.zeros(2)
    for _ in range(2):
        x_step = least_squares(decode_res, x_step).x
        coefs = with_step(x_step)
        x_ttft = least_squares(ttft_res, x_ttft).x
        coefs = with_ttft(x_ttft)
    return coefs


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x**2))) if len(x) else float("nan")


def fit_form(timelines: list[Timeline], form: str) -> FormFit:
    """``form`` fitted on every request of ``timelines``, and cross-validated (module doc)."""
    everyone = [np.ones(tl.run.num_requests, dtype=bool) for tl in timelines]
    coefs = _fit(timelines, form, everyone)
    halves = [[np.arange(tl.run.num_requests) % 2 == h for tl in timelines] for h in (0, 1)]
    cv = []
    for h in (0, 1):
        c = _fit(timelines, form, halves[h])
        for tl, other in zip(timelines, halves[1 - h], strict=True):
            cv.append(_rel(predicted_decode_s(tl, c)[other], measured_decode_s(tl.run)[other]))
    dec = np.concatenate(
        [_rel(predicted_decode_s(tl, coefs), measured_decode_s(tl.run)) for tl in timelines]
    )
    ttft = np.concatenate(
        [_rel(predicted_ttft_s(tl, coefs), measured_ttft_s(tl.run)) for tl in timelines]
    )
    return FormFit(
        form=form,
        coefs=coefs,
        decode_rms=_rms(dec),
        ttft_rms=_rms(ttft),
        cv_decode_rms=_rms(np.concatenate(cv)),
        decode_residuals=dec,
        ttft_residuals=ttft,
        num_requests=sum(tl.run.num_requests for tl in timelines),
    )


def choose_form(fits: list[FormFit], margin: float) -> FormFit:
    """The headline form (module docstring): lowest cross-validated decode RMS; a form
    with more coefficients must beat the best with fewer by ``margin``."""
    by_size = sorted(fits, key=lambda f: (len(SERVING_FORMS[f.form]), f.cv_decode_rms))
    best = by_size[0]
    for fit in by_size[1:]:
        fewer = len(SERVING_FORMS[fit.form]) > len(SERVING_FORMS[best.form])
        if fit.cv_decode_rms < best.cv_decode_rms - (margin if fewer else 0.0):
            best = fit
    return best


@dataclass
class ServingFit:
    """Every form fitted, the one chosen, and what a profile's section records."""

    fits: list[FormFit]
    chosen: FormFit
    fitted_on: str
    sources: tuple[dict[str, str], ...] = ()
    #: whether the reconstruction padded prefill batches (v0.2)
    padding: bool = False

    def serving_path(self, fit: FormFit | None = None, *, origin: str = "") -> ServingPath:
        fit = fit or self.chosen
        coefs = dict(fit.coefs.step)
        coefs["s_per_prefill_token"] = fit.coefs.s_per_prefill_token
        return ServingPath(
            form=fit.form,
            coefficients=coefs,
            frontend_delay_s=fit.coefs.frontend_delay_s,
            fitted_on=self.fitted_on,
            sources=self.sources,
            fit_error={
                k: v
                for k, v in {
                    "decode_time_rms": fit.decode_rms,
                    "decode_time_cv_rms": fit.cv_decode_rms,
                    "ttft_rms": fit.ttft_rms,
                    "num_requests": float(fit.num_requests),
                }.items()
                if math.isfinite(v)
            },
            # a fit without TTFT residuals (a V1 fit, ``serving_v1.py``) keeps none
            residual_quantiles={
                k: tuple(float(q) for q in np.quantile(res, RESIDUAL_QUANTILES))
                for k, res in (("decode_time", fit.decode_residuals), ("ttft", fit.ttft_residuals))
                if len(res)
            },
            origin=origin,
        )

    def table(self) -> pd.DataFrame:
        """One row per form: coefficients, fit and cross-validated errors, chosen or not."""
        rows = []
        for f in self.fits:
            rows.append(
                {
                    "form": f.form,
                    "chosen": f is self.chosen,
                    "const_ms": f.coefs.step.get("const_s", 0.0) * 1e3,
                    "per_seq_ms": f.coefs.step.get("s_per_seq", 0.0) * 1e3,
                    "per_context_token_us": f.coefs.step.get("s_per_context_token", 0.0) * 1e6,
                    "per_prefill_token_us": f.coefs.s_per_prefill_token * 1e6,
                    "frontend_delay_ms": f.coefs.frontend_delay_s * 1e3,
                    "decode_rms": f.decode_rms,
                    "decode_cv_rms": f.cv_decode_rms,
                    "ttft_rms": f.ttft_rms,
                }
            )
        return pd.DataFrame(rows)


def fit_serving(
    runs: list[MeasuredRun],
    kernels,
    *,
    forms: list[str] | None = None,
    block_size: int = 16,
    padding: bool = False,
    selection_margin: float = 0.005,
) -> ServingFit:
    """Every form fitted on ``runs`` (module docstring), the headline one chosen."""
    timelines = [reconstruct(r, kernels, block_size=block_size, padding=padding) for r in runs]
    fits = [fit_form(timelines, form) for form in (forms or list(SERVING_FORMS))]
    sources = tuple(
        {"file": PurePath(path).name, "repository": "", "commit": "", "sha256": sha}
        for r in runs
        for path, sha in r.sources
    )
    fitted_on = ", ".join(PurePath(path).name for r in runs for path, _ in r.sources)
    return ServingFit(fits, choose_form(fits, selection_margin), fitted_on, sources, padding)


def decode_time_errors(run: MeasuredRun, kernels, coefs: Coefficients, **kw) -> pd.DataFrame:
    """Per request of ``run``: measured and predicted decode time and TTFT given the
    measured state (module docstring, 3-4), under ``kernels`` plus ``coefs``."""
    tl = reconstruct(run, kernels, **kw)
    return pd.DataFrame(
        {
            "decode_measured_s": measured_decode_s(run),
            "decode_predicted_s": predicted_decode_s(tl, coefs),
            "ttft_measured_s": measured_ttft_s(run),
            "ttft_predicted_s": predicted_ttft_s(tl, coefs),
        }
    )


def coefficients_of(serving: ServingPath | None) -> Coefficients:
    """A profile's serving section as the reconstruction's coefficients (None: zero)."""
    if serving is None:
        return Coefficients(step={})
    step = {k: v for k, v in serving.coefficients.items() if k != "s_per_prefill_token"}
    return Coefficients(step, serving.coef("s_per_prefill_token"), serving.frontend_delay_s)


def records_blocks_in_use(
    run: MeasuredRun, *, block_size: int = 16, num_points: int = 4000
) -> np.ndarray:
    """The blocks held by the requests decoding at once, at ``num_points`` times over the
    run: each ``ceil((prompt + tokens so far) / block_size)``, its tokens interpolated
    linearly between its first and last token (what the records imply of the KV pool)."""
    t = run.table
    ft = t["first_token_s"].to_numpy(dtype=float)
    fin = t["finish_s"].to_numpy(dtype=float)
    prompt = t["prompt_len"].to_numpy(dtype=np.int64)
    out = t["output_len"].to_numpy(dtype=np.int64)
    grid = np.linspace(0.0, float(fin.max()), num_points)
    running = (ft[None, :] <= grid[:, None]) & (grid[:, None] < fin[None, :])
    life = np.maximum(fin - ft, 1e-9)
    gen = 1 + (out - 1) * np.clip((grid[:, None] - ft[None, :]) / life[None, :], 0, 1)
    return np.where(running, np.ceil((prompt[None, :] + gen) / block_size), 0).sum(axis=1)


def serving_profile(
    fit: ServingFit,
    base_ref: str | None,
    gpu_name: str,
    *,
    command: str,
    server: str,
    origin: str | None = None,
):
    """``base_ref``'s profile (None: the analytic one of ``gpu_name``) with ``fit``'s
    chosen serving path, the command and the server named (the same bytes whoever calls);
    ``origin``: how it was fitted (default: by ``calibrate fit-serving``)."""
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    base = resolve_profile(base_ref, get_gpu(gpu_name))
    serving = fit.serving_path(
        origin=origin
        or (
            f"fitted by `pagesim calibrate fit-serving` on per-request records of {server}; "
            f"form {fit.chosen.form} chosen by two-fold cross-validation on the fit runs "
            f"(forms tried: {', '.join(f.form for f in fit.fits)}); it also absorbs what the "
            "kernel profile misses on that server"
        )
    )
    return base.with_terms(
        serving=serving,
        command=command,
        notes=(base.notes + " " if base.notes else "")
        + f"Serving section fitted on per-request records of {server}.",
    )


def report_lines(fit: ServingFit, runs: list[MeasuredRun], kernels) -> list[str]:
    """A fit's report: every form, and each fit run's errors given the measured state."""
    lines = [
        "# Serving path fit",
        "",
        f"Fitted on: {fit.fitted_on}. Chosen form: **{fit.chosen.form}** (two-fold "
        "cross-validated decode-time RMS on these runs; `calibrate/serving.py`).",
        "",
        "| form | chosen | ms per step | ms per sequence | µs per context token | µs per prefill token | front-end delay (ms) | decode RMS | decode RMS, 2-fold CV | TTFT RMS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in fit.table().to_dict("records"):
        lines.append(
            f"| {r['form']} | {'**yes**' if r['chosen'] else 'no'} | {r['const_ms']:.3f} | "
            f"{r['per_seq_ms']:.3f} | {r['per_context_token_us']:.3f} | "
            f"{r['per_prefill_token_us']:.3f} | {r['frontend_delay_ms']:.2f} | "
            f"{r['decode_rms']:.2%} | {r['decode_cv_rms']:.2%} | {r['ttft_rms']:.2%} |"
        )
    lines += [
        "",
        "Per run, with the chosen form (predicted / measured − 1, given the measured state):",
        "",
        "| run | requests | decode time, mean | decode time, p50 | TTFT, mean | TTFT, p50 |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        d = decode_time_errors(run, kernels, fit.chosen.coefs, padding=fit.padding)
        cells = []
        for pred, meas in (
            ("decode_predicted_s", "decode_measured_s"),
            ("ttft_predicted_s", "ttft_measured_s"),
        ):
            p, m = d[pred].to_numpy(), d[meas].to_numpy()
            ok = np.isfinite(p) & np.isfinite(m)
            cells += [
                f"{p[ok].mean() / m[ok].mean() - 1:+.1%}",
                f"{np.median(p[ok]) / np.median(m[ok]) - 1:+.1%}",
            ]
        lines.append(f"| {run.name} | {run.num_requests} | {' | '.join(cells)} |")
    return lines
