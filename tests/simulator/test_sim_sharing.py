"""The paper's §6.3 sharing experiment (OPT-13B, Alpaca, 15,728 KV slots) on the synthetic
alpaca-like workload: memory saved by paged sharing, time-weighted blocks saved / blocks
without sharing.

Paper: parallel sampling n = 2 / 4 / 6 -> 6.09 / 8.53 / 9.79 %; beam search width
2 / 4 / 6 -> 37.56 / 53.13 / 55.16 %. pagesim's alpaca-like workload is synthetic
(lognormal lengths fitted to the paper's means, 19.31 in / 58.45 out), so the numbers are
not expected to match exactly. Measured with 600 requests at 20 req/s, seed 0: parallel
sampling 6.8 / 10.3 / 11.3 %, within the ±3-point bands of tests/bands.py (set after
measuring; the code was not tuned to them).

Beam search has no band here: the paper suite holds it against the paper on the real
Alpaca sample with the fitted ancestry (tests/experiments/test_paper_fig15.py). What is
tested here is the mechanism: beams share several times what parallel samples share, and
a beam that keeps its own parent more often (``scheduler.beam_keep_prob``) shares less, at
every width.
"""

from __future__ import annotations

import pytest
from bands import band

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict

WIDTHS = (2, 4, 6)


def saved_pct(keep_prob: float = 0.0, **workload) -> float:
    spec = run_spec_from_dict(
        {
            "workload": {"name": "alpaca-like", "num_requests": 600, **workload},
            "arrivals": {"rate_req_s": 20.0},
            "hardware": {"model": "opt-13b", "gpu": "a100-40gb", "kv_slots": 15728},
            "scheduler": {"beam_keep_prob": keep_prob},
            "metrics": {"sample_interval_s": 10.0},
        }
    )
    return 100 * simulate(spec).extra["mem_sharing_saved_frac"]


def test_no_sharing_saves_nothing():
    assert saved_pct() == 0.0


@pytest.fixture(scope="module")
def parallel():
    return {n: saved_pct(n=n) for n in WIDTHS}


@pytest.fixture(scope="module")
def beam():
    return {k: saved_pct(beam_width=k) for k in WIDTHS}


@pytest.mark.parametrize("n", WIDTHS)
def test_parallel_sampling_savings_near_the_paper(parallel, n):
    band("sim_sharing", f"n{n}").check(parallel[n], f"n = {n}")


def test_parallel_sampling_savings_grow_with_n(parallel):
    assert parallel[2] < parallel[4] < parallel[6]


def test_beam_search_saves_far_more_than_parallel_sampling(parallel, beam):
    assert beam[2] < beam[4] < beam[6]
    for k in WIDTHS:
        assert beam[k] > parallel[k] * 3


def test_beams_that_keep_their_own_parent_share_less(beam):
    kept = {k: saved_pct(keep_prob=0.85, beam_width=k) for k in WIDTHS}
    for k in WIDTHS:
        assert kept[k] < beam[k], (k, kept[k], beam[k])
