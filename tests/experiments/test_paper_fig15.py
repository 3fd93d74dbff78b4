"""§6.3 sharing savings (Figure 15) at the paper artifact's settings
(experiments/paper_fig15.yaml) on the vLLM prototype's semantics, with the Alpaca
authors' public 5,000-record sample (``../shared/data/alpaca``), reduced as the
artifact's plot.

Bands are the issue's targets, fixed before the experiment was first run: parallel
sampling within ±1.5 points of the paper (6.09 / 8.53 / 9.79 % for n = 2 / 4 / 6),
beam search within ±5 (37.56 / 53.13 / 55.16 % for width 2 / 4 / 6).

Beam ancestry (``scheduler.beam_keep_prob``, ``simulator/schedulers/ancestry.py``): the
experiment's 0.85 was fitted on width 4 alone (0.8 / 0.825 / 0.85 / 0.9 give 54.72 /
54.00 / 53.15 / 50.27 %, before vllm-paper admitted groups with all their beams);
widths 2 and 6 are its validation. With uniform parents (0, the default) the beams gave
39.50 / 58.64 / 65.02 %, width 6 out of its band.
Measured (seed 0, the full experiment, ``pagesim run paper_fig15``):

    parallel n = 2 / 4 / 6:   4.99 / 7.42 / 7.98 %   (-1.10 / -1.11 / -1.81 points)
    beam width 2 / 4 / 6:    36.85 / 53.28 / 58.49 %  (-0.71 / +0.15 / +3.33 points)

The test runs the points inside their bands: n = 2, n = 4 and the three beam widths
(width 4 is the fitted point: its check guards the fit, it validates nothing). n = 6
is outside its band and is not run here: the saving is the prompt's share of the
memory, and the public sample's prompts are 7% shorter than the paper's Alpaca (17.96
vs 19.31 tokens). With every prompt scaled by 19.31 / 17.96 (a diagnostic, not a fix)
n = 2 / 4 / 6 give 5.64 / 8.48 / 9.10 %, all within 0.7 points; at 10 req/s instead
of 20 the real sample gives 4.84 / 7.26 / 7.90 %, so load is not the cause.
"""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.spec import SweepSpec
from pagesim.experiments.validate import load_experiment

PAPER_PCT = {(2, 1): 6.09, (4, 1): 8.53, (1, 2): 37.56, (1, 4): 53.13, (1, 6): 55.16}
BAND = {(2, 1): 1.5, (4, 1): 1.5, (1, 2): 5.0, (1, 4): 5.0, (1, 6): 5.0}


@pytest.fixture(scope="module")
def fig15(tmp_path_factory, shared_data):
    source = shared_data("alpaca", "alpaca_5000.json")
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAGESIM_DATA", str(data))
        assert main(["workload", "prepare", "alpaca-5000", "--source", str(source)]) == 0
        spec = load_experiment("paper_fig15")
        points = list(PAPER_PCT)
        sweep = SweepSpec(
            zip=[
                {
                    "workload.n": [n for n, _ in points],
                    "workload.beam_width": [w for _, w in points],
                }
            ]
        )
        out = tmp_path_factory.mktemp("fig15")
        run_experiment(
            spec.model_copy(update={"sweep": sweep}), out, jobs=1, progress=False,
            source="paper_fig15",
        )  # fmt: skip
    return pd.read_csv(out / "results.csv").set_index(["workload.n", "workload.beam_width"])


@pytest.mark.slow
@pytest.mark.parametrize("point", list(PAPER_PCT), ids=["n2", "n4", "beam2", "beam4", "beam6"])
def test_sharing_saving_within_its_band(fig15, point):
    simulated = 100 * float(fig15.loc[point, "artifact_fig15_sharing_saved_frac"])
    paper = PAPER_PCT[point]
    assert abs(simulated - paper) <= BAND[point], f"{point}: {simulated:.2f} vs paper {paper}"
    assert fig15.loc[point, "artifact_fig15_num_steps"] > 1000


@pytest.mark.slow
def test_savings_grow_with_n_and_beam_width_and_beam_search_saves_most(fig15):
    saved = fig15["artifact_fig15_sharing_saved_frac"]
    assert saved[(2, 1)] < saved[(4, 1)] < saved[(1, 2)] < saved[(1, 4)] < saved[(1, 6)]


def test_the_experiment_uses_the_ancestry_fitted_on_width_4():
    spec = load_experiment("paper_fig15")
    assert spec.base["scheduler"]["beam_keep_prob"] == 0.85
