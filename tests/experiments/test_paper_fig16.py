"""§6.4 shared prefix (Figure 16) at the settings of ``experiments/paper_fig16.yaml``, with
the Alpaca authors' public 5,000-record sample (``../shared/data/alpaca``) behind the
prefix: vLLM's throughput over Orca (Oracle)'s at 40 req/s, the rate the suite reads.

The paper: 1.67x (1-shot prefix, 80 tokens) and 3.58x (5-shot, 341 tokens), the
prototype pinning the prefix. Measured (seed 0, 600 s, ``pagesim run paper_fig16``):

    pinned prefix:              1.733 (80)   3.149 (341)
    automatic prefix caching:   1.733 (80)   3.150 (341)

These bands record that result and its documented gap (``paper_targets.yaml``,
``fig16-suite``); they were written after the first run, not before it:
- 80 tokens: vLLM is not saturated at 40 req/s (it serves 39.4), so the ratio is a lower
  bound of the sustainable one and must be at least the paper's 1.67;
- 341 tokens: both saturate; the ratio is below the paper's (the analytic A100 step
  costs of vLLM's 150-160-request batches) and within 15% of it;
- the pinned prefix and automatic prefix caching serve the same throughput (within 1%):
  under this load the prefix is always held by a running request, so automatic caching
  always hits and both hold the same memory.
"""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.spec import SweepSpec
from pagesim.experiments.validate import load_experiment

PAPER_RATIO = {80: 1.67, 341: 3.58}
ORACLE = "orca+oracle+256+False"
PINNED = "vllm-paper+paged+256+pinned"
AUTOMATIC = "vllm-paper+paged+2048+True"


@pytest.fixture(scope="module")
def fig16(tmp_path_factory, shared_data):
    source = shared_data("alpaca", "alpaca_5000.json")
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAGESIM_DATA", str(data))
        assert main(["workload", "prepare", "alpaca-5000", "--source", str(source)]) == 0
        spec = load_experiment("paper_fig16")
        sweep = SweepSpec(
            zip=[
                {
                    "scheduler.kind": ["orca", "vllm-paper", "vllm-paper"],
                    "allocator.kind": ["oracle", "paged", "paged"],
                    "scheduler.max_num_seqs": [256, 256, 2048],
                    "allocator.prefix_caching": [False, "pinned", True],
                }
            ],
            grid={"workload.shared_prefix_len": [80, 341], "arrivals.rate_req_s": [40.0]},
        )
        assert all(p in spec.sweep.zip[0] for p in sweep.zip[0])  # the suite's own systems
        out = tmp_path_factory.mktemp("fig16")
        run_experiment(
            spec.model_copy(update={"sweep": sweep, "charts": []}), out, jobs=1,
            progress=False, source="paper_fig16",
        )  # fmt: skip
    results = pd.read_csv(out / "results.csv")
    return results.set_index(["label", "workload.shared_prefix_len"])["throughput_req_s"]


def _ratio(fig16, system, prefix_len):
    return fig16[(system, prefix_len)] / fig16[(ORACLE, prefix_len)]


@pytest.mark.slow
def test_one_shot_ratio_is_at_least_the_papers(fig16):
    assert _ratio(fig16, PINNED, 80) >= PAPER_RATIO[80]


@pytest.mark.slow
def test_five_shot_ratio_is_below_the_papers_within_15_percent(fig16):
    ratio = _ratio(fig16, PINNED, 341)
    assert PAPER_RATIO[341] * 0.85 <= ratio < PAPER_RATIO[341], ratio


@pytest.mark.slow
@pytest.mark.parametrize("prefix_len", [80, 341])
def test_pinned_prefix_serves_what_automatic_caching_serves(fig16, prefix_len):
    pinned, automatic = fig16[(PINNED, prefix_len)], fig16[(AUTOMATIC, prefix_len)]
    assert pinned == pytest.approx(automatic, rel=0.01)
