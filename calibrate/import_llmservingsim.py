"""``pagesim calibrate import --llmservingsim``: a profile from LLMServingSim's layer profiles.

Scenario: the user names one LLMServingSim profile bundle (``calibrate/llmservingsim.py``
reads it: vLLM 0.19's own kernels timed on the GPU, per layer), the TP degree and where
the bundle came from (``--origin OWNER/REPO@COMMIT``); its tables become rows of
calibrate's measurement schema and the same fit as every import
(:func:`pagesim.calibrate.fit.fit_all`: relative NNLS, 20% of each term's points held
out, seeded) gives each term and its held-out error. The profile is kind ``external``
and lists every file read (its path under LLMServingSim's ``profiler/perf/``, the
repository, the commit, the sha256); no table is copied.

Terms: ``gemm``, ``pointwise``, ``prefill_attention``, ``paged_decode_attention``,
``step_overhead`` (the sampler's GPU time) are fitted; ``kv_write`` is written as a zero
term whose origin says why (the attention timings include the cache write);
``contiguous_decode_attention``, ``block_copy`` and ``swap`` are not in the tables, so
the simulator takes them from its analytic profile (vLLM V1 neither swaps nor copies
blocks). Prefill attention has one form per term, fitted on the prefill-only rows and
decode attention on the decode-only rows: the report checks their sum on the mixed rows,
which V1 runs as one kernel call, and lists the other forms tried with their held-out
errors (:data:`ALTERNATIVES`), so that what was not shipped is on record.

The mixed rows then fit ``mixed_decode_attention`` (:func:`fit_mixed`): the extra time of
the decodes that share a call with a prompt chunk, over the two shipped terms, in the
forms of ``experiments/validation/vllm019_mixed_protocol.md`` (:data:`MIXED_FORMS`), 20% of
the mixed rows held out with the same generator after the other terms' splits (so those
are unchanged), the form chosen by :func:`choose_mixed`. A profile whose chosen form is
``additive`` has no such term.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate import llmservingsim as L
from pagesim.calibrate.external import Source, render_report, write_profile_folder
from pagesim.calibrate.fit import HOLDOUT_FRACTION, TermFit, fit_all, fit_coefficients, predict
from pagesim.calibrate.nnls import nnls_relative
from pagesim.errors import ConfigError
from pagesim.simulator.costmodel.model import NEEDED_TERMS
from pagesim.simulator.costmodel.profile import Profile, Term
from pagesim.simulator.model_gpu_specs import GPUS

#: one prefill per row: the per-sequence coefficient would be a second constant; one block
#: size (16): a per-block cost cannot be told apart from a per-byte one
EXTRAS = {"prefill_attention": ("tokens",), "paged_decode_attention": ("seqs",)}
KV_WRITE_ORIGIN = (
    "zero: included in the attention timings (vLLM V1's Attention layer writes the step's "
    "K/V into the cache, reshape_and_cache_flash, inside the call LLMServingSim timed)"
)
WHAT = (
    "vLLM {vllm}'s own kernels timed by LLMServingSim's profiler: a one-layer model, "
    "enforce_eager, kernel time per module call (vLLM's layerwise profiler, mean of 3 after "
    "a warm-up), one rank's shard at TP {tp} with no all-reduce"
)


@dataclass(frozen=True)
class Alternative:
    """A form or mapping tried and not shipped: which rows, which extras."""

    term: str
    label: str
    select: str  # "all", "no-lm-head", "lm-head", "chunk>=256"
    extras: tuple[str, ...]


#: forms and mappings tried beside the shipped ones (scored on the shipped term's split)
ALTERNATIVES = (
    Alternative("gemm", "layer GEMMs only (LM head rows left out)", "no-lm-head", ()),
    Alternative("gemm", "LM head rows alone", "lm-head", ()),
    Alternative("prefill_attention", "no per-query-token coefficient", "all", ()),
    Alternative(
        "prefill_attention",
        "only chunks of >= 256 tokens (the large-chunk regime)",
        "chunk>=256",
        ("tokens",),
    ),
    Alternative(
        "paged_decode_attention",
        "per-block and per-sequence coefficients",
        "all",
        ("blocks", "seqs"),
    ),
)


def _select(df: pd.DataFrame, how: str) -> pd.DataFrame:
    if how == "no-lm-head":
        return df[df["kernel"] != "lm_head"]
    if how == "lm-head":
        return df[df["kernel"] == "lm_head"]
    if how == "chunk>=256":
        return df[df["tokens"] >= 256]
    return df


def alternative_fits(
    df: pd.DataFrame, fits: dict[str, TermFit]
) -> list[tuple[Alternative, TermFit]]:
    """Each alternative fitted on the shipped term's training rows and scored on its
    held-out rows (the same split, restricted to the alternative's rows)."""
    out = []
    for alt in ALTERNATIVES:
        rows = df[df["term"] == alt.term]
        keep = rows.index.isin(_select(rows, alt.select).index)
        heldout = fits[alt.term].is_heldout[keep]
        rows = rows[keep]
        feats = {
            k: rows[k].to_numpy(dtype=float) for k in ("bytes", "flops", "blocks", "seqs", "tokens")
        }
        y = rows["median_s"].to_numpy(dtype=float)
        coefs = fit_coefficients(
            {k: v[~heldout] for k, v in feats.items()}, y[~heldout], alt.extras
        )
        out.append((alt, TermFit(alt.term, coefs, y, predict(coefs, feats), heldout)))
    return out


def mixed_check(mixed: pd.DataFrame, fits: dict[str, TermFit]) -> dict[str, float]:
    """The mixed rows: measured against the sum of the two fitted attention terms."""
    if mixed.empty:
        return {}
    pre = fits["prefill_attention"].coefficients
    dec = fits["paged_decode_attention"].coefficients
    predicted = np.array(
        [
            Term(pre).time_s(*p) + Term(dec).time_s(*d)
            for p, d in zip(mixed["prefill"], mixed["decode"], strict=True)
        ]
    )
    measured = mixed["median_s"].to_numpy()
    rel = predicted / measured - 1
    pure = mixed["pure_sum_s"].to_numpy()
    ratio = measured[np.isfinite(pure)] / pure[np.isfinite(pure)]
    check = {
        "rows": len(rel),
        "mape": float(np.abs(rel).mean()),
        "median_signed": float(np.median(rel)),
        "worst": float(np.abs(rel).max()),
        "pure_rows": len(ratio),
    }
    if len(ratio):
        check["pure_ratio_median"] = float(np.median(ratio))
        check["pure_ratio_p10"] = float(np.quantile(ratio, 0.1))
        check["pure_ratio_p90"] = float(np.quantile(ratio, 0.9))
    return check


#: the mixed-step term's forms (``experiments/validation/vllm019_mixed_protocol.md``), by
#: coefficient count: X = 0; X = k x the decode term; X = const + per byte + per decode
MIXED_FORMS = {"additive": 0, "decode-scale": 1, "decode-shaped": 3}
#: a form must beat ``additive`` by this much held-out MAPE, and one with more
#: coefficients must beat one with fewer by ``MIXED_MORE_COEFS_MARGIN``
MIXED_OVER_ADDITIVE_MARGIN = 0.01
MIXED_MORE_COEFS_MARGIN = 0.005


@dataclass(frozen=True)
class MixedForm:
    """One form of ``mixed_decode_attention``: its coefficients (none for ``additive``) and
    the whole mixed call's fit (measured T against prefill + decode + this term)."""

    name: str
    coefficients: dict[str, float]
    fit: TermFit

    @property
    def num_coefficients(self) -> int:
        return MIXED_FORMS[self.name]


def fit_mixed(
    mixed: pd.DataFrame, fits: dict[str, TermFit], rng: np.random.Generator
) -> tuple[list[MixedForm], MixedForm | None]:
    """Every form of the mixed-step term fitted on the mixed rows (20% held out by ``rng``),
    and the chosen one (the protocol's rule; None when the table has no mixed rows).

    A mixed row's time T is predicted as P + D + X: P, D the shipped prefill and decode
    terms, X the form's term on the decodes' features; coefficients >= 0 by nonnegative
    least squares on the relative error of T (:func:`pagesim.calibrate.nnls.nnls_relative`).
    """
    if mixed.empty:
        return [], None
    pre = Term(fits["prefill_attention"].coefficients)
    dec_coefs = fits["paged_decode_attention"].coefficients
    dec = Term(dec_coefs)
    y = mixed["median_s"].to_numpy(dtype=float)
    base = np.array(
        [
            pre.time_s(*p) + dec.time_s(*d)
            for p, d in zip(mixed["prefill"], mixed["decode"], strict=True)
        ]
    )
    d_price = np.array([dec.time_s(*d) for d in mixed["decode"]])
    feats = {
        k: np.array([d.as_dict()[k] for d in mixed["decode"]], dtype=float)
        for k in ("bytes", "flops", "blocks", "seqs", "tokens")
    }
    is_heldout = np.zeros(len(y), dtype=bool)
    is_heldout[rng.permutation(len(y))[: max(1, round(HOLDOUT_FRACTION * len(y)))]] = True
    train = ~is_heldout
    forms = []
    for name in MIXED_FORMS:
        if name == "additive":
            coefs: dict[str, float] = {}
        elif name == "decode-scale":
            (k,) = nnls_relative(d_price[train, None], y[train], base[train])
            coefs = {c: k * v for c, v in dec_coefs.items()}
        else:
            cols = np.column_stack([np.ones_like(y), feats["bytes"], feats["seqs"]])
            c0, c_byte, c_seq = nnls_relative(cols[train], y[train], base[train])
            coefs = {"const_s": c0, "s_per_byte": c_byte, "s_per_seq": c_seq}
        extra = predict(coefs, feats) if coefs else np.zeros_like(y)
        forms.append(
            MixedForm(
                name, coefs, TermFit("mixed_decode_attention", coefs, y, base + extra, is_heldout)
            )
        )
    return forms, choose_mixed(forms)


def choose_mixed(forms: list[MixedForm]) -> MixedForm:
    """The protocol's rule: lowest held-out MAPE, fewer coefficients unless beaten by
    ``MIXED_MORE_COEFS_MARGIN``, ``additive`` unless beaten by ``MIXED_OVER_ADDITIVE_MARGIN``."""
    best = forms[0]
    for form in sorted(forms[1:], key=lambda f: f.num_coefficients):
        margin = MIXED_OVER_ADDITIVE_MARGIN if best.name == "additive" else MIXED_MORE_COEFS_MARGIN
        if form.fit.heldout_mape < best.fit.heldout_mape - margin:
            best = form
    return best


def _skew_note(bundle: L.Bundle) -> str:
    fit = ((bundle.meta.get("skew_fit") or {}).get("per_tp") or {}).get(bundle.tensor_parallel)
    if not isinstance(fit, dict) or "alpha_default" not in fit:
        return "skew_fit.csv: not used (no skew fit at this TP)."
    return (
        "skew_fit.csv: not used. LLMServingSim adds alpha (t_max - t_mean) for decode batches "
        f"of unequal contexts, alpha_default {fit['alpha_default']} at TP {bundle.tensor_parallel}; "
        "pagesim's decode attention depends on the contexts through their sum."
    )


def render_extra(
    bundle: L.Bundle,
    got: L.BundleRows,
    fits: dict[str, TermFit],
    alternatives: list[tuple[Alternative, TermFit]],
    check: dict[str, float],
    forms: list[MixedForm],
    chosen: MixedForm | None,
) -> str:
    lines = ["## Mixed prefill + decode rows", ""]
    if check:
        lines += [
            f"{check['rows']} rows of attention.csv run a prefill chunk and decodes in one call "
            "(vLLM V1). The sum prefill_attention + paged_decode_attention, each fitted "
            f"on its own rows: MAPE {check['mape']:.1%}, median signed error "
            f"{check['median_signed']:+.1%}, worst {check['worst']:.1%}.",
        ]
    if check.get("pure_rows"):
        lines += [
            "",
            "Without any fit: a mixed call measured against the sum of the measured prefill-only "
            f"and decode-only calls of the same shapes ({check['pure_rows']} rows) is "
            f"{check['pure_ratio_median']:.2f}x that sum at the median (10th-90th percentile "
            f"{check['pure_ratio_p10']:.2f}-{check['pure_ratio_p90']:.2f}x), and the excess "
            "grows with the number of decodes: decodes sharing a call with a prefill chunk run "
            "slower than in a decode-only call. Two additive terms cannot express it; the error "
            "above is mostly this, not the fits, and the mixed-step term below is fitted to it.",
        ]
    if forms:
        lines += [
            "",
            "The term `mixed_decode_attention` (the extra time of those decodes, on their "
            "features) in each form of `experiments/validation/vllm019_mixed_protocol.md`, "
            "fitted on 80% of the mixed rows over the two shipped terms, scored on the whole "
            "call of the other 20%; chosen: lowest held-out MAPE, a form with more "
            f"coefficients must win by {MIXED_MORE_COEFS_MARGIN:.1%} and `additive` is kept "
            f"unless beaten by {MIXED_OVER_ADDITIVE_MARGIN:.0%}:",
            "",
            "| form | chosen | coefficients | held-out MAPE | median signed | worst held-out | train MAPE |",
            "|---|---|---|---|---|---|---|",
        ]
        for form in forms:
            f = form.fit
            signed = f.predicted_s[f.is_heldout] / f.measured_s[f.is_heldout] - 1
            coefs = ", ".join(f"{k} {v:.3g}" for k, v in form.coefficients.items()) or "—"
            lines.append(
                f"| {form.name} | {'**yes**' if form is chosen else 'no'} | {coefs} | "
                f"{f.heldout_mape:.1%} | {np.median(signed):+.1%} | {f.heldout_max_err:.1%} | "
                f"{f.train_mape:.1%} |"
            )
    lines += ["", "## Other forms and mappings tried (not shipped)", ""]
    lines += [
        "| term | variant | points | held-out MAPE | worst held-out | coefficients |",
        "|---|---|---|---|---|---|",
    ]
    for alt, fit in alternatives:
        coefs = ", ".join(f"{k} {v:.3g}" for k, v in fit.coefficients.items())
        mape = "—" if fit.heldout_mape is None else f"{fit.heldout_mape:.1%}"
        worst = "—" if fit.heldout_max_err is None else f"{fit.heldout_max_err:.1%}"
        lines.append(
            f"| {alt.term} | {alt.label} | {fit.num_points} | {mape} | {worst} | {coefs} |"
        )
    gemm = fits["gemm"]
    is_lm = (got.rows.loc[got.rows["term"] == "gemm", "kernel"] == "lm_head").to_numpy()
    lines += ["", "Held-out error of the shipped gemm fit by table:", ""]
    for label, mask in (("layer GEMMs (dense.csv)", ~is_lm), ("LM head (per_sequence.csv)", is_lm)):
        sel = mask & gemm.is_heldout
        if sel.any():
            err = np.abs(gemm.predicted_s[sel] / gemm.measured_s[sel] - 1)
            lines.append(
                f"- {label}: {sel.sum()} points, MAPE {err.mean():.1%}, worst {err.max():.1%}"
            )
    lines += ["", "## Not charged", ""]
    lines += [
        f"- {name}: once a step, at most {us:.1f} us in the table (pagesim charges no embedding "
        "lookup and no final norm)."
        for name, us in got.uncharged_us.items()
    ]
    lines += [f"- {_skew_note(bundle)}", ""]
    return "\n".join(lines)


def import_llmservingsim(
    bundle: L.Bundle,
    repository: str,
    commit: str,
    out_dir: Path,
    seed: int = 0,
    command: str = "",
    date: str | None = None,
) -> tuple[Path, Path]:
    """Fit ``bundle`` (module docstring) and write ``profile.yaml``, ``report.md`` and the plot."""
    if bundle.gpu not in GPUS:
        raise ConfigError(f"GPU {bundle.gpu!r} is not a known GPU spec")
    out_dir = Path(out_dir)
    got = L.measurement_rows(bundle)
    rng = np.random.default_rng(seed)
    fits = fit_all(got.rows, rng, EXTRAS)
    check = mixed_check(got.mixed, fits)  # the additive sum, before the mixed term
    forms, chosen = fit_mixed(got.mixed, fits, rng)
    vllm, tp = bundle.meta["vllm_version"], bundle.tensor_parallel
    what = WHAT.format(vllm=vllm, tp=tp)
    tables = {
        "gemm": "dense.csv (qkv_proj, o_proj, gate_up_proj, down_proj) and per_sequence.csv (lm_head)",
        "pointwise": "dense.csv (2 x layernorm, rotary_emb, act_fn"
        + (", qk_norm)" if bundle.model.has_qk_norm else ")"),
        "prefill_attention": "attention.csv, rows with a prefill chunk and no decodes",
        "paged_decode_attention": "attention.csv, rows with decodes and no prefill chunk",
        "step_overhead": "per_sequence.csv (sampler: GPU time only, no host time)",
    }
    terms = {name: fit.to_term(f"fitted on {tables[name]}; {what}") for name, fit in fits.items()}
    terms["kv_write"] = Term({}, None, None, 0, KV_WRITE_ORIGIN)
    if chosen is not None and chosen.name != "additive":
        fits["mixed_decode_attention"] = chosen.fit
        terms["mixed_decode_attention"] = chosen.fit.to_term(
            f"form {chosen.name}, fitted on attention.csv's rows with a prefill chunk and "
            "decodes in one call, over the shipped prefill and decode terms; its held-out "
            f"errors are the whole mixed call's (experiments/validation/vllm019_mixed_protocol.md); {what}"
        )
    sources = tuple(
        Source(bundle.path(name), repository, commit).as_dict() | {"file": bundle.file_name(name)}
        for name in bundle.files
    )
    missing = [name for name in NEEDED_TERMS if name not in terms]
    notes = [
        f"Fitted by `pagesim calibrate import --llmservingsim` on {len(got.rows)} layer timings of "
        f"{bundle.meta['model']} measured by others on a real {bundle.meta['gpu']} (LLMServingSim's "
        f"profiles, {what}), NOT measured by pagesim; terms are per layer.",
        "vLLM serving (LLMServingSim's runs of the same build) uses CUDA graphs and "
        "torch.compile, which these eager timings do not have; the tables hold no host time "
        "(scheduling, input preparation), so step_overhead is the sampler's kernel time alone.",
        f"Not in the tables: {missing} (the simulator fills them from its analytic profile).",
        _skew_note(bundle),
    ]
    gpu = GPUS[bundle.gpu]
    profile = Profile(
        kind="external",
        gpu_name=f"{gpu.name} (measured by others: {repository})",
        gpu_spec=gpu.name,
        terms=terms,
        date=date or datetime.date.today().isoformat(),
        command=command,
        software={
            "source": "LLMServingSim layer profiles",
            "vllm": str(vllm),
            "cuda": str(bundle.meta.get("cuda_version", "")),
            "profiler_version": str(bundle.meta.get("profiler_version", "")),
            "device": str(bundle.meta["gpu"]),
            "model": f"{bundle.meta['model']} ({bundle.model.name}), TP {tp}",
            "timer": "vLLM layerwise profiler: CUDA kernel time per module call, mean of 3",
        },
        dtype="bfloat16",
        notes=" ".join(notes),
        sources=sources,
    )
    extra = render_extra(bundle, got, fits, alternative_fits(got.rows, fits), check, forms, chosen)
    return write_profile_folder(
        out_dir, profile, fits, render_report(profile, fits, seed) + "\n" + extra
    )
