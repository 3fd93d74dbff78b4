"""Your own server's runs: a folder of ``vllm bench serve`` results and a manifest.

Scenario: you benchmarked your server at several request rates with ``vllm bench serve
--save-result --save-detailed`` and put the result files in one folder beside a manifest,
``pagesim-runs.yaml``::

    model: llama-3.1-8b            # a pagesim model name, a Hugging Face id, or the path
                                   # of the model's config.json (relative to this file)
    gpu: h100-sxm                  # a pagesim GPU name
    profile: h100-sxm-vidur        # the step profile (a shipped name or a path, e.g. the
                                   # profiles/serving/profile.yaml a validation of another
                                   # folder wrote; default: with vllm_version, the rule for an
                                   # unseen server, else the GPU's analytic roofline)
    vllm_version: 0.23.0           # optional: your server's release (its defaults, pool rule
                                   # and step rules apply; runs vllm-v1)
    scheduler: vllm-v1             # vllm-v1 for vLLM V1 (0.6 and later), vllm for v0
    server_args: "--max-num-seqs 256 --max-num-batched-tokens 8192"   # your server's flags
    server: vLLM 0.19 on our H100  # what to call it
    fit: [run-2.json]              # optional: the runs the serving path is fitted on
    runs: [run-2.json, run-4.json] # optional: the runs, files or folders (default: every
                                   # *.json here and every folder holding a BLIS trace.yaml)
    saturation_ttft_s: 1.0         # optional: the TTFT p50 whose crossing is saturation
    intervals:                     # optional: intervals around the headline (docs/intervals.md)
      {nominal: 0.9, replicates: 20, sources: [cost, serving], seed: 0}

A run is any record format pagesim reads (``pagesim.records``): a ``vllm bench serve`` JSON,
a BLIS trace v3 folder (``trace.yaml`` + ``trace.csv[.gz]``), ...; its name is its path in
the folder. With ``fit: []`` every run is held out and only the headline is scored.

``pagesim validate-vllm --data FOLDER --out OUT`` then validates pagesim on your server the
way it validates the published runs: every run replayed with your server's settings and
its exact requests (send times, prompt and output lengths), the results in
``validation.csv`` (each run ``held_out``, or ``fit`` where the serving path was fitted on
it), the page and its chart. Cost models:

- ``kernels``: the profile alone (nothing fitted on your runs); with ``vllm_version`` and no
  ``profile``, the rule for a server pagesim has not seen
  (``simulator/costmodel/headline_rule.py``: the GPU's compiled whole steps pooled per layer,
  the host's time per step overlapped under async scheduling);
- ``serving`` (the headline, where ``fit`` names runs): the profile plus your server's
  serving path fitted on the fit runs' records, written to
  ``OUT/profiles/serving/profile.yaml``: on a V1 server over the batches of each fit run
  replayed under its own step times (:mod:`pagesim.calibrate.serving_v1`), on a v0 server
  from the records directly (:mod:`pagesim.calibrate.serving`);
- ``recorded-steps`` (a V1 server): every step lasting what your server's step in progress
  then lasted, read off the result's token times: the scheduler's error alone, with each
  request's decode time priced by the headline on that replay's batches
  (``decode_given_concurrency``), the step cost's error alone.

Choose the fit runs before looking at any replay (a run below saturation without
preemption); the page reports the held-out runs' errors and, where the runs cross it, the
saturation rate measured and predicted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, ValidationError

from pagesim import yamlio
from pagesim.errors import ConfigError, DataError
from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.compare import Goal, run_ids, saturation_rates, within_goal
from pagesim.experiments.validation.manifest import Intervals
from pagesim.experiments.validation.report import pct, rate_text
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun
from pagesim.specbase import StrictSpec, format_validation_error

NAME = "vllm_bench_runs"
MANIFEST = "pagesim-runs.yaml"
LAUNCH = "as recorded"
COMMAND = "pagesim validate-vllm --data FOLDER --out OUT"
#: the yardsticks the page reports against (DistServe's targets: issue 28)
GOAL_TPOT_P50 = 0.10
GOAL_TTFT_P50 = 0.25
RECORDED = vcsv.RECORDED_STEPS


class RunsManifest(StrictSpec):
    """``pagesim-runs.yaml`` (module docstring)."""

    model: str
    gpu: str
    profile: str | None = None
    vllm_version: str | None = None
    scheduler: Literal["vllm-v1", "vllm"] = "vllm-v1"
    server_args: str = ""
    server: str = "your vLLM server"
    title: str | None = None
    fit: list[str] = Field(default_factory=list)
    runs: list[str] | None = None
    saturation_ttft_s: float = Field(default=1.0, gt=0)
    #: optional: intervals around the headline (docs/intervals.md), their coverage on the runs
    intervals: Intervals | None = None


def recognise(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def load(folder: Path) -> RunsManifest:
    path = folder / MANIFEST
    doc = yamlio.read(path, "runs manifest")
    try:
        manifest = RunsManifest.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from None
    from pagesim.experiments.model_paths import anchored
    from pagesim.simulator.gpu_names import resolve_gpu
    from pagesim.simulator.model_gpu_specs import get_model

    manifest = manifest.model_copy(update={"model": anchored(manifest.model, folder)})
    get_model(manifest.model)
    manifest = manifest.model_copy(update={"gpu": resolve_gpu(manifest.gpu, key=f"{path}: gpu")})
    _check_release(manifest, path)
    if manifest.profile is not None and (folder / manifest.profile).is_file():
        # a profile path is read relative to the manifest (another folder's fitted profile)
        manifest = manifest.model_copy(update={"profile": str(folder / manifest.profile)})
    files = manifest.runs or default_runs(folder)
    if not files:
        raise DataError(
            f"{folder}: no run beside {MANIFEST} (a vllm bench serve *.json, or a folder with a "
            "BLIS trace.yaml)"
        )
    if len(set(files)) != len(files):
        twice = next(n for n in files if files.count(n) > 1)
        raise ConfigError(f"{path}: runs: {twice!r} is listed twice")
    for key, names in (("runs", files), ("fit", manifest.fit)):
        for name in names:
            if not (folder / name).exists():
                raise ConfigError(f"{path}: {key}: no file or folder {name!r} in {folder}")
    if manifest.intervals is not None and len(files) < 2:
        raise ConfigError(
            f"{path}: intervals: their conformal factor is fitted on the other runs (leave one "
            f"run out), so they need two runs or more; {folder} has {len(files)}"
        )
    stray = [n for n in manifest.fit if n not in files]
    if stray:
        raise ConfigError(f"{path}: fit: {stray[0]!r} is not one of the runs {files}")
    return manifest.model_copy(update={"runs": files})


def default_runs(folder: Path) -> list[str]:
    """Every ``*.json`` beside the manifest and every folder below holding a BLIS trace."""
    files = sorted(p.name for p in folder.glob("*.json"))
    traces = sorted(p.parent.relative_to(folder).as_posix() for p in folder.glob("**/trace.yaml"))
    return files + [t for t in traces if t != "."]


def _check_release(manifest: RunsManifest, path: Path) -> None:
    if manifest.vllm_version is None:
        return
    from pagesim.simulator.vllm_releases import check_modelled

    try:
        check_modelled(manifest.vllm_version, key="vllm_version")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if manifest.scheduler != "vllm-v1":
        raise ConfigError(
            f"{path}: vllm_version {manifest.vllm_version} runs vLLM's V1 engine: scheduler must "
            f"be vllm-v1, got {manifest.scheduler!r}"
        )


def step_profile(manifest: RunsManifest) -> tuple[str | None, dict]:
    """The step profile and the settings it comes with: the manifest's profile, or with a
    release and no profile the rule for an unseen server (its host profile too)."""
    if manifest.profile is not None or manifest.vllm_version is None:
        return manifest.profile, {}
    from pagesim.simulator.costmodel.headline_rule import unseen_settings

    rule = unseen_settings(manifest.gpu)
    return rule.pop("hardware.profile"), rule


def _model_name(manifest: RunsManifest) -> str:
    """The model the page names: a shipped name as given, a config's own name."""
    from pagesim.simulator.model_gpu_specs import get_model

    return get_model(manifest.model).name


