"""The paper suite: ``pagesim run paper`` runs every paper experiment and writes one report.

The suite is every shipped experiment whose name starts with ``paper_``
(``experiments/paper_*.yaml``), found by that prefix, so a new figure's file joins it
without an edit here. Each runs into its own folder ``OUT/<name>/`` through the
ordinary runner (progress bars, the run cache, resume after an interruption), and
``OUT/report.md`` puts every figure together:

- the headline comparison (``paper_headline.py``): the request rate each system
  sustains at the same level of latency in every Figure 12 panel (the experiments whose
  target has ``sustained``), vLLM's ratios over the baselines, the paper's claims beside;
- for each experiment (in name order): what it runs, its workloads (a synthetic one
  says so), the paper's numbers beside pagesim's with the difference
  (``paper_targets.yaml``, keyed by the experiment's ``paper_figure``), the paper's
  shape checked on the results (``paper_checks.py``), the cause of the differences
  that remain as written beside the target in ``paper_targets.yaml`` (this module
  states no cause of its own), the simulated points and the charts;
- the paper numbers of ``paper_targets.yaml`` that no suite experiment compares, and
  which shipped experiment compares them instead, if any, and the paper's figures the
  suite does not simulate, each with its reason (``not_simulated``): nothing is left out.

Before anything runs, the external data every experiment reads is checked: when some
is missing the suite stops with one line saying what to download and the command that
prepares it. ``docs/fidelity.md`` is the same report without the chart images
(``--docs PATH``); its first lines carry a fingerprint of the suite's inputs (the
experiment files and ``paper_targets.yaml``), which a test compares with the
current files, so a changed experiment or target with a stale page fails. The
fingerprint does not cover the simulator's code: after a change there, rerun the
suite (the cache makes unchanged runs free) to refresh the page.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from pagesim import datapaths
from pagesim.errors import DataError
from pagesim.experiments.outputs import atomic_write_text
from pagesim.experiments.paper_headline import headline_lines
from pagesim.experiments.points import expand_points
from pagesim.experiments.shipped import shipped_experiments
from pagesim.experiments.spec import ExperimentSpec
from pagesim.experiments.summary import (
    _table,
    comparison_lines,
    not_simulated,
    paper_headline,
    paper_targets,
    step_cost_lines,
)

SUITE_NAME = "paper"
PREFIX = "paper_"
#: Columns of the per-experiment table of simulated points (those present are shown).
POINT_COLUMNS = (
    "normalized_latency_s_per_tok",
    "throughput_req_s",
    "avg_batch_size",
    "num_preemptions",
    "num_finished",
)
FINGERPRINT_RE = re.compile(r"<!-- suite inputs: ([0-9a-f]{16}) -->")


def suite_experiments() -> dict[str, Path]:
    """Name -> path of every shipped paper experiment (``paper_*``), sorted by name."""
    return {n: p for n, p in shipped_experiments().items() if n.startswith(PREFIX)}


def inputs_fingerprint() -> str:
    """A hash of the suite's experiment files and of ``paper_targets.yaml``."""
    digest = hashlib.sha256()
    root = resources.files("pagesim.experiments")
    for name, path in suite_experiments().items():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(root.joinpath("paper_targets.yaml").read_bytes())
    return digest.hexdigest()[:16]


def missing_data(specs: list[ExperimentSpec]) -> list[str]:
    """The external datasets the experiments read that are not prepared (by name, sorted).

    A point that gives ``workload.path`` reads that file instead and needs nothing.
    """
    from pagesim.workloads.registry import WORKLOADS

    missing = set()
    for spec in specs:
        for point in expand_points(spec):
            workload = point.run_doc.get("workload", {})
            source = WORKLOADS.get(workload.get("name", "sharegpt"))
            if source is None or source.dataset is None or workload.get("path"):
                continue
            if not datapaths.is_prepared(source.dataset):
                missing.add(source.dataset)
    return sorted(missing)


