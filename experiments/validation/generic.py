"""A dataset validated from its manifest alone: the reader interface of :mod:`.datasets`.

Scenario: a shipped manifest (``manifests/*.yaml``, schema :mod:`.schema`) says how to
recognise its data folder, which records reader reads its runs (``pagesim.records``), what
server ran them (model, GPU, vLLM release, flags), the roles, the variants and the goals.
Everything a page holds then comes from here and the generic report (:mod:`.report`):

- each run replayed with the server's settings under each variant (:func:`prepare`): the
  unseen-server rule (``simulator/costmodel/headline_rule.py``), a named profile, the pool
  the server logged, or a serving path fitted on named runs (written to
  ``OUT/profiles/<variant>/profile.yaml``);
- runs grouped into series by their path with the rate taken out (``agg_2rps`` and
  ``agg_4rps`` of one sweep are one series): saturation is a property of a series;
- a run is *saturated* when its measured TTFT p50 exceeds the manifest's threshold (its
  requests queue behind the sequence cap or the pool); goals say which regime they score;
- the page's sections: the server, the variants with the commit that decided each, the KV
  pool predicted against the logged one, and per series the saturation bracket the runs
  show (the two rates between which TTFT p50 crosses the threshold), measured and predicted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from pagesim.errors import ConfigError, DataError
from pagesim.experiments.validation.compare import Goal, within_goal
from pagesim.experiments.validation.schema import (
    DatasetManifest,
    Variant,
    load_dataset_manifest,
    shipped_manifests,
)
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun

NAME = "manifest"
#: a run path's rate part, taken out to name its series
RATE_PART = re.compile(r"\d+(?:\.\d+)?rps")
#: the series of a run without a rate in its path
ONE_SERIES = "runs"


def manifest_for(folder: Path) -> tuple[Path, DatasetManifest] | None:
    """The shipped manifest whose ``match`` the folder satisfies (None: none does)."""
    for path in shipped_manifests():
        manifest = load_dataset_manifest(path)
        probe = folder / manifest.match.file
        if not probe.is_file():
            continue
        try:
            doc = json.loads(probe.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and all(doc.get(k) == v for k, v in manifest.match.keys.items()):
            return path, manifest
    return None


def recognise(folder: Path) -> bool:
    return manifest_for(folder) is not None


def series_of(name: str) -> str:
    """A run's series: its path with the rate part taken out (module docstring)."""
    return RATE_PART.sub("*rps", name) if RATE_PART.search(name) else ONE_SERIES


def server_doc(manifest: DatasetManifest) -> dict:
    """The RunSpec document every run replays with (the profile left to the variant)."""
    from pagesim.experiments.validation.bench import replay_doc
    from pagesim.experiments.validation.server_args import parse_server_args, server_settings

    server = manifest.server
    scheduler = "vllm-v1" if server.vllm_version else "vllm"
    if server.vllm_version:
        settings = dict(parse_server_args(server.args, v1=True).settings)
    else:
        settings = server_settings(server.args)
    if server.vllm_version and "max_model_len" not in settings:
        raise ConfigError(
            f"manifest {manifest.dataset}: server.args: give --max-model-len (a named release "
            "sizes its pool for it; vLLM's default is the model's context length)"
        )
    doc = replay_doc(
        model=server.model,
        gpu=server.gpu,
        profile=None,
        scheduler=scheduler,
        settings=dict(settings),
    )
    doc["hardware"]["tensor_parallel"] = server.tensor_parallel
    doc["hardware"].pop("profile", None)
    doc.pop("metrics", None)
    if server.vllm_version:
        doc["server"] = {"vllm_version": server.vllm_version}
    return doc


def read_runs(folder: Path, manifest: DatasetManifest) -> list[ValidationRun]:
    from pagesim.records.registry import RECORD_FORMATS

    paths = sorted(folder.glob(manifest.runs))
    if not paths:
        raise DataError(f"--data {folder}: no run matches {manifest.runs!r} ({manifest.reader})")
    doc = server_doc(manifest)
    out = []
    for path in paths:
        run = RECORD_FORMATS[manifest.reader](path, root=folder, dataset=manifest.dataset)
        role = "fit" if run.name in manifest.fit else "held_out"
        failed = run.meta.get("num_failed", 0)
        evidence = f"{run.meta.get('rate', 'rate')}" + (
            f"; {failed} failed requests" if failed else ""
        )
        out.append(ValidationRun(run, series_of(run.name), role, doc, evidence))
    return sorted(out, key=lambda v: (v.launch, v.rate, v.name))


def _choice(variant: Variant, manifest: DatasetManifest, vruns, out_dir: Path) -> CostModelChoice:
    from pagesim.simulator.costmodel.headline_rule import unseen_settings

    settings = dict(variant.settings)
    profile = variant.profile
    if variant.rule == "unseen":
        rule = unseen_settings(manifest.server.gpu)
        profile = rule.pop("hardware.profile")
        settings = {**rule, **settings}
    if variant.logged_pool:
        block = int(vruns[0].settings.get("allocator", {}).get("block_size", 16))
        settings["hardware.kv_slots"] = manifest.server.logged_pool_blocks * block
    fit_runs = frozenset()
    if variant.serving_fit:
        profile = _fit_serving(variant, manifest, vruns, profile, settings, out_dir)
        fit_runs = frozenset(variant.serving_fit)
    return CostModelChoice(
        variant.name,
        profile,
        headline=variant.headline,
        note=_variant_note(variant),
        post_hoc=variant.post_hoc,
        settings=settings,
        fit_runs=fit_runs,
    )