def read_runs(folder: Path, manifest: RunsManifest) -> list[ValidationRun]:
    from pagesim.experiments.validation.bench import replay_doc
    from pagesim.experiments.validation.server_args import server_settings
    from pagesim.records.registry import read_run

    if manifest.vllm_version is not None:
        from pagesim.experiments.validation.server_args import parse_server_args

        settings = dict(parse_server_args(manifest.server_args, v1=True).settings)
        settings["server.vllm_version"] = manifest.vllm_version
    else:
        settings = server_settings(manifest.server_args, v1=manifest.scheduler == "vllm-v1")
    read = [
        (name, read_run(folder / name, dataset=NAME, **_read_kwargs(folder / name, folder)))
        for name in manifest.runs or []
    ]
    doc = replay_doc(
        model=manifest.model,
        gpu=manifest.gpu,
        profile=None,
        scheduler=manifest.scheduler,
        settings=dict(settings),
        longest_request=max(longest(run) for _, run in read) if read else None,
    )
    doc.pop("metrics", None)
    doc["hardware"].pop("profile", None)
    runs = []
    for name, run in read:
        runs.append(
            ValidationRun(
                run=run,
                launch=LAUNCH,
                role="fit" if name in manifest.fit else "held_out",
                settings=doc,
                evidence=f"{name}; " + (run.meta.get("arrivals") or "send times as recorded"),
            )
        )
    return sorted(runs, key=lambda v: (v.rate, v.name))


