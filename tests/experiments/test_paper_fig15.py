"""§6.3 sharing savings (Figure 15) at the paper artifact's settings
(experiments/paper_fig15.yaml) on the vLLM prototype's semantics, with the Alpaca
authors' public 5,000-record sample (``../shared/data/alpaca``), reduced as the
artifact's plot.

Bands are the issue's targets, fixed before the experiment was first run
(tests/bands.py): parallel sampling within ±1.5 points of the paper (6.09 / 8.53 / 9.79 %
for n = 2 / 4 / 6), beam search within ±5 (55.16 % at width 6).

Beam ancestry (``scheduler.beam_keep_prob``, ``simulator/schedulers/ancestry.py``): the
experiment's 0.85 was fitted on width 4 alone (0.8 / 0.825 / 0.85 / 0.9 gave 54.72 /
54.00 / 53.15 / 50.27 %), so width 4 validates nothing and has no test here. Width 2
has none either: its saving stays inside its ±5 band around 37.56 % for every keep
probability from 0 (uniform parents, 39.66 %) through 0.5 (39.27 %), 0.7 (38.56 %) and the
fitted 0.85 (36.85 %), and leaves it only at 0.95 (31.29 %), so it cannot tell a good fit
from a bad one. Width 6 is the one held-out check of the fit: uniform parents give 65.17 %
there (+10.0 points), outside the band. Parallel sampling does not use the parameter.
Measured (seed 0, the full experiment, ``pagesim run paper_fig15``):

    parallel n = 2 / 4 / 6:   4.99 / 7.42 / 7.98 %   (-1.10 / -1.11 / -1.81 points)
    beam width 6:            58.49 %                 (+3.33 points)

n = 6 is outside its band, a strict xfail: the saving is the prompt's share of the
memory, and the public sample's prompts are 7% shorter than the paper's Alpaca (17.96 vs
19.31 tokens). With every prompt scaled by 19.31 / 17.96 (a diagnostic, not a fix)
n = 2 / 4 / 6 give 5.64 / 8.48 / 9.10 %, all within 0.7 points; at 10 req/s instead of
20 the real sample gives 4.84 / 7.26 / 7.90 %, so load is not the cause.
"""

from __future__ import annotations

import pandas as pd
import pytest
from bands import band

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.spec import SweepSpec
from pagesim.experiments.validate import load_experiment

#: band key -> (workload.n, workload.beam_width)
POINTS = {"n2": (2, 1), "n4": (4, 1), "n6": (6, 1), "beam6": (1, 6)}
_SHORT = "the public Alpaca sample's prompts are 7% shorter than the paper's (module docstring)"


@pytest.fixture(scope="module")
def fig15(tmp_path_factory, shared_data):
    source = shared_data("alpaca", "alpaca_5000.json")
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAGESIM_DATA", str(data))
        assert main(["workload", "prepare", "alpaca-5000", "--source", str(source)]) == 0
        spec = load_experiment("paper_fig15")
        sweep = SweepSpec(
            zip=[
                {
                    "workload.n": [n for n, _ in POINTS.values()],
                    "workload.beam_width": [w for _, w in POINTS.values()],
                }
            ]
        )
        out = tmp_path_factory.mktemp("fig15")
        run_experiment(
            spec.model_copy(update={"sweep": sweep}), out, jobs=1, progress=False,
            source="paper_fig15",
        )  # fmt: skip
    return pd.read_csv(out / "results.csv").set_index(["workload.n", "workload.beam_width"])


def saved_pct(fig15, key: str) -> float:
    return 100 * float(fig15.loc[POINTS[key], "artifact_fig15_sharing_saved_frac"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "key",
    ["n2", "n4", pytest.param("n6", marks=pytest.mark.xfail(strict=True, reason=_SHORT)), "beam6"],
)
def test_sharing_saving_within_its_band(fig15, key):
    band("fig15", key).check(saved_pct(fig15, key), key)
    assert fig15.loc[POINTS[key], "artifact_fig15_num_steps"] > 1000


@pytest.mark.slow
def test_savings_grow_with_n_and_beam_search_saves_most(fig15):
    saved = [saved_pct(fig15, key) for key in ("n2", "n4", "n6", "beam6")]
    assert saved == sorted(saved) and len(set(saved)) == 4
