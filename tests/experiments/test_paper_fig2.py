"""Figure 2 at the paper artifact's settings (experiments/paper_fig2.yaml) on its exact
ShareGPT lengths (``../shared/data/paper_artifact``), reduced as the artifact's plot.

The band is the issue's target, ±2 points of the paper's token-state shares (Orca Max
/ Pow2 / Oracle 20.4 / 26.8 / 38.2 %, vLLM 96.3 %; tests/bands.py), fixed before this
experiment was first run; nothing was tuned to it. Measured (seed 0): 19.65 / 26.40 /
37.03 / 96.36.
"""

from __future__ import annotations

import pandas as pd
import pytest
from bands import band

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

SYSTEMS = ("max", "pow2", "oracle", "paged")


@pytest.mark.slow
def test_fig2_token_states_within_two_points_of_the_paper(shared_data, tmp_path):
    csv = shared_data("paper_artifact", "sharegpt_opt_lengths.csv")
    assert main(["workload", "prepare", "sharegpt-paper", "--source", str(csv)]) == 0
    spec = load_experiment("paper_fig2")
    run_experiment(spec, tmp_path, jobs=1, progress=False, source="paper_fig2")
    results = pd.read_csv(tmp_path / "results.csv").set_index("allocator.kind")
    for kind in SYSTEMS:
        band("fig2", kind).check(100 * results.loc[kind, "artifact_fig2_mem_token_frac"], kind)
        # the result says which reducer made it, and over how many steps
        assert results.loc[kind, "artifact_fig2_num_steps"] > 1000
    # the order of the systems is the paper's
    token = results["artifact_fig2_mem_token_frac"]
    assert token["max"] < token["pow2"] < token["oracle"] < token["paged"]
