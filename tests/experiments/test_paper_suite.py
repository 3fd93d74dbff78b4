"""The paper suite (`pagesim run paper`): discovery by prefix, the one-line hint on a fresh
clone, one report with every paper number, cache and resume, and docs/fidelity.md fresh.

The report's plumbing runs on the deterministic stand-in simulator (``fake_sim.py``),
on the real data's tables (prepared from ``../shared/data``; skipped without them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_sim import fake_simulate

from pagesim.cli import main
from pagesim.experiments.paper_suite import (
    inputs_fingerprint,
    run_paper_suite,
    stale_docs_problem,
    suite_experiments,
)
from pagesim.experiments.shipped import shipped_experiments
from pagesim.experiments.summary import not_simulated, paper_targets

ROOT = Path(__file__).resolve().parents[2]


def test_the_suite_is_every_shipped_paper_experiment():
    names = set(suite_experiments())
    assert names == {n for n in shipped_experiments() if n.startswith("paper_")}
    assert {"paper_fig2", "paper_fig12_sharegpt", "paper_fig12_alpaca", "paper_fig19"} <= names
    assert {"paper_fig12_66b_sharegpt", "paper_fig12_175b_alpaca", "paper_fig13b"} <= names


def test_fresh_clone_says_in_one_line_what_to_download(tmp_path, capsys):
    code = main(["run", "paper", "--quick", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    for needed in (
        "sharegpt_opt_text_completion_length.pkl",
        "pagesim workload prepare sharegpt-paper --source",
        "alpaca_5000.json",
        "pip install 'pagesim[prepare]' (the tokenizer), then pagesim workload prepare alpaca-5000",
    ):
        assert needed in err[0]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_docs_and_set_are_refused_where_they_do_not_apply(tmp_path, capsys):
    assert main(["run", "memory_waste", "--docs", str(tmp_path / "x.md")]) == 2
    assert "only the paper suite" in capsys.readouterr().err
    assert main(["run", "paper", "--set", "seed=1", "--out", str(tmp_path / "o")]) == 2
    assert "--set: not with the paper suite" in capsys.readouterr().err


@pytest.mark.slow
def test_one_report_with_every_paper_number_cached_and_deterministic(tmp_path, paper_tables):
    out, docs = tmp_path / "out", tmp_path / "fidelity.md"
    entries = run_paper_suite(out, quick=True, jobs=1, simulate=fake_simulate, docs=docs)
    assert [e.name for e in entries] == list(suite_experiments())
    report = (out / "report.md").read_text()
    for entry in entries:
        assert f"## {entry.name}" in report
        assert (out / entry.name / "results.csv").is_file()
        for chart in entry.chart_paths:
            assert chart.is_file() and f"]({entry.name}/{chart.name})" in report
    # every paper number of paper_targets.yaml is in the report: compared, or listed outside
    for target in paper_targets().values():
        assert target.source in report
    assert "## Paper numbers outside the suite" in report
    # the headline comparison, and every figure the suite does not simulate with its reason
    assert "## The headline: request rates sustained at the same latency" in report
    for figure, reason in not_simulated().items():
        assert f"| {figure} | {reason} |" in report
    # the docs page is the same report without images, with the inputs' fingerprint
    page = docs.read_text()
    assert "![" not in page and f"<!-- suite inputs: {inputs_fingerprint()} -->" in page
    assert stale_docs_problem(docs) is None
    # a rerun computes nothing and writes the same bytes
    again = run_paper_suite(out, quick=True, jobs=1, simulate=fake_simulate)
    assert sum(e.num_computed for e in again) == 0
    assert (out / "report.md").read_text() == report


def test_stale_page_is_detected(tmp_path):
    page = tmp_path / "fidelity.md"
    page.write_text("# old\n<!-- suite inputs: 0123456789abcdef -->\n")
    assert "is stale" in stale_docs_problem(page)
    page.write_text("# hand-written\n")
    assert "no suite-inputs fingerprint" in stale_docs_problem(page)


def test_docs_fidelity_is_the_report_of_the_current_suite():
    problem = stale_docs_problem(ROOT / "docs" / "fidelity.md")
    assert problem is None, problem
