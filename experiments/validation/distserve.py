"""DistServe's real vLLM runs (OPT-13B, one A100-SXM-80GB): the reader of the validation.

Scenario: DistServe (OSDI'24) published per-request records of its baseline vLLM
(vLLM v0.2.3 with per-token timestamps) serving OPT-13B with ShareGPT requests at
1-4 req/s, one CSV per run (``vllm-N-RATE.csv``, :func:`~pagesim.records.
distserve_csv.read_distserve_csv`). The manifest (``distserve.yaml``) says which launch of the server
each run came from (its ``--max-num-batched-tokens`` and ``--max-paddings``), with the
evidence, and each run's role: the serving path is fitted on the ``fit`` runs only.

Each run is replayed through the ``vllm`` scheduler with v0.2's prefill rule
(``prefill_padding``, ``max_paddings``) and the KV pool v0.2.3 would have given itself
(:func:`~pagesim.simulator.memory.vllm_v02_pool`), under three cost models:

- ``analytic``: the roofline of the A100-80GB (no data);
- ``kernels``: the shipped ``a100-80gb-vidur`` profile (fitted on Vidur's operator tables,
  its per-step CPU overhead included; nothing fitted on these runs);
- ``serving`` (headline): the same plus a serving path (``calibrate/serving.py``) fitted on
  the fit runs' records, its form chosen on them alone (the manifest's rule); shipped as
  :data:`SERVING_PROFILE`, and refitted by every validation (the page says whether the
  refit equals the shipped one).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.compare import Goal, run_ids, saturation_rates, within_goal
from pagesim.experiments.validation.manifest import Manifest, load_manifest
from pagesim.experiments.validation.report import pct, rate_text
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun

NAME = "distserve_vllm_opt13b"
MANIFEST = "distserve.yaml"
BASE_PROFILE = "a100-80gb-vidur"
#: the shipped profile: BASE_PROFILE plus the serving path fitted on the manifest's fit runs
SERVING_PROFILE = "a100-80gb-vidur-vllm023-serving"
RUN_FILE = re.compile(r"^vllm-(\d+)-(\d+(?:\.\d+)?)\.csv$")
COMMAND = (
    "pagesim validate-vllm --data DATA/distserve_vllm_opt13b --out OUT --docs docs/validation.md"
)
#: the server, as the fitted profile names it
SERVER = "DistServe's vLLM v0.2.3 (--engine-use-ray --worker-use-ray) serving OPT-13B on one A100-SXM-80GB"
#: targets (issue's; the headline cost model on the held-out runs of the fit runs' launch)
GOAL_TPOT_P50 = 0.10
GOAL_TTFT_P50 = 0.25
GOAL_SATURATION_REQ_S = 0.3
GOAL_DECODE_GIVEN_CONCURRENCY = 0.05
GOAL_CROSS_LAUNCH = 0.20
#: rates (req/s) at which the default launch's highest-rate run is sent again, faster, to
#: find where the headline's TTFT p50 crosses the threshold when no run does (a diagnostic:
#: the same requests, arrivals scaled)
BEYOND_RATES = (4.5, 5.0, 6.0, 8.0)


def recognise(folder: Path) -> bool:
    return any(RUN_FILE.match(p.name) for p in folder.iterdir())


def kernels(profile: str | None = BASE_PROFILE):
    """The kernel cost model of OPT-13B on the A100-80GB (no serving path)."""
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    return cost_model_for(profile, get_model("opt-13b"), get_gpu("a100-80gb"), with_serving=False)


def pools(manifest: Manifest) -> dict:
    """Per launch, vLLM v0.2.3's KV pool under its settings (memory model's terms)."""
    from pagesim.simulator.memory import vllm_v02_pool
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    out = {}
    for launch in manifest.launches:
        s = manifest.settings_of(launch)
        out[launch] = vllm_v02_pool(
            get_model(s["hardware"]["model"]),
            get_gpu(s["hardware"]["gpu"]),
            gpu_memory_utilization=s["hardware"]["gpu_memory_utilization"],
            max_num_batched_tokens=s["scheduler"]["max_num_batched_tokens"],
            max_num_seqs=s["scheduler"]["max_num_seqs"],
            block_size=s["allocator"]["block_size"],
            swap_space_gib=s["allocator"]["swap_space_gib"],
        )
    return out


def read_runs(folder: Path, manifest: Manifest) -> list[ValidationRun]:
    from pagesim.records.distserve_csv import read_distserve_csv

    if not folder.is_dir():
        raise DataError(f"--data {folder}: not a folder (DistServe's vllm-N-RATE.csv runs)")
    files = sorted(p for p in folder.iterdir() if RUN_FILE.match(p.name))
    if not files:
        raise DataError(f"--data {folder}: no file named like vllm-N-RATE.csv")
    pool = pools(manifest)
    out = []
    for path in files:
        run = read_distserve_csv(path, NAME)
        entry = manifest.runs.get(run.name)
        launch = entry.launch if entry else manifest.default_launch
        role = entry.role if entry else "held_out"
        evidence = (entry.evidence if entry and entry.evidence else "") or (
            "" if entry else f"not in the manifest: the {launch} launch's settings"
        )
        settings = manifest.settings_of(launch)
        slots = pool[launch].num_gpu_blocks * settings["allocator"]["block_size"]
        settings["hardware"] = {**settings["hardware"], "kv_slots": slots}
        out.append(ValidationRun(run, launch, role, settings, evidence))
    return sorted(
        out, key=lambda v: (v.launch != manifest.default_launch, v.rate, v.run.num_requests)
    )


def fit(vruns: list[ValidationRun], manifest: Manifest):
    """The serving path fitted on the manifest's fit runs (calibrate/serving.py)."""
    from pagesim.calibrate.serving import fit_serving

    fit_runs = [v.run for v in vruns if v.role == "fit"]
    if not fit_runs:
        raise DataError(f"none of the manifest's fit runs {manifest.fit_runs()} is in the folder")
    result = fit_serving(
        fit_runs,
        kernels(),
        forms=manifest.serving_forms,
        padding=True,
        selection_margin=manifest.selection_margin,
    )
    sources = tuple(
        {**s, "repository": manifest.repository, "commit": manifest.commit} for s in result.sources
    )
    result.sources = sources
    return result


