"""Why pagesim's TPOT is low against DistServe's vLLM: the data's own evidence, and a held-out test.

Scenario: ``validate-vllm`` replays DistServe's runs and finds TPOT p50 22–50% low and no
saturation at 3.2 req/s. This module adds two things to its page, both generated:

1. **Concurrency** (no fitting). By Little's law the mean number of requests that are
   decoding is sum(finish - first token) / span. Measured from the records and from the
   replay (``a100-80gb-vidur`` profile), with the replay's prefill steps per request (the
   vLLM these runs used, DistServe's fork of v0.2.3, padded a prefill batch to its longest
   prompt and capped the padding at ``max_paddings`` = 256 tokens; that rule can only bind
   in a step that prefills more than one prompt) and its preemptions.
2. **Per-step serving cost, fitted on some rates, tested on the others.** The engine of
   v0.2.3 started with ``--engine-use-ray --worker-use-ray`` does per-step work that
   Vidur's TP-1 CPU table (fitted as ``step_overhead``) does not contain: every step it
   sends each running sequence's metadata (its whole token list) to the worker actor and
   each request's output (prompt and output ids and text) back through Ray, and
   detokenises each sequence. Three one-parameter forms of the missing cost are added to
   the fitted profile in turn: a constant per step (``const``), a cost per running
   sequence (``per_seq``, ``step_overhead.s_per_seq``) and a cost per context token of the
   decode batch (``per_ctx_token``, the decode attention term's ``s_per_token`` / layers).
   Each one's value minimises the mean squared log error of TPOT p50 over the runs at
   :data:`FIT_RATES` only (a log-spaced grid, :data:`GRID_POINTS` values); the runs at the
   other rates are held out, and the page marks which is which. Nothing else changes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

FIT_RATES = (1.0, 2.0)
GRID_POINTS = 33
BASE_PROFILE = "a100-80gb-vidur"
#: form -> (grid low, grid high, unit label, unit scale for the page)
FORMS = {
    "const": (1e-4, 1e-1, "ms per step", 1e3),
    "per_seq": (1e-5, 1e-2, "ms per sequence per step", 1e3),
    "per_ctx_token": (1e-9, 1e-5, "µs per context token per step", 1e6),
}


@dataclass(frozen=True)
class FormFit:
    form: str
    value: float
    #: one row per run: run, rate_req_s, is_fitted, tpot/ttft p50 errors, ttft_p50_s
    runs: pd.DataFrame


def with_serving_cost(form: str, value: float, num_layers: int):
    """The base profile plus ``value`` of the one-parameter serving cost ``form``."""
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.costmodel.profile import Term
    from pagesim.simulator.specs import get_gpu

    base = resolve_profile(BASE_PROFILE, get_gpu("a100-80gb"))
    name, coef, add = {
        "const": ("step_overhead", "const_s", value),
        "per_seq": ("step_overhead", "s_per_seq", value),
        "per_ctx_token": ("paged_decode_attention", "s_per_token", value / num_layers),
    }[form]
    term = base.term(name)
    coefs = dict(term.coefficients)
    coefs[coef] = coefs.get(coef, 0.0) + add
    origin = (
        f"{term.origin}; plus {value:.4g} ({form}) of per-step serving cost fitted on DistServe's "
        f"vLLM runs at {FIT_RATES} req/s"
    )
    new = Term(coefs, term.heldout_mape, term.heldout_max_err, term.num_points, origin)
    return base.with_terms(terms={**base.terms, name: new})


def _errors(runs, profile_path: str) -> pd.DataFrame:
    from pagesim.experiments.vllm_validation import measured_frame, simulate_run

    rows = []
    for run in runs:
        sim, meas = simulate_run(run, profile_path), measured_frame(run)
        rows.append(
            {
                "run": run.name,
                "rate_req_s": run.rate_req_s,
                "is_fitted": run.rate_req_s in FIT_RATES,
                "tpot_p50_err": sim["tpot_s"].median() / meas["tpot_s"].median() - 1,
                "ttft_p50_err": sim["ttft_s"].median() / meas["ttft_s"].median() - 1,
                "ttft_p50_s": sim["ttft_s"].median(),
            }
        )
    return pd.DataFrame(rows)


def fit_form(runs, form: str, folder: Path) -> FormFit:
    """Grid-search ``form``'s value on the runs at FIT_RATES; evaluate it on every run."""
    from pagesim.simulator.specs import get_model

    layers = get_model("opt-13b").num_layers
    fit_runs = [r for r in runs if r.rate_req_s in FIT_RATES]
    lo, hi, _, _ = FORMS[form]
    best: tuple[float, float] | None = None
    for value in np.geomspace(lo, hi, GRID_POINTS):
        path = with_serving_cost(form, value, layers).save(folder / f"{form}.yaml")
        err = _errors(fit_runs, str(path))["tpot_p50_err"].to_numpy()
        loss = float(np.mean(np.log1p(err) ** 2))
        if best is None or loss < best[0]:
            best = (loss, float(value))
    value = best[1]
    path = with_serving_cost(form, value, layers).save(folder / f"{form}.yaml")
    return FormFit(form, value, _errors(runs, str(path)))