def missing_data_line(names: list[str]) -> str:
    """One line: which datasets are missing, where to download each, how to prepare it."""
    steps = []
    for name in names:
        dataset = datapaths.get_dataset(name)
        steps.append(
            f"download {dataset.raw_file} ({dataset.description}) from {dataset.url} and run: "
            f"{dataset.prepare_steps}"
        )
    return (
        f"the paper suite reads external data not prepared in the data folder "
        f"{datapaths.data_dir()} ({datapaths.DATA_ENV}): " + "; then ".join(steps)
    )


@dataclass(frozen=True)
class SuiteEntry:
    """One experiment of the suite as run: its spec, results and charts (paths in out_dir)."""

    name: str
    spec: ExperimentSpec
    results: pd.DataFrame
    chart_paths: tuple[Path, ...]
    num_runs: int
    num_computed: int


def _workload_lines(spec: ExperimentSpec) -> list[str]:
    from pagesim.workloads.registry import WORKLOADS

    names = dict.fromkeys(
        str(p.run_doc.get("workload", {}).get("name", "sharegpt")) for p in expand_points(spec)
    )
    lines = []
    for name in names:
        source = WORKLOADS.get(name)
        lines.append(f"- workload `{name}`: {source.description if source else '(unknown)'}")
    return lines


def _points_lines(spec: ExperimentSpec, results: pd.DataFrame) -> list[str]:
    swept = [p for p in spec.sweep.swept_paths if p in results.columns]
    shown = [c for c in POINT_COLUMNS if c in results.columns]
    header = ["point", *swept, *shown]
    return _table(header, results[header].values.tolist())


def _experiment_section(entry: SuiteEntry, out_dir: Path, with_charts: bool) -> list[str]:
    spec = entry.spec
    lines = [f"## {entry.name}", ""]
    lines += [" ".join(spec.description.split()), ""]
    lines += [
        f"Runs: {entry.num_runs}; alone: `pagesim run {entry.name} --out out/{entry.name}`.",
        "",
    ]
    lines += _workload_lines(spec) + [""]
    targets = paper_targets()
    if spec.paper_figure is not None and spec.paper_figure in targets:
        lines += ["### The paper beside pagesim", ""]
        lines += comparison_lines(targets[spec.paper_figure], entry.results) + [""]
    else:
        figure = spec.paper_figure or "(none named)"
        lines += [f"paper_targets.yaml has no entry {figure}: nothing compared.", ""]
    lines += ["### Simulated points", ""] + _points_lines(spec, entry.results) + [""]
    if entry.chart_paths:
        lines += ["### Charts", ""]
        for path in entry.chart_paths:
            relative = path.relative_to(out_dir).as_posix()
            lines.append(f"![{path.stem}]({relative})" if with_charts else f"- `{relative}`")
        lines.append("")
    return lines


def _uncompared_lines(entries: list[SuiteEntry]) -> list[str]:
    from pagesim.experiments.validate import parse_experiment, read_yaml

    used = {e.spec.paper_figure for e in entries}
    target_to_others: dict[str, list[str]] = {}
    for name, path in shipped_experiments().items():
        if name.startswith(PREFIX):
            continue
        figure = parse_experiment(read_yaml(path), str(path)).paper_figure
        if figure is not None:
            target_to_others.setdefault(figure, []).append(name)
    rows = []
    for key, target in paper_targets().items():
        if key in used:
            continue
        others = target_to_others.get(key, [])
        where = (
            "compared by " + ", ".join(f"`pagesim run {o}`" for o in others)
            if others
            else "no shipped experiment compares it yet"
        )
        rows.append([key, target.source, where])
    lines = (
        _table(["target", "the paper's numbers", "where"], rows)
        if rows
        else ["Every entry of paper_targets.yaml is compared above."]
    )
    lines += ["", "The paper's figures the suite does not simulate:", ""]
    lines += _table(["figure", "why not"], [[k, v] for k, v in not_simulated().items()])
    return lines


def _headline_section(entries: list[SuiteEntry]) -> list[str]:
    targets = paper_targets()
    panels = []
    for entry in entries:
        target = targets.get(entry.spec.paper_figure or "")
        if target is not None and target.sustained is not None:
            panels.append((entry.name, target.sustained, entry.results))
    return (
        ["## The headline: request rates sustained at the same latency", ""]
        + headline_lines(paper_headline(), panels)
        + [""]
    )