def serving_profile(fit_result, manifest: Manifest, vruns: list[ValidationRun]):
    """BASE_PROFILE with the fitted serving path: the bytes ``pagesim calibrate
    fit-serving`` writes from the same records (:func:`fit_command`)."""
    from pagesim.calibrate.serving import serving_profile as build

    return build(
        fit_result, BASE_PROFILE, "a100-80gb", command=fit_command(manifest, vruns), server=SERVER
    )


def fit_command(manifest: Manifest, vruns: list[ValidationRun]) -> str:
    """The ``pagesim calibrate fit-serving`` command that fits the same serving path."""
    from pathlib import PurePath

    from pagesim.calibrate.serving_cli import command_line

    names = [PurePath(p).name for v in vruns if v.role == "fit" for p, _ in v.run.sources]
    return command_line(
        names,
        model="opt-13b",
        gpu="a100-80gb",
        base=BASE_PROFILE,
        padding=True,
        origins=[f"{n}={manifest.repository}@{manifest.commit}" for n in names],
        server=SERVER,
    )


def prepare(folder: Path, out_dir: Path) -> Study:
    """Read the runs, fit the serving path on the fit runs, write its profile into
    ``out_dir``, and name the cost models (module docstring)."""
    manifest = load_manifest(MANIFEST)
    vruns = read_runs(Path(folder), manifest)
    fit_result = fit(vruns, manifest)
    profile = serving_profile(fit_result, manifest, vruns)
    path = profile.save(Path(out_dir) / "profiles" / SERVING_PROFILE / "profile.yaml")
    return Study(
        dataset=NAME,
        title=manifest.title,
        runs=vruns,
        cost_models=[
            CostModelChoice("analytic", None, note="nothing fitted"),
            CostModelChoice("kernels", BASE_PROFILE, note="nothing fitted on these runs"),
            CostModelChoice(
                "serving",
                str(path),
                headline=True,
                note=f"the serving path fitted on {', '.join(manifest.fit_runs())} (shipped as `{SERVING_PROFILE}`)",
            ),
        ],
        command=COMMAND,
        extra={
            "manifest": manifest,
            "fit": fit_result,
            "profile": profile,
            "pools": pools(manifest),
            "bias_note": "here, a KV pool larger than the real one: above saturation the "
            "error is a bias, not spread",
        },
        saturation_ttft_s=manifest.saturation_ttft_s,
        intervals=manifest.intervals,
    )