def _variant_note(variant: Variant) -> str:
    status = "POST HOC" if variant.post_hoc else "decided before its runs were replayed"
    return f"{variant.note} ({status}, {variant.decided_at})".strip()


def _fit_serving(variant, manifest, vruns, base, settings, out_dir: Path) -> str:
    """The serving path fitted on the variant's runs (own_runs.fit_serving's V1 fit)."""
    from pagesim.experiments.validation.own_runs import RunsManifest, fit_serving

    server = manifest.server
    runs = [v for v in vruns if v.name in variant.serving_fit]
    missing = sorted(set(variant.serving_fit) - {v.name for v in runs})
    if missing:
        raise DataError(f"variant {variant.name!r}: serving_fit run {missing[0]!r} is not there")
    own = RunsManifest(
        model=server.model,
        gpu=server.gpu,
        profile=base,
        scheduler="vllm-v1" if server.vllm_version else "vllm",
        server_args=server.args,
        server=server.description,
        fit=list(variant.serving_fit),
    )
    _, profile = fit_serving(own, runs)
    path = profile.save(Path(out_dir) / "profiles" / variant.name / "profile.yaml")
    return str(path)


def prepare(folder: Path, out_dir: Path) -> Study:
    found = manifest_for(Path(folder))
    if found is None:
        raise DataError(f"--data {folder}: no shipped manifest matches it")
    path, manifest = found
    vruns = read_runs(Path(folder), manifest)
    names = {v.name for v in vruns}
    choices, skipped = [], {}
    for variant in manifest.variants:
        absent = sorted(set(variant.serving_fit) - names)
        if absent and not variant.headline:
            skipped[variant.name] = f"its fit run {absent[0]} is not in this folder"
            continue
        choices.append(_choice(variant, manifest, vruns, Path(out_dir)))
    short = manifest.dataset.split("_")[0]
    return Study(
        dataset=manifest.dataset,
        title=manifest.title,
        runs=vruns,
        cost_models=choices,
        command=(
            f"pagesim validate-vllm --data DATA/{manifest.dataset} --out OUT "
            f"--docs docs/validation_{short}.md"
        ),
        extra={"manifest": manifest, "manifest_path": path, "skipped": skipped},
        saturation_ttft_s=manifest.saturation_ttft_s,
    )


def open_loop_rows(study: Study, replays: dict) -> list[dict]:
    return []


# ---- regimes, goals ---------------------------------------------------------------------


def saturated_runs(table: pd.DataFrame, threshold_s: float) -> set[str]:
    """Runs whose measured TTFT p50 exceeds ``threshold_s`` (module docstring)."""
    rows = table[(table["metric"] == "ttft") & (table["stat"] == "p50")]
    per_run = rows.groupby("run")["measured_ms"].first()
    return set(per_run[per_run > threshold_s * 1e3].index)


def goals(study: Study, table: pd.DataFrame) -> list[Goal]:
    manifest: DatasetManifest = study.extra["manifest"]
    saturated = saturated_runs(table, study.saturation_ttft_s)
    out = []
    skipped = study.extra.get("skipped", {})
    for g in manifest.goals:
        cost = g.cost_model or study.headline.name
        if cost in skipped:
            out.append(Goal(f"{cost}: {g.metric.upper()} {g.stat} within ±{g.bound:.0%}", None,
                            f"not scored: {cost} not replayed ({skipped[cost]})"))  # fmt: skip
            continue
        rows = table[
            (table["cost_model"] == cost)
            & (table["metric"] == g.metric)
            & (table["stat"] == g.stat)
            & table["role"].isin(g.roles)
        ]
        if g.regime == "below_saturation":
            rows = rows[~rows["run"].isin(saturated)]
        elif g.regime == "saturated":
            rows = rows[rows["run"].isin(saturated)]
        regime = g.regime.replace("_", " ")
        text = (
            f"{cost}: {g.metric.upper()} {g.stat} within ±{g.bound:.0%}, "
            f"{' and '.join(g.roles).replace('_', '-')} runs, {regime}"
        )
        out.append(within_goal(rows, text, g.bound))
    pool = study.extra.get("pool")
    if manifest.pool_goal is not None and pool is not None:
        predicted, logged = pool
        err = predicted / logged - 1
        out.append(
            Goal(
                f"KV pool within ±{manifest.pool_goal:.0%} of the {logged:,} blocks the server logged",
                bool(abs(err) <= manifest.pool_goal),
                f"predicted {predicted:,} blocks ({err:+.1%})",
            )
        )
    return out


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    from pagesim.experiments.validation.generic_page import sections as page_sections

    return page_sections(study, table, replays)
