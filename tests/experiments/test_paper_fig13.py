"""Figure 13a at the paper artifact's settings (experiments/paper_fig13.yaml) on its exact
ShareGPT lengths (``../shared/data/paper_artifact``), reduced as the artifact's plot.

The band is the issue's target, 5% of the paper's average batch for the three Orca
variants (Max / Pow2 / Oracle 7.00 / 9.81 / 13.62), fixed before the experiment was
first run; nothing was tuned to it. Measured (seed 0, analytic A100-40GB step costs,
the paper's one-hour run): 7.00 / 9.75 / 13.37 (0.0% / -0.6% / -1.8%), vLLM
prototype 15.93 against 30.42. (With fig13.sh's shortened 900 s of arrivals, Oracle
came out 5.3% under: the window then ran into the drain after the last arrival.)

Known gap, kept visible as a strict xfail rather than tuned away: vLLM is not
memory-bound at 1.5 req/s with these step costs: a step of ~15 groups takes ~31 ms,
so ~14 running requests already carry 1.5 req/s x 338 output tokens (Little's law);
the paper's 30.4 implies steps about twice as long (its prototype).
"""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

PAPER_BATCH = {"max": 7.00, "pow2": 9.81, "oracle": 13.62, "paged": 30.42}


@pytest.fixture(scope="module")
def fig13(tmp_path_factory, shared_data):
    csv = shared_data("paper_artifact", "sharegpt_opt_lengths.csv")
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAGESIM_DATA", str(data))
        assert main(["workload", "prepare", "sharegpt-paper", "--source", str(csv)]) == 0
        out = tmp_path_factory.mktemp("fig13")
        run_experiment(
            load_experiment("paper_fig13"), out, jobs=1, progress=False, source="paper_fig13"
        )
    return pd.read_csv(out / "results.csv").set_index("allocator.kind")


def batch(results, kind) -> float:
    return float(results.loc[kind, "artifact_fig13_avg_batch_size"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["max", "pow2", "oracle"])
def test_orca_batch_within_five_percent_of_the_paper(fig13, kind):
    simulated, paper = batch(fig13, kind), PAPER_BATCH[kind]
    assert abs(simulated / paper - 1) <= 0.05, f"{kind}: {simulated:.2f} vs paper {paper}"
    assert fig13.loc[kind, "artifact_fig13_num_steps"] > 1000


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="vLLM is not memory-bound with these step costs")
def test_vllm_prototype_batch_within_five_percent_of_the_paper(fig13):
    simulated, paper = batch(fig13, "paged"), PAPER_BATCH["paged"]
    assert abs(simulated / paper - 1) <= 0.05, f"vllm-paper: {simulated:.2f} vs paper {paper}"


@pytest.mark.slow
def test_the_order_of_the_systems_is_the_papers(fig13):
    values = [batch(fig13, kind) for kind in ("max", "pow2", "oracle", "paged")]
    assert values == sorted(values) and len(set(values)) == 4
    # nothing is lost: every request of the trace finished or was still queued or
    # running at 3,600 s (Orca (Max) falls behind at 1.5 req/s), none was rejected
    assert (fig13["num_rejected"] == 0).all()
    served = fig13["num_finished"] + fig13["num_unfinished"]
    assert (served == served.iloc[0]).all()
    assert fig13.loc["paged", "num_unfinished"] < fig13.loc["max", "num_unfinished"]