def fit_forms(runs) -> list[FormFit]:
    with tempfile.TemporaryDirectory() as tmp:
        return [fit_form(runs, form, Path(tmp)) for form in FORMS]


def concurrency(runs) -> pd.DataFrame:
    """Per run: mean decoding requests (measured, replayed), prefill steps, preemptions."""
    from pagesim.experiments.vllm_validation import VLLM_SETTINGS, run_trace
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    rows = []
    for run in runs:
        t = run.table
        span = t["complete_time"].max() - t["issue_time"].min()
        measured = (t["complete_time"] - t["first_token_time"]).sum() / span
        doc = {
            **VLLM_SETTINGS,
            "hardware": {**VLLM_SETTINGS["hardware"], "profile": BASE_PROFILE},
            "metrics": {"every_step": True},
        }
        res = simulate(run_spec_from_dict(doc, "vllm validation"), trace=run_trace(run))
        req, ts = res.requests, res.timeseries
        sim_span = req["finish_s"].max() - req["arrival_s"].min()
        prefill = ts[ts["num_prefill_tokens"] > 0]
        rows.append(
            {
                "run": run.name,
                "rate_req_s": run.rate_req_s,
                "measured_decoding": measured,
                "replayed_decoding": (req["finish_s"] - req["first_token_s"]).sum() / sim_span,
                "prefill_steps": len(prefill),
                "requests": len(req),
                "preemptions": int(req["num_preemptions"].sum()),
                "prefill_time_frac": prefill["duration_s"].sum() / ts["duration_s"].sum(),
            }
        )
    return pd.DataFrame(rows)


def _saturation(fit: FormFit) -> float:
    from pagesim.experiments.vllm_validation import saturation_rate

    per_rate = fit.runs.groupby("rate_req_s")["ttft_p50_s"].mean()
    return saturation_rate(per_rate.index.to_numpy(), per_rate.to_numpy())