def open_loop_rows(study: Study, replays: dict) -> list[dict]:
    """Per run: decode time given the measured concurrency and TTFT given the measured
    state (calibrate/serving.py), under the kernels alone and with the serving path."""
    from pagesim.calibrate.serving import Coefficients, coefficients_of, decode_time_errors

    k = kernels()
    profile = study.extra["profile"]
    variants = [("kernels", Coefficients(step={})), ("serving", coefficients_of(profile.serving))]
    rows: list[dict] = []
    for v in study.runs:
        for name, coefs in variants:
            d = decode_time_errors(v.run, k, coefs, padding=True)
            for metric, pred, meas in (
                ("decode_given_concurrency", d["decode_predicted_s"], d["decode_measured_s"]),
                ("ttft_given_state", d["ttft_predicted_s"], d["ttft_measured_s"]),
            ):
                rows += vcsv.rows(
                    **run_ids(study, v),
                    cost_model=name,
                    headline=name == study.headline.name,
                    metric=metric,
                    predicted_s=pred.to_numpy(),
                    measured_s=meas.to_numpy(),
                )
    return rows


def _sel(table: pd.DataFrame, **eq) -> pd.DataFrame:
    mask = np.ones(len(table), dtype=bool)
    for key, value in eq.items():
        mask &= table[key].isin(value) if isinstance(value, list | tuple) else table[key] == value
    return table[mask]


def goals(study: Study, table: pd.DataFrame) -> list[Goal]:
    manifest: Manifest = study.extra["manifest"]
    head = study.headline.name
    later = manifest.default_launch
    sat = saturation_rates(table, later, study.saturation_ttft_s)
    held = _sel(table, cost_model=head, launch=later, role="held_out")
    below = held[held["rate"] < sat["measured"]]
    top = float(table["rate"].max())
    gap = abs(sat[head] - sat["measured"]) if np.isfinite(sat[head]) else float("inf")
    cross = _sel(table, cost_model=head, role="cross_launch", stat="p50", metric=["tpot", "ttft"])
    return [
        within_goal(
            _sel(below, metric="tpot", stat="p50"),
            f"TPOT p50 within ±{GOAL_TPOT_P50:.0%}, held-out runs below saturation",
            GOAL_TPOT_P50,
        ),
        within_goal(
            _sel(below, metric="ttft", stat="p50"),
            f"TTFT p50 within ±{GOAL_TTFT_P50:.0%}, held-out runs below saturation",
            GOAL_TTFT_P50,
        ),
        Goal(
            f"saturation (TTFT p50 crosses {study.saturation_ttft_s:g} s) within "
            f"±{GOAL_SATURATION_REQ_S:g} req/s ({later} launch)",
            gap <= GOAL_SATURATION_REQ_S,
            f"predicted {rate_text(sat[head], top)}"
            + _beyond_text(study)
            + f", measured {rate_text(sat['measured'], top)} req/s",
        ),
        within_goal(
            _sel(held, metric="decode_given_concurrency", stat="mean"),
            f"mean decode time given the measured concurrency within ±{GOAL_DECODE_GIVEN_CONCURRENCY:.0%}, "
            "each held-out run",
            GOAL_DECODE_GIVEN_CONCURRENCY,
        ),
        within_goal(
            cross.assign(run=cross["run"] + " " + cross["metric"].str.upper()),
            f"cross-launch runs (their own settings, no per-launch fit): TTFT and TPOT p50 within "
            f"±{GOAL_CROSS_LAUNCH:.0%}",
            GOAL_CROSS_LAUNCH,
        ),
    ]


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """The page's DistServe sections: launches, the KV pool, the serving fit, the
    decode time given the measured concurrency, saturation, the limits."""
    study.extra["beyond"] = beyond_saturation(study, table)
    parts = (_launch_lines, _pool_lines, _fit_lines, _open_loop_lines, _saturation_lines)
    return [line for part in parts for line in part(study, table, replays)]


