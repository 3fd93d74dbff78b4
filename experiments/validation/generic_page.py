"""The sections of a manifest-driven dataset's page (:mod:`.generic`): the server, the
variants and when each was decided, the KV pool, and each series' saturation bracket."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.experiments.validation.generic import saturated_runs
from pagesim.experiments.validation.report import pct
from pagesim.experiments.validation.schema import DatasetManifest
from pagesim.experiments.validation.study import Study


def saturation_bracket(
    rates: np.ndarray, ttft_p50_s: np.ndarray, threshold_s: float
) -> tuple[float | None, float | None]:
    """The rates between which TTFT p50 first crosses ``threshold_s`` (runs at one rate
    averaged first): ``(below, above)``, ``(highest, None)`` when no run crosses, ``(None,
    lowest)`` when the lowest already has."""
    per_rate = pd.Series(np.asarray(ttft_p50_s, dtype=float)).groupby(np.asarray(rates)).mean()
    r, t = per_rate.index.to_numpy(dtype=float), per_rate.to_numpy()
    above = np.flatnonzero(t >= threshold_s)
    if len(above) == 0:
        return float(r[-1]), None
    i = above[0]
    return (float(r[i - 1]) if i > 0 else None), float(r[i])


def bracket_text(bracket: tuple[float | None, float | None]) -> str:
    lo, hi = bracket
    if hi is None:
        return f"above {lo:g} req/s (no run crosses)"
    if lo is None:
        return f"at or below {hi:g} req/s (the lowest rate has crossed)"
    return f"between {lo:g} and {hi:g} req/s"


def server_lines(study: Study) -> list[str]:
    m: DatasetManifest = study.extra["manifest"]
    s = m.server
    doc = study.runs[0].settings
    lines = [
        "## The server",
        "",
        f"{s.description}. Model `{s.model}`, GPU `{s.gpu}`, TP {s.tensor_parallel}"
        + (f", vLLM {s.vllm_version}" if s.vllm_version else "")
        + f"; flags `{s.args or '(defaults)'}`. Records: {m.origin} ({m.licence or 'licence: see origin'}); "
        "not copied here: the command reads them from `--data`.",
        "",
        "Replayed with: "
        + ", ".join(
            f"`{sec}.{k}: {v}`"
            for sec in ("hardware", "scheduler", "allocator", "server")
            for k, v in sorted(doc.get(sec, {}).items())
        )
        + f", `max_model_len: {doc.get('max_model_len')}`.",
    ]
    if m.protocol:
        lines += [
            "",
            f"The headline, the variants and the goals were fixed in `{m.protocol}` before any "
            "run of this dataset was replayed; what had been seen then is listed there.",
        ]
    return lines


def variant_lines(study: Study) -> list[str]:
    m: DatasetManifest = study.extra["manifest"]
    lines = [
        "",
        "## Variants",
        "",
        "| cost model | headline | decided at | post hoc | what it changes |",
        "|---|---|---|---|---|",
    ]
    for v in m.variants:
        what = []
        if v.rule:
            what.append(f"the {v.rule}-server rule")
        if v.profile:
            what.append(f"profile `{v.profile}`")
        if v.logged_pool:
            what.append("the pool the server logged")
        if v.serving_fit:
            what.append(f"serving path fitted on {', '.join(v.serving_fit)}")
        what += [f"`{k}: {val}`" for k, val in v.settings.items()]
        lines.append(
            f"| {v.name} | {'yes' if v.headline else ''} | `{v.decided_at}` | "
            f"{'**yes**' if v.post_hoc else 'no'} | {'; '.join(what) or '—'} |"
        )
    for name, why in study.extra.get("skipped", {}).items():
        lines.append(f"\nNot replayed: `{name}`, {why}.")
    return lines


def pool_lines(study: Study, replays: dict) -> list[str]:
    """The headline's pool against the logged one; sets ``study.extra["pool"]``."""
    m: DatasetManifest = study.extra["manifest"]
    if m.server.logged_pool_blocks is None:
        return []
    head = study.headline.name
    rep = next((r for (run, cost), r in replays.items() if cost == head), None)
    if rep is None:
        return []
    predicted, logged = int(rep.kv_blocks), int(m.server.logged_pool_blocks)
    study.extra["pool"] = (predicted, logged)
    return [
        "",
        "## KV pool",
        "",
        f"The headline's pool (the release's sizing rule from the model, the GPU and the "
        f"flags): **{predicted:,} blocks** against the {logged:,} the server logged "
        f"({m.server.logged_pool_source or 'the server'}): {pct(predicted / logged - 1)}.",
    ]


def saturation_lines(study: Study, table: pd.DataFrame) -> list[str]:
    thr = study.saturation_ttft_s
    saturated = saturated_runs(table, thr)
    lines = [
        "",
        "## Saturation",
        "",
        f"A run is *saturated* when its measured TTFT p50 exceeds {thr:g} s (its requests queue "
        f"behind the sequence cap or the pool): {len(saturated)} of {len(study.runs)} runs"
        + (f" ({', '.join(sorted(saturated))})" if saturated else "")
        + ". Per series (runs that differ only in rate), where TTFT p50 crosses "
        f"{thr:g} s: the bracket of the runs' rates, measured and under each cost model "
        "(the replays run at the same rates; nothing is interpolated):",
        "",
        "| series | runs | measured | " + " | ".join(c.name for c in study.cost_models) + " |",
        "|---|---|---|" + "---|" * len(study.cost_models),
    ]
    rows = table[(table["metric"] == "ttft") & (table["stat"] == "p50")]
    for series, sub in rows.groupby("launch", sort=False):
        first = sub[sub["cost_model"] == sub["cost_model"].iloc[0]]
        cells = [
            bracket_text(
                saturation_bracket(first["rate"].to_numpy(), first["measured_ms"] / 1e3, thr)
            )
        ]
        for c in study.cost_models:
            cs = sub[sub["cost_model"] == c.name]
            cells.append(
                bracket_text(
                    saturation_bracket(cs["rate"].to_numpy(), cs["predicted_ms"] / 1e3, thr)
                )
                if len(cs)
                else "—"
            )
        lines.append(f"| {series} | {first['run'].nunique()} | {' | '.join(cells)} |")
    return lines


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    return (
        server_lines(study)
        + variant_lines(study)
        + pool_lines(study, replays)
        + saturation_lines(study, table)
    )