def longest(run) -> int:
    """A run's longest request: prompt + output tokens."""
    t = run.table
    return int((t["prompt_len"] + t["output_len"]).max())


def _read_kwargs(path: Path, folder: Path) -> dict:
    """A BLIS trace is named by its path in the folder; the other formats by their file."""
    from pagesim.records.registry import format_of

    return {"root": folder} if format_of(path) == "blis-trace-v3" else {}


def _kernels(manifest: RunsManifest, vrun: ValidationRun):
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    return cost_model_for(
        step_profile(manifest)[0],
        get_model(manifest.model),
        get_gpu(manifest.gpu),
        tensor_parallel=int(vrun.settings["hardware"].get("tensor_parallel", 1)),
        with_serving=False,
    )


def _recorded_steps(manifest: RunsManifest):
    def make(vrun: ValidationRun):
        from pagesim.calibrate.step_times import recorded_costs

        return recorded_costs(vrun.run, shadow=_kernels(manifest, vrun))

    return make


def fit_serving(manifest: RunsManifest, fit_runs: list[ValidationRun]):
    """The serving path fitted on ``fit_runs`` (module docstring): the fit and the profile."""
    from pagesim.calibrate.serving import fit_serving as fit_v0
    from pagesim.calibrate.serving import serving_profile
    from pagesim.calibrate.serving_v1 import fit_serving_v1_timed
    from pagesim.experiments.validation.replay import replay
    from pagesim.simulator.costmodel.serving import ServingCostModel

    command = f"{COMMAND} (fit: {', '.join(manifest.fit)})"
    if manifest.scheduler == "vllm":
        padding = "--max-paddings" in manifest.server_args
        fit = fit_v0([v.run for v in fit_runs], _kernels(manifest, fit_runs[0]), padding=padding)
        origin = None
    else:
        recorded = CostModelChoice(RECORDED, None, make=_recorded_steps(manifest))
        logs = [(v.run, replay(v, recorded).cost_model.log, None) for v in fit_runs]

        def ttft(path) -> np.ndarray:
            out = []
            for v in fit_runs:
                model = ServingCostModel(_kernels(manifest, v), path)
                choice = CostModelChoice("serving", None, make=lambda _v, m=model: m)
                req = replay(v, choice, every_step=False).requests
                out.append(req.sort_values("request_id")["ttft_s"].to_numpy(dtype=float))
            return np.concatenate(out)

        measured = np.concatenate(
            [v.run.latencies()["ttft_s"].to_numpy(dtype=float) for v in fit_runs]
        )
        fit, _, _ = fit_serving_v1_timed(logs, ttft, measured)
        origin = (
            f"fitted by `{COMMAND}` on {manifest.server}'s vllm bench serve results "
            f"{', '.join(manifest.fit)}: each request's decode time given the batches of its "
            "run replayed under its own step times (calibrate/serving_v1.py); form "
            f"{fit.chosen.form} chosen by two-fold cross-validation; front-end delay where the "
            "fit runs replayed under the kernels plus the fitted step cost have the measured "
            "median TTFT of their least-queued requests"
        )
    profile = serving_profile(
        fit, step_profile(manifest)[0], manifest.gpu, command=command, server=manifest.server,
        origin=origin,
    )  # fmt: skip
    return fit, profile