def beyond_saturation(study: Study, table: pd.DataFrame):
    """Where the headline's TTFT p50 crosses the threshold beyond the default launch's runs
    (when it does not within them): that launch's highest-rate run sent again at
    :data:`BEYOND_RATES`, its arrival times scaled, under the headline. (rate, the run, the
    points (rate, TTFT p50 s)); None where the crossing is within the runs."""
    from dataclasses import replace

    from pagesim.experiments.validation.compare import saturation_rate
    from pagesim.experiments.validation.replay import replay

    manifest: Manifest = study.extra["manifest"]
    launch = manifest.default_launch
    head = study.headline
    if np.isfinite(saturation_rates(table, launch, study.saturation_ttft_s)[head.name]):
        return None
    runs = [v for v in study.runs if v.launch == launch]
    top = max(runs, key=lambda v: (v.rate, v.name))
    rows = _sel(table, run=top.name, cost_model=head.name, metric="ttft", stat="p50")
    points = [(top.rate, float(rows["predicted_ms"].iloc[0]) / 1e3)]
    trace = top.run.trace()
    for rate in (r for r in BEYOND_RATES if r > top.rate):
        faster = replace(
            trace, table=trace.table.assign(arrival_s=trace.table["arrival_s"] * (top.rate / rate))
        )
        rep = replay(replace(top, trace=faster), head, every_step=False)
        points.append((rate, float(np.median(rep.requests["ttft_s"]))))
    rates, p50s = zip(*points, strict=True)
    crossing = saturation_rate(np.array(rates), np.array(p50s), study.saturation_ttft_s)
    return crossing, top.name, points


def _beyond_text(study: Study) -> str:
    beyond = study.extra.get("beyond")
    if beyond is None:
        return ""
    crossing, run, points = beyond
    where = f"{crossing:.2f}" if np.isfinite(crossing) else f"beyond {points[-1][0]:g}"
    return f"; {where} with {run}'s requests sent faster"