def report_text(
    entries: list[SuiteEntry], out_dir: Path, *, variant: str, with_charts: bool
) -> str:
    """The suite's report (deterministic: no wall times, no dates)."""
    lines = [
        "# The PagedAttention paper beside pagesim, figure by figure",
        "",
        f"<!-- suite inputs: {inputs_fingerprint()} -->",
        "<!-- Generated by `pagesim run paper --out out/paper --docs docs/fidelity.md`; "
        "do not edit by hand. -->",
        "",
        'The reference is Kwon et al., "Efficient Memory Management for Large Language Model '
        'Serving with PagedAttention", SOSP 2023 (arXiv:2309.06180), and its public artifact '
        "(GitHub `sosp-ae-39/sosp-ae-astra`), whose `experiments/*.sh` give each figure's "
        "settings. Every section below is one experiment file `experiments/paper_*.yaml`, run "
        f"by `pagesim run paper` ({variant} size): the paper's numbers beside pagesim's, the "
        "difference (pagesim − paper, in the paper's unit), the paper's shape checked on the "
        "results, and the cause of each difference that remains, as written beside the "
        "target in `experiments/paper_targets.yaml`.",
        "",
        "Step costs of every run:",
        "",
    ]
    cost_lines = dict.fromkeys(line for e in entries for line in step_cost_lines(e.results))
    lines += list(cost_lines) + [""]
    overview = []
    for entry in entries:
        figure = entry.spec.paper_figure or "-"
        overview.append([entry.name, figure, entry.num_runs])
    lines += _table(["experiment", "paper target", "runs"], overview) + [""]
    lines += _headline_section(entries)
    for entry in entries:
        lines += _experiment_section(entry, out_dir, with_charts)
    lines += ["## Paper numbers outside the suite", ""] + _uncompared_lines(entries)
    return "\n".join(lines).rstrip() + "\n"


def stale_docs_problem(page: Path) -> str | None:
    """Why ``page`` (docs/fidelity.md) does not match the suite's inputs, or None."""
    if not page.is_file():
        return f"{page} not found"
    found = FINGERPRINT_RE.search(page.read_text(encoding="utf-8"))
    if found is None:
        return f"{page}: no suite-inputs fingerprint; regenerate it"
    if found.group(1) != inputs_fingerprint():
        return (
            f"{page} is stale (suite inputs {found.group(1)}, now {inputs_fingerprint()}): "
            "pagesim run paper --out out/paper --docs docs/fidelity.md"
        )
    return None


def run_paper_suite(
    out_dir: Path,
    *,
    quick: bool = False,
    jobs: int | None = None,
    executor: str = "local",
    progress: bool | None = None,
    docs: Path | None = None,
    simulate=None,
) -> list[SuiteEntry]:
    """Run every paper experiment into ``out_dir/<name>`` and write ``out_dir/report.md``
    (and the report without images at ``docs``); see the module docstring."""
    from pagesim.experiments.outdir import check_out_dir
    from pagesim.experiments.runner import run_experiment
    from pagesim.experiments.validate import load_experiment_points

    name_to_path = suite_experiments()
    loaded = {
        name: load_experiment_points(path, quick=quick) for name, path in name_to_path.items()
    }
    specs = {name: spec for name, (spec, _) in loaded.items()}
    missing = missing_data(list(specs.values()))
    if missing:
        raise DataError(missing_data_line(missing))
    check_out_dir(out_dir)
    variant = "quick" if quick else "full"
    entries = []
    for name, spec in specs.items():
        output = run_experiment(
            spec, out_dir / name, simulate=simulate, executor=executor, jobs=jobs,
            source=str(name_to_path[name]), progress=progress, variant=variant,
            points=loaded[name][1],
        )  # fmt: skip
        entries.append(
            SuiteEntry(name, spec, output.results, output.chart_paths, output.num_runs,
                       output.num_computed)
        )  # fmt: skip
    atomic_write_text(
        out_dir / "report.md", report_text(entries, out_dir, variant=variant, with_charts=True)
    )
    if docs is not None:
        atomic_write_text(docs, report_text(entries, out_dir, variant=variant, with_charts=False))
    return entries