def prepare(folder: Path, out_dir: Path) -> Study:
    manifest = load(Path(folder))
    vruns = read_runs(Path(folder), manifest)
    profile, rule = step_profile(manifest)
    base = profile or "analytic"
    if rule or (manifest.profile is None and manifest.vllm_version is not None):
        base = f"the rule for an unseen server ({base})"
    cost_models = [
        CostModelChoice(
            "kernels",
            profile,
            headline=not manifest.fit,
            note=f"{base} alone; nothing fitted on these runs",
            settings=rule,
        )
    ]
    extra: dict = {"manifest": manifest}
    if manifest.fit:
        fit, profile = fit_serving(manifest, [v for v in vruns if v.role == "fit"])
        path = profile.save(Path(out_dir) / "profiles" / "serving" / "profile.yaml")
        extra.update(fit=fit, profile=profile)
        cost_models.append(
            CostModelChoice(
                "serving",
                str(path),
                headline=True,
                note=f"{base} plus the serving path fitted on {', '.join(manifest.fit)}",
                settings=rule,
            )
        )
    if manifest.scheduler == "vllm-v1":
        cost_models.append(
            CostModelChoice(
                RECORDED,
                None,
                make=_recorded_steps(manifest),
                note="each step lasts what your server's step in progress then lasted, read off "
                "the result's token times: the scheduler's error alone; not a prediction",
            )
        )
    return Study(
        dataset=NAME,
        title=manifest.title or f"{manifest.server}: {_model_name(manifest)} on {manifest.gpu}",
        runs=vruns,
        cost_models=cost_models,
        command=COMMAND,
        extra=extra,
        saturation_ttft_s=manifest.saturation_ttft_s,
        intervals=manifest.intervals,
    )


def open_loop_rows(study: Study, replays: dict) -> list[dict]:
    """On a V1 server: each request's decode time priced by the headline on the batches of
    the recorded-steps replay (the step cost's error alone)."""
    from pagesim.calibrate.step_times import priced_decode_times

    if study.extra["manifest"].scheduler != "vllm-v1":
        return []
    head = study.headline
    rows: list[dict] = []
    for v in study.runs:
        rep = replays.get((v.name, RECORDED))
        if rep is None:
            continue
        log = rep.cost_model.log.copy()
        if head.name == "serving":
            # the recorded-steps replay was priced by the kernels: add the serving path
            serving = study.extra["profile"].serving
            log[:, 2] += serving.step_time_s(log[:, 4], log[:, 5], log[:, 6])
        predicted, measured = priced_decode_times(v.run, log)
        rows += vcsv.rows(
            **run_ids(study, v),
            cost_model=head.name,
            headline=True,
            metric="decode_given_concurrency",
            predicted_s=predicted,
            measured_s=measured,
        )
    return rows


