"""``pagesim validate-vllm``: read → replay → compare → report, for any dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pagesim.experiments.validation import report, vcsv
from pagesim.experiments.validation.compare import closed_loop_rows
from pagesim.experiments.validation.datasets import recognise
from pagesim.experiments.validation.replay import replay

PAGE_NAME = "validation.md"


def run_validation(data_dir: str | Path, out_dir: str | Path, *, progress: bool = False):
    """The study, its ``validation.csv`` table, its goals and the replays."""
    folder, out_dir = Path(data_dir), Path(out_dir)
    dataset = recognise(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    study = dataset.prepare(folder, out_dir)
    pairs = [(v, c) for v in study.runs for c in study.cost_models if c.replays(v.name)]
    if progress:
        from tqdm import tqdm

        pairs = tqdm(pairs, desc=f"replaying {study.dataset}", unit="run")
    replays, rows = {}, []
    for vrun, cost in pairs:
        rep = replays[(vrun.name, cost.name)] = replay(vrun, cost)
        rows += getattr(dataset, "closed_loop_rows", closed_loop_rows)(study, vrun, cost.name, rep)
    rows += dataset.open_loop_rows(study, replays)
    table = vcsv.frame(rows)
    if study.intervals is not None:
        table = with_intervals(study, table, progress=progress)
    study.sections = dataset.sections(study, table, replays) + interval_lines(study, table)
    goals = dataset.goals(study, table)
    return study, table, goals, replays


def with_intervals(study, table, *, progress: bool = False):
    """``table`` with the headline's closed-loop rows' conformal intervals (intervals.py)."""
    from pagesim.experiments.validation.compare import saturation_rates
    from pagesim.experiments.validation.intervals import (
        calibrate,
        replicate_table,
        request_coverage,
    )

    cfg = study.intervals
    per_request: dict = {}
    raw = replicate_table(
        study, cfg.nominal, cfg.replicates, list(cfg.sources), cfg.seed, per_request,
        progress=progress,
    )  # fmt: skip
    head = table[(table["cost_model"] == study.headline.name) & table["metric"].isin(vcsv.METRICS)]
    key = getattr(cfg, "group", None)  # an info key: hold out a group of runs together
    groups = {v.name: str(v.info[key]) for v in study.runs} if key else None
    result, factor = calibrate(raw, head, cfg.nominal, groups)
    launch = study.runs[0].launch
    sat = saturation_rates(table, launch, study.saturation_ttft_s)["measured"]
    study.extra["intervals"] = (result, factor, sat)
    measured = {}
    for vrun in study.runs:
        lat = vrun.run.latencies()
        for metric in vcsv.METRICS:
            measured[(vrun.name, metric)] = lat[f"{metric}_s"].to_numpy(dtype=float)
    rates = {vrun.name: vrun.rate for vrun in study.runs}
    study.extra["request_intervals"] = request_coverage(
        per_request, measured, rates, cfg.nominal, sat
    )
    _record_factor(study, factor)
    keyed = result.set_index(["run", "metric", "stat"])
    table = table.copy()
    table["covered"] = table["covered"].astype(object)
    for i, row in table.iterrows():
        key = (row["run"], row["metric"], row["stat"])
        if row["cost_model"] == study.headline.name and key in keyed.index:
            table.at[i, "lo_ms"] = keyed.at[key, "lo_ms"]
            table.at[i, "hi_ms"] = keyed.at[key, "hi_ms"]
            table.at[i, "covered"] = bool(keyed.at[key, "covered"])
    return table


def _record_factor(study, factor: float) -> None:
    """The conformal factor into the headline profile written in the output folder (its
    provenance: what it was fitted on)."""
    from pagesim.simulator.costmodel.profile import IntervalCalibration, load_profile

    path = study.headline.profile
    if not path or Path(path).suffix not in (".yaml", ".yml") or not Path(path).is_file():
        return
    cfg = study.intervals
    runs = ", ".join(v.name for v in study.runs)
    calibration = IntervalCalibration(
        cfg.nominal,
        factor,
        tuple(cfg.sources),
        cfg.replicates,
        f"{study.dataset}: {runs} (split conformal over their TTFT, TPOT and E2E p50, p90 "
        "and mean)",
    )
    load_profile(path).with_terms(intervals=calibration).save(path)


def interval_lines(study, table) -> list[str]:
    """The page's interval section: how they are made, the factor, coverage per regime."""
    if "intervals" not in study.extra:
        return []
    from pagesim.experiments.validation.intervals import coverage_table

    result, factor, sat = study.extra["intervals"]
    cfg = study.intervals
    cov = coverage_table(result, sat)
    unit = getattr(cfg, "group", None) or "run"
    lines = [
        "",
        f"## Intervals ({cfg.nominal:.0%})",
        "",
        f"Each run replayed {cfg.replicates} times under the headline cost model, each replicate "
        f"one draw of the sources {', '.join(cfg.sources)} ("
        + "; ".join(SOURCE_WORDS[x] for x in cfg.sources)
        + ", each for the whole run; `simulator/costmodel/spread.py`); the raw interval is the "
        "replicates' central "
        f"{cfg.nominal:.0%}, widened by the conformal factor fitted on the other {unit}s' "
        f"statistics (leave-one-{unit}-out, `experiments/validation/intervals.py`): every run's "
        f"coverage is a held-out figure. The factor fitted on every run is **{factor:.2f}** (the "
        "raw interval's "
        f"half-width times {factor:.2f}). Coverage per regime ("
        + (f"measured saturation {sat:.2f} req/s" if np.isfinite(sat) else "no run saturates")
        + "), with the mean width relative to the real value:",
        "",
        "| regime | statistics | raw coverage | raw width | coverage | width |",
        "|---|---|---|---|---|---|",
    ]
    for r in cov.to_dict("records"):
        lines.append(
            f"| {r['regime']} | {r['statistics']} | {r['raw coverage']:.0%} | {r['raw width']:.0%} | "
            f"{r['coverage']:.0%} | {r['width']:.0%} |"
        )
    lines += [
        "",
        f"Per run (the factor used is fitted without the {unit}"
        + ("):" if unit == "run" else " it belongs to):"),
        "",
        "| run | rate | factor | statistics covered | mean width |",
        "|---|---|---|---|---|",
    ]
    for run, sub in result.groupby("run", sort=False):
        width = ((sub["hi_ms"] - sub["lo_ms"]) / sub["measured_ms"]).mean()
        lines.append(
            f"| {run} | {sub['rate'].iloc[0]:g} | {sub['factor'].iloc[0]:.2f} | "
            f"{int(sub['covered'].sum())} / {len(sub)} | {width:.0%} |"
        )
    lines += _request_interval_lines(study, cfg.nominal)
    lines += [
        "",
        "What an interval includes: "
        + "; ".join(SOURCE_WORDS[x] for x in cfg.sources)
        + ". What it cannot include: a rule the model lacks or a term it gets wrong "
        f"({study.extra.get('bias_note', 'a bias is not spread')}), a launch whose steps are "
        + (
            "slower."
            if "seeds" in cfg.sources
            else "slower, the requests' own randomness (the replays replay the real requests, "
            "so arrivals do not vary)."
        ),
    ]
    return lines