def _launch_lines(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """The records, the server and its launches."""
    manifest: Manifest = study.extra["manifest"]
    lines = [
        "## The server and its launches",
        "",
        f"Records: {manifest.origin} (not copied here: the command reads them from `--data`). "
        f"Server: {manifest.server}.",
        "",
        "| launch | settings | evidence |",
        "|---|---|---|",
    ]
    for name, launch in manifest.launches.items():
        settings = ", ".join(f"{k} {v}" for sec in launch.settings.values() for k, v in sec.items())
        lines.append(f"| {name} | {settings} | {launch.evidence} |")
    return lines


def _pool_lines(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """The KV pool as vLLM v0.2.3 sized it, beside the ceiling the records imply."""
    from pagesim.calibrate.serving import records_blocks_in_use

    lines = [
        "",
        "Both launches replay with v0.2's prefill rule (`scheduler.prefill_padding: true`, "
        "`max_paddings` the launch's), block 16, `max_num_seqs` 1024, `max_model_len` 2048, "
        "swap 16 GiB, and the KV pool below.",
        "",
        "## The KV pool as vLLM v0.2.3 sized it",
        "",
        "`num_gpu_blocks = (total memory × 0.95 − peak) // block bytes`, the peak being "
        "`torch.cuda.max_memory_allocated()` after a profiling pass of 1,024 dummy prompts "
        "(`simulator/memory.py`, `vllm_v02_pool`, each term's derivation in its docstring):",
        "",
        "| term (GiB) | " + " | ".join(study.extra["pools"]) + " | what it is |",
        "|---|" + "---|" * len(study.extra["pools"]) + "---|",
    ]
    pools_ = study.extra["pools"]
    first = next(iter(pools_.values()))
    for i, (term, _, what) in enumerate(first.terms()):
        cells = " | ".join(f"{p.terms()[i][1]:.2f}" for p in pools_.values())
        lines.append(f"| {term} | {cells} | {what} |")
    lines.append(
        "| GPU blocks | " + " | ".join(f"{p.num_gpu_blocks:,}" for p in pools_.values()) + " | |"
    )
    lines += [
        "",
        "Beside it, the ceiling the records imply: blocks held by the requests decoding at "
        "once (each `ceil((prompt + tokens so far) / 16)`, tokens interpolated between its "
        "first and last token), the run's maximum, and the same in the headline replay:",
        "",
        "| run | rate | launch | pool (model) | max blocks in use, records | max blocks in use, replay |",
        "|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        rep = replays[(v.name, study.headline.name)]
        sim_max = int((rep.kv_blocks - rep.timeseries["num_free_blocks"]).max())
        lines.append(
            f"| {v.name} | {v.rate:g} | {v.launch} | {rep.kv_blocks:,} | "
            f"{int(records_blocks_in_use(v.run).max()):,} | {sim_max:,} |"
        )
    return lines


def _fit_lines(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """Every serving form tried, and the one chosen."""
    manifest: Manifest = study.extra["manifest"]
    fit_result = study.extra["fit"]
    lines = [
        "",
        "The model's pool is an estimate from the profiling pass's formula, not fitted: where "
        "the records' ceiling is below it, the real server ran out of blocks earlier than "
        "the model says (something the estimate leaves out took that memory; the server's "
        "log line `# GPU blocks: N` would settle it).",
        "",
        *_ceiling_diagnostic(study, table),
        "",
        "## The serving path, fitted on the fit runs",
        "",
        f"Fitted on {fit_result.fitted_on} (`calibrate/serving.py`): each form's per-step "
        "coefficients minimise the relative error of every request's decode time given the "
        "measured concurrency, and the front-end delay and per-prefill-token cost that of its "
        "TTFT given the measured state. Every form tried, and the one chosen by the "
        "manifest's rule (two-fold cross-validated decode-time RMS on the fit runs alone; "
        f"more coefficients must win by {manifest.selection_margin:.1%}):",
        "",
        "| form | chosen | ms per step | ms per sequence | µs per context token | µs per prefill token | front-end delay (ms) | decode RMS | decode RMS, 2-fold CV | TTFT RMS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in fit_result.table().to_dict("records"):
        lines.append(
            f"| {r['form']} | {'**yes**' if r['chosen'] else 'no'} | {r['const_ms']:.3f} | "
            f"{r['per_seq_ms']:.3f} | {r['per_context_token_us']:.3f} | "
            f"{r['per_prefill_token_us']:.3f} | {r['frontend_delay_ms']:.2f} | "
            f"{r['decode_rms']:.2%} | {r['decode_cv_rms']:.2%} | {r['ttft_rms']:.2%} |"
        )
    return lines


def _open_loop_lines(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """The decode time given the measured concurrency, per run."""
    lines = [
        "",
        "## Decode time given the measured concurrency",
        "",
        "The step cost's error with the scheduler taken out: each request's decode time "
        "predicted from the concurrency the records show (`calibrate/serving.py`, 3), and its "
        "TTFT from the state at its arrival (4); errors of the mean and the median:",
        "",
        "| run | rate | role | kernels: decode mean | decode p50 | serving: decode mean | decode p50 | serving: TTFT mean | TTFT p50 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        cells = []
        for cost, metric in (
            ("kernels", "decode_given_concurrency"),
            ("serving", "decode_given_concurrency"),
            ("serving", "ttft_given_state"),
        ):
            sub = _sel(table, run=v.name, cost_model=cost, metric=metric).set_index("stat")
            cells += [pct(sub.loc["mean", "error"]), pct(sub.loc["p50", "error"])]
        lines.append(f"| {v.name} | {v.rate:g} | {v.role} | {' | '.join(cells)} |")
    return lines


def _saturation_lines(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    """Saturation rates per launch, and what is not modelled."""
    manifest: Manifest = study.extra["manifest"]
    sat_lines = []
    for launch in manifest.launches:
        rates = sorted(set(_sel(table, launch=launch)["rate"]))
        if len(rates) < 2:
            continue
        sat = saturation_rates(table, launch, study.saturation_ttft_s)
        top = max(rates)
        sat_lines += [f"| {launch} | {s} | {rate_text(x, top)} |" for s, x in sat.items()]
        beyond = study.extra.get("beyond")
        if beyond is not None and launch == manifest.default_launch:
            crossing, run, points = beyond
            where = f"{crossing:.2f}" if np.isfinite(crossing) else f"> {points[-1][0]:g}"
            sat_lines.append(
                f"| {launch} | {study.headline.name}, {run}'s requests sent faster | {where} |"
            )
    lines = [
        "",
        "## Saturation rate (req/s)",
        "",
        f"Where TTFT p50 crosses {study.saturation_ttft_s:g} s, interpolated linearly between the "
        "runs' rates (runs at one rate averaged):",
        "",
        "| launch | source | TTFT p50 crosses 1 s at |",
        "|---|---|---|",
        *sat_lines,
        *_beyond_lines(study),
        "",
        "## What is not modelled",
        "",
        "- The serving path is one fitted cost per step, per sequence and per token on top of "
        "the kernels; it absorbs whatever the kernel profile misses on this server (v0.2.3's "
        "paged-attention kernel on OPT-13B's 40 heads, xformers prefill), not only host work.",
        "- A request preempted and recomputed is counted as decoding throughout its life in "
        "the reconstruction (the records do not show preemptions).",
        "- The earlier launch's steps are slower at equal batch (the records' own evidence); "
        "no per-launch fit: its runs show that offset.",
    ]
    return lines


def _beyond_lines(study: Study) -> list[str]:
    beyond = study.extra.get("beyond")
    if beyond is None:
        return []
    _, run, points = beyond
    return [
        "",
        f"Where no run crosses it under the headline: the requests of {run} (its prompt and "
        "output lengths) sent again faster, their arrival times scaled (the same requests, "
        "not new runs; a diagnostic), TTFT p50 under the headline: "
        + ", ".join(f"{rate:g} req/s {p50 * 1e3:,.0f} ms" for rate, p50 in points)
        + ".",
    ]


def _ceiling_diagnostic(study: Study, table: pd.DataFrame) -> list[str]:
    """What-if, not a result: the headline replays of the default launch's runs with the
    pool the records' ceiling implies (read off held-out runs, so used for nothing else)."""
    from dataclasses import replace as dc_replace

    from pagesim.calibrate.serving import records_blocks_in_use
    from pagesim.experiments.validation.compare import closed_loop_rows, saturation_rate
    from pagesim.experiments.validation.replay import replay

    manifest: Manifest = study.extra["manifest"]
    later = [v for v in study.runs if v.launch == manifest.default_launch]
    ceiling = int(max(records_blocks_in_use(v.run).max() for v in later))
    rows = []
    for v in later:
        settings = {**v.settings, "hardware": {**v.settings["hardware"], "kv_slots": ceiling * 16}}
        what_if = dc_replace(v, settings=settings)
        rows += closed_loop_rows(
            study, what_if, study.headline.name, replay(what_if, study.headline)
        )
    t = pd.DataFrame(rows)
    p50 = t[t["stat"] == "p50"]
    ttft, tpot = p50[p50["metric"] == "ttft"], p50[p50["metric"] == "tpot"]
    sat = saturation_rate(
        ttft["rate"].to_numpy(), ttft["predicted_ms"].to_numpy() / 1e3, study.saturation_ttft_s
    )
    measured = saturation_rate(
        ttft["rate"].to_numpy(), ttft["measured_ms"].to_numpy() / 1e3, study.saturation_ttft_s
    )
    top = float(ttft["rate"].max())
    lines = [
        f"*Diagnostic, not a result:* the {manifest.default_launch} launch's runs replayed with the "
        f"headline cost model and a pool of {ceiling:,} blocks, the records' ceiling (read off "
        "held-out runs, so it is used for nothing else): saturation at "
        f"{rate_text(sat, top)} req/s (measured {rate_text(measured, top)}).",
        "",
        "| run | rate | TTFT p50 error | TPOT p50 error |",
        "|---|---|---|---|",
    ]
    for (run, rate), a, b in zip(
        ttft[["run", "rate"]].itertuples(index=False), ttft["error"], tpot["error"], strict=True
    ):
        lines.append(f"| {run} | {rate:g} | {pct(a)} | {pct(b)} |")
    return lines