def goals(study: Study, table: pd.DataFrame) -> list[Goal]:
    head = table[
        (table["cost_model"] == study.headline.name)
        & (table["role"] == "held_out")
        & (table["stat"] == "p50")
    ]
    out = []
    for metric, bound in (("tpot", GOAL_TPOT_P50), ("ttft", GOAL_TTFT_P50)):
        sub = head[head["metric"] == metric]
        if len(sub):
            out.append(
                within_goal(sub, f"{metric.upper()} p50 within ±{bound:.0%}, held-out runs", bound)
            )
    sat = saturation_rates(table, LAUNCH, study.saturation_ttft_s)
    if np.isfinite(sat.get("measured", np.inf)):
        predicted = sat.get(study.headline.name, np.inf)
        out.append(
            Goal(
                f"saturation (TTFT p50 crosses {study.saturation_ttft_s:g} s) within ±0.3 req/s",
                bool(np.isfinite(predicted) and abs(predicted - sat["measured"]) <= 0.3),
                f"predicted {rate_text(predicted, table['rate'].max())}, measured "
                f"{sat['measured']:.2f} req/s",
            )
        )
    return out


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    manifest: RunsManifest = study.extra["manifest"]
    lines = [
        "## Your server",
        "",
        f"{manifest.server}: `{_model_name(manifest)}` on `{manifest.gpu}`, scheduler "
        f"`{manifest.scheduler}`, flags `{manifest.server_args or '(vLLM defaults)'}`; the "
        f"runs' settings replayed: {_settings_text(study)}.",
    ]
    if manifest.scheduler == "vllm-v1":
        from pagesim.experiments.validation.bench import async_note
        from pagesim.experiments.validation.server_args import server_settings

        lines += async_note(
            server_settings(manifest.server_args, v1=True), "these replays", "`server_args`"
        )
    fit = study.extra.get("fit")
    if fit is not None:
        from pagesim.calibrate.serving_v1 import form_lines

        lines += [
            "",
            "## The serving path, fitted on the fit runs",
            "",
            f"Fitted on {fit.fitted_on}; chosen form **{fit.chosen.form}** "
            f"({study.extra['profile'].serving.describe()}). Every form tried:",
            "",
            *(form_lines(fit) if manifest.scheduler == "vllm-v1" else _v0_form_lines(fit)),
        ]
    sat = saturation_rates(table, LAUNCH, study.saturation_ttft_s)
    top = float(table["rate"].max())
    lines += [
        "",
        "## Saturation rate (req/s)",
        "",
        f"Where TTFT p50 crosses {study.saturation_ttft_s:g} s, interpolated between the runs' "
        "rates:",
        "",
        "| source | TTFT p50 crosses at |",
        "|---|---|",
        *(f"| {source} | {rate_text(rate, top)} |" for source, rate in sat.items()),
    ]
    decode = table[table["metric"] == "decode_given_concurrency"]
    if len(decode):
        lines += [
            "",
            "## The step cost alone",
            "",
            f"Each request's decode time priced by the headline on the batches of the `{RECORDED}` "
            "replay, beside the measured one (mean and p50 errors):",
            "",
            "| run | rate | role | mean | p50 |",
            "|---|---|---|---|---|",
        ]
        for run, sub in decode.groupby("run", sort=False):
            e = sub.set_index("stat")["error"]
            lines.append(
                f"| {run} | {sub['rate'].iloc[0]:g} | {sub['role'].iloc[0]} | {pct(e['mean'])} "
                f"| {pct(e['p50'])} |"
            )
    return lines


def _settings_text(study: Study) -> str:
    doc = study.runs[0].settings
    parts = []
    for section in ("hardware", "scheduler", "allocator"):
        for key, value in sorted(doc.get(section, {}).items()):
            parts.append(f"`{section}.{key}: {value}`")
    return ", ".join(parts)


def _v0_form_lines(fit) -> list[str]:
    lines = [
        "| form | chosen | ms per step | ms per sequence | µs per context token | µs per prefill token | front-end delay (ms) | decode RMS, 2-fold CV |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in fit.table().to_dict("records"):
        lines.append(
            f"| {r['form']} | {'**yes**' if r['chosen'] else 'no'} | {r['const_ms']:.3f} | "
            f"{r['per_seq_ms']:.3f} | {r['per_context_token_us']:.3f} | "
            f"{r['per_prefill_token_us']:.3f} | {r['frontend_delay_ms']:.2f} | "
            f"{r['decode_cv_rms']:.2%} |"
        )
    return lines