def _request_interval_lines(study, nominal: float) -> list[str]:
    """Per request: the share of real requests inside their own interval."""
    cov = study.extra.get("request_intervals")
    if cov is None or cov.empty:
        return []
    lines = [
        "",
        "Per request (each real request against its own interval: the replicates' central "
        f"{nominal:.0%} of its value, widened by the factor fitted on the other runs' "
        "requests, every metric pooled; a one-token output has no TPOT). The replays replay "
        "the real requests, so a request's interval holds the cost model's spread only, not "
        "what moved that request on the real server:",
        "",
        "| regime | metric | requests | raw coverage | coverage | median width | factors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in cov.to_dict("records"):
        lines.append(
            f"| {r['regime']} | {r['metric'].upper()} | {r['requests']:,} | "
            f"{r['raw coverage']:.0%} | {r['coverage']:.0%} | {r['median width']:.0%} | "
            f"{r['factors']} |"
        )
    return lines


#: what each source of spread varies, in the page's words
SOURCE_WORDS = {
    "cost": "one multiplier per kernel term, drawn from its held-out residuals",
    "serving": "one on the serving path, from its fit residuals",
    "seeds": "the requests and their arrivals drawn again from the run's own generator "
    "(another seed)",
}


def _descriptions(study, replays) -> dict[str, str]:
    """Each cost model's description, profiles written into the output folder named by
    their folder (no machine path in a page that may be committed)."""
    out = {}
    for c in study.cost_models:
        first = next(v.name for v in study.runs if (v.name, c.name) in replays)
        text = replays[(first, c.name)].description
        if c.profile and Path(c.profile).suffix in (".yaml", ".yml"):
            text = text.replace(c.profile, Path(c.profile).parent.name)
        out[c.name] = text
    return out


def page_text(study, table, goals, replays) -> str:
    """The validation page of a :func:`run_validation` result."""
    chart_name = report.CHART_NAME.format(dataset=study.dataset)
    return report.page(study, table, goals, _descriptions(study, replays), chart_name)


def write_validation(
    data_dir: str | Path,
    out_dir: str | Path,
    docs_page: str | Path | None = None,
    *,
    progress: bool = False,
) -> dict[str, Path]:
    """Run the validation of ``data_dir``'s dataset and write ``validation.csv``, the
    chart and the page into ``out_dir`` (and the page and chart beside ``docs_page``)."""
    out_dir = Path(out_dir)
    study, table, goals, replays = run_validation(data_dir, out_dir, progress=progress)
    chart_name = report.CHART_NAME.format(dataset=study.dataset)
    text = page_text(study, table, goals, replays)
    written = {"csv": vcsv.write(table, out_dir)}
    written["chart"] = report.draw_chart(study, table, out_dir / chart_name)
    written["page"] = out_dir / PAGE_NAME
    written["page"].write_text(text)
    for c in study.cost_models:
        if c.profile and Path(c.profile).is_file():
            written[f"profile {Path(c.profile).parent.name}"] = Path(c.profile)
    if docs_page is not None:
        docs_page = Path(docs_page)
        docs_page.parent.mkdir(parents=True, exist_ok=True)
        docs_page.write_text(text)
        written["docs_page"] = docs_page
        written["docs_chart"] = report.draw_chart(study, table, docs_page.parent / chart_name)
    return written