def page_lines(runs, measured_saturation: float) -> list[str]:
    """The page's investigation section (module docstring)."""
    conc = concurrency(runs)
    lines = [
        "## Why TPOT is low: concurrency",
        "",
        "Mean number of requests decoding at once (Little's law: sum of finish − first token over",
        "the run's span), measured and in the replay (fitted profile), the replay's prefill steps",
        "against its requests, its share of time in prefill steps and its preemptions:",
        "",
        "| run | rate | decoding, measured | decoding, replay | prefill steps / requests | prefill time share | preemptions |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in conc.to_dict("records"):
        lines.append(
            f"| {r['run']} | {r['rate_req_s']:g} | {r['measured_decoding']:.1f} | "
            f"{r['replayed_decoding']:.1f} | {r['prefill_steps']} / {r['requests']} | "
            f"{r['prefill_time_frac']:.0%} | {r['preemptions']} |"
        )
    num_long = sum(
        int(((r.table["prompt_len"] + r.table["output_len"]) >= 2048).sum()) for r in runs
    )
    below_sat = conc[conc["rate_req_s"] < measured_saturation]
    multi = int((below_sat["requests"] - below_sat["prefill_steps"]).max())
    most = int(
        below_sat["prefill_steps"].loc[
            (below_sat["requests"] - below_sat["prefill_steps"]).idxmax()
        ]
    )
    ratio = conc["measured_decoding"] / conc["replayed_decoding"]
    lines += [
        "",
        "What the records and DistServe's code say (its `evaluation/2-benchmark-serving/`):",
        "",
        "- **Definitions agree.** The client sends each request once, non-streaming, with "
        "`ignore_eos` and `max_tokens` = its output length; the server returns per-token "
        "timestamps; TTFT = first token − send, TPOT = (last token − first token) / "
        "(output − 1), as pagesim computes them. Every request generates exactly its "
        "`output_len` tokens, and the replay uses the same lengths.",
        f"- **No truncation.** Requests with prompt + output ≥ 2048 (the replay's max length): "
        f"{num_long}.",
        "- **The vLLM.** DistServe's baseline branch of vLLM is based on v0.2.3 (its README); "
        "engine and worker run as Ray actors (`--engine-use-ray --worker-use-ray`), sampling "
        "at temperature 1.0. v0.2.3's scheduler differs from pagesim's `vllm` scheduler in one "
        "rule: a prefill batch is padded to its longest prompt (the token budget counts "
        "prompts × longest, and padding is capped at `max_paddings`, default 256 tokens). It can only matter in a "
        "step that prefills more than one prompt: below saturation at most "
        f"{multi} of a replayed run's {most} prefill steps (prefill steps / requests above), so "
        "it cannot explain a 2× TPOT gap; it is not modelled.",
        f"- **No preemption or swapping** in any replay (total {int(conc['preemptions'].sum())}).",
        "- **The gap is in the step, amplified by load.** The real runs hold "
        f"{ratio.min():.2f}–{ratio.max():.2f}× as many requests decoding at once as the replay: "
        "slower steps keep requests longer, which makes batches larger and steps slower again. "
        "Prefill interruptions are in the replay (the share of time above).",
    ]
    fits = fit_forms(runs)
    top = float(max(r.rate_req_s for r in runs))
    lines += [
        "",
        "## A missing per-step serving cost? Fitted at "
        f"{' and '.join(f'{r:g}' for r in FIT_RATES)} req/s, held out at the others",
        "",
        f"Each form is added to `{BASE_PROFILE}` with the value that minimises the squared log "
        "error of TPOT p50 over the runs marked *fit*; the runs marked *held out* were not "
        "used. Errors are predicted / measured − 1.",
        "",
        "| form | fitted value | run | rate | used for | TPOT p50 | TTFT p50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for fit in fits:
        _, _, unit, scale = FORMS[fit.form]
        for i, r in enumerate(fit.runs.to_dict("records")):
            head = f"{fit.form} | {fit.value * scale:.3g} {unit}" if i == 0 else " | "
            lines.append(
                f"| {head} | {r['run']} | {r['rate_req_s']:g} | "
                f"{'fit' if r['is_fitted'] else '**held out**'} | "
                f"{r['tpot_p50_err']:+.0%} | {r['ttft_p50_err']:+.0%} |"
            )
    lines += ["", "| form | saturation (TTFT p50 crosses 1 s) | measured |", "|---|---|---|"]
    for fit in fits:
        sat = _saturation(fit)
        shown = f"{sat:.2f}" if np.isfinite(sat) else f"> {top:g} (not within the runs)"
        lines.append(f"| {fit.form} | {shown} req/s | {measured_saturation:.2f} req/s |")
    lines += ["", "Reading:", ""]
    for fit in fits:
        held = fit.runs[~fit.runs["is_fitted"]]
        below = held[held["rate_req_s"] < measured_saturation]
        sat = _saturation(fit)
        gap = abs(sat - measured_saturation) if np.isfinite(sat) else float("inf")
        errs = below["tpot_p50_err"].to_numpy()
        worst = float(errs[np.argmax(np.abs(errs))]) if len(errs) else float("nan")
        lines.append(
            f"- `{fit.form}`: held-out TPOT p50 below saturation worst {worst:+.0%} "
            f"(goal 10%: {'met' if abs(worst) <= 0.10 else 'not met'}); saturation "
            f"{'within' if gap <= 0.5 else 'not within'} 0.5 req/s of the measured."
        )
    lines += [
        "",
        "A cost that grows with the batch (per sequence or per context token) is what makes the "
        "replay saturate where vLLM did, but fitted at low load it overshoots TPOT at 3 req/s; "
        "a constant fits TPOT at the held-out rates better but never saturates. The missing "
        "per-step cost grows with load, less than linearly in sequences or context tokens. "
        "None of these forms is adopted: none meets the goals at the held-out rates, and a "
        "second parameter fitted on three runs at two rates would not be a test.",
    ]
    return lines
