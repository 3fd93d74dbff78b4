"""§6.4 shared prefix (Figure 16) at the settings of ``experiments/paper_fig16.yaml``, with
the Alpaca authors' public 5,000-record sample (``../shared/data/alpaca``) behind the
prefix: the ratio of vLLM's sustained throughput to Orca (Oracle)'s, as the paper reports
it (1.67x with the 1-shot prefix of 80 tokens, 3.58x with the 5-shot prefix of 341), each
system's sustained throughput being the largest it serves at 60 or 80 req/s (every system
is saturated by then: its throughput has reached its plateau; the suite takes the largest
over all its rates, 5 to 80 req/s, which is the same).

The bands, ±15 % of the paper's ratio (tests/bands.py), are the band of the earlier test
of this figure (which read one rate, 40 req/s, where vLLM with the 80-token prefix is not
saturated); they were not chosen for these results. Measured (seed 0, 600 s, ``pagesim run
paper``): 2.17 (80 tokens; vLLM 49.3 req/s against Orca (Oracle)'s 22.7) and 3.15 (341).

Known gap, a strict xfail: the 1-shot ratio is 30 % above the paper's. Its cause is not
established; the two differences known are the workload (Alpaca records behind the
prefix, not the WMT16 sentences the paper translated) and the step costs (the analytic
A100 profile, not a LLaMA-13B measurement): docs/fidelity.md, Figure 16.
"""

from __future__ import annotations

import pandas as pd
import pytest
from bands import band

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.spec import SweepSpec
from pagesim.experiments.validate import load_experiment

ORACLE = "orca+oracle+256+False"
PINNED = "vllm-paper+paged+256+pinned"
AUTOMATIC = "vllm-paper+paged+2048+True"
RATES = [60.0, 80.0]


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
            grid={"workload.shared_prefix_len": [80, 341], "arrivals.rate_req_s": RATES},
        )
        assert all(p in spec.sweep.zip[0] for p in sweep.zip[0])  # the suite's own systems
        assert set(RATES) <= set(spec.sweep.grid["arrivals.rate_req_s"])
        out = tmp_path_factory.mktemp("fig16")
        run_experiment(
            spec.model_copy(update={"sweep": sweep, "charts": []}), out, jobs=1,
            progress=False, source="paper_fig16",
        )  # fmt: skip
    return pd.read_csv(out / "results.csv")


def sustained(fig16, system: str, prefix_len: int) -> float:
    rows = fig16[(fig16["label"] == system) & (fig16["workload.shared_prefix_len"] == prefix_len)]
    return float(rows["throughput_req_s"].max())


def ratio(fig16, system: str, prefix_len: int) -> float:
    return sustained(fig16, system, prefix_len) / sustained(fig16, ORACLE, prefix_len)


_LONGER = "the 1-shot ratio is 30% above the paper's (module docstring)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "prefix_len", [pytest.param(80, marks=pytest.mark.xfail(strict=True, reason=_LONGER)), 341]
)
def test_ratio_of_sustained_throughputs_within_its_band(fig16, prefix_len):
    band("fig16", str(prefix_len)).check(ratio(fig16, PINNED, prefix_len), f"{prefix_len} tokens")


@pytest.mark.slow
@pytest.mark.parametrize("prefix_len", [80, 341])
def test_every_system_is_saturated_by_the_highest_rate(fig16, prefix_len):
    """The sustained throughput is a plateau, not the offered load: at 80 req/s each
    system serves under 90 % of what arrives, and no more than 5 % above what it serves at
    60 req/s."""
    for system in (ORACLE, PINNED, AUTOMATIC):
        rows = fig16[
            (fig16["label"] == system) & (fig16["workload.shared_prefix_len"] == prefix_len)
        ]
        by_rate = rows.set_index("arrivals.rate_req_s")["throughput_req_s"]
        assert by_rate[80.0] < 0.9 * 80.0, (system, by_rate.to_dict())
        assert by_rate[80.0] <= 1.05 * by_rate[60.0], (system, by_rate.to_dict())


@pytest.mark.slow
@pytest.mark.parametrize("prefix_len", [80, 341])
def test_pinned_prefix_sustains_what_automatic_caching_sustains(fig16, prefix_len):
    pinned, automatic = (
        sustained(fig16, PINNED, prefix_len),
        sustained(fig16, AUTOMATIC, prefix_len),
    )
    assert pinned == pytest.approx(automatic, rel=0.01)
