"""Figure 13a at the paper artifact's settings (experiments/paper_fig13.yaml) on its exact
ShareGPT lengths (``../shared/data/paper_artifact``), reduced as the artifact's plot.

The band is the issue's target, 5% of the paper's average batch (tests/bands.py), fixed
before the experiment was first run; nothing was tuned to it. Measured (seed 0, analytic
A100-40GB step costs, the paper's one-hour run): Orca Pow2 / Oracle 9.75 / 13.37 (-0.6% /
-1.8% against 9.81 / 13.62), vLLM prototype 15.93 against 30.42. (With fig13.sh's
shortened 900 s of arrivals, Oracle came out 5.3% under: the window then ran into the
drain after the last arrival.)

Orca (Max)'s 7.00 has no band: a saturated Max pool holds floor(15,968 / 2,048) = 7
reservations whatever the workload and the step costs, so a band around it could not
fail. The order test below still holds it below Pow2.

Known gap, kept visible as a strict xfail rather than tuned away: vLLM is not
memory-bound at 1.5 req/s with these step costs: a step of ~15 groups takes ~31 ms,
so ~14 running requests already carry 1.5 req/s x 338 output tokens (Little's law);
the paper's 30.4 implies steps about twice as long (its prototype).
"""

from __future__ import annotations

import pandas as pd
import pytest
from bands import band

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment


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
@pytest.mark.parametrize("kind", ["pow2", "oracle"])
def test_orca_batch_within_five_percent_of_the_paper(fig13, kind):
    band("fig13", kind).check(batch(fig13, kind), kind)
    assert fig13.loc[kind, "artifact_fig13_num_steps"] > 1000


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="vLLM is not memory-bound with these step costs")
def test_vllm_prototype_batch_within_five_percent_of_the_paper(fig13):
    band("fig13", "paged").check(batch(fig13, "paged"), "vllm-paper")


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
