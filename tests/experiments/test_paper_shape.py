"""The paper's shape in every suite figure, on the real data (``../shared/data``).

Each paper experiment with shape checks in ``paper_targets.yaml`` (the order of the
systems, the paper's claims) runs its ``--quick`` variant — the
artifact's settings on a subset of its rates that keeps the rates two systems share,
and for the Alpaca figures 120 s instead of 600 s — and every check must hold, except
the known gaps below, each of which must still fail (so a fix is noticed) and states
its cause. At least one check must hold and none may be left undecided where the
figure compares systems, so the test cannot pass by comparing nothing. Nothing here
was tuned to the paper: the checks and their 5 % tie tolerance were written before
the runs.
"""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.experiments.paper_suite import suite_experiments
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.summary import paper_targets
from pagesim.experiments.validate import load_experiment

#: (experiment, check, where) -> why pagesim does not show the paper's shape there.
KNOWN_GAPS = {
    (
        "paper_fig18b",
        "the best block size on Alpaca is 16-32",
        "allocator.block_size in [16, 32]",
    ): (
        "at 30.1 req/s nothing is preempted up to block 128 with the analytic step costs, so "
        "larger blocks cost nothing until 256 (16 to 128 within 0.7%); the best is 128"
    ),
}


def _shape_experiments() -> list[str]:
    targets = paper_targets()
    names = []
    for name in suite_experiments():
        figure = load_experiment(name).paper_figure
        if figure in targets and (targets[figure].order or targets[figure].comparisons
                                  or targets[figure].best):  # fmt: skip
            names.append(name)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", _shape_experiments())
def test_the_paper_shape_holds_on_the_real_data(name, paper_tables, tmp_path):
    spec = load_experiment(name, quick=True)
    run_experiment(spec, tmp_path, jobs=2, progress=False, source=name)
    results = pd.read_csv(tmp_path / "results.csv")
    rows = paper_targets()[spec.paper_figure].check_rows(results)
    gaps = {(check, where) for (exp, check, where) in KNOWN_GAPS if exp == name}
    failed = {(r.check, r.where) for r in rows if r.holds is False}
    assert failed - gaps == set(), [r for r in rows if (r.check, r.where) in failed - gaps]
    assert gaps <= failed, f"known gaps no longer fail (fixed? update KNOWN_GAPS): {gaps - failed}"
    assert any(r.holds for r in rows)
    if paper_targets()[spec.paper_figure].order is not None:
        assert any(r.holds for r in rows if "≤" in r.check), "no two systems were compared"
