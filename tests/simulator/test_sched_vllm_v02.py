"""vLLM v0.2's prefill rule as options of the vllm scheduler (padding, max_paddings):
stories on tiny pools with exact expectations, and the spec's checks."""

from __future__ import annotations

import numpy as np
import pytest
from sim_fakes import TinyPaged, make_trace

from pagesim.errors import ConfigError
from pagesim.simulator.run import run_engine
from pagesim.simulator.schedulers import SCHEDULERS
from pagesim.simulator.spec import SchedulerSpec, run_spec_from_dict


def vllm(**spec):
    return SCHEDULERS["vllm"](
        SchedulerSpec(**spec), TinyPaged(256, 4), max_model_len=128, rng=np.random.default_rng(0)
    )


def prefill_plans(trace, sched):
    """Every prefill step's (prompts, tokens computed, context sum, scores)."""
    plans = []

    def step_s(plan):
        if plan.num_prefill_seqs:
            plans.append(
                (
                    plan.num_prefill_seqs,
                    plan.num_prefill_tokens,
                    plan.prefill_context_sum,
                    plan.prefill_scores,
                )
            )
        return 0.1

    run_engine(trace, sched, step_s, check_invariants=True)
    return plans


def test_padding_counts_prompts_times_the_longest_in_the_token_budget():
    trace = make_trace([(0.0, 30, 1), (0.0, 40, 1), (0.0, 10, 1)])
    # unpadded: 30 + 40 + 10 = 80 <= 100, one step of three prompts
    assert prefill_plans(trace, vllm(max_num_batched_tokens=100)) == [(3, 80, 80, 465 + 820 + 55)]
    # padded: 2 x 40 = 80 fits, 3 x 40 = 120 does not: the third waits for the next step
    plans = prefill_plans(trace, vllm(max_num_batched_tokens=100, prefill_padding=True))
    assert [p[:3] for p in plans] == [(2, 80, 80), (1, 10, 10)]
    # the padded step computes both prompts at the longest one's length
    assert plans[0][3] == 2 * (40 * 41 / 2)


def test_max_paddings_stops_a_batch_whose_padding_would_exceed_it():
    trace = make_trace([(0.0, 10, 1), (0.0, 50, 1), (0.0, 45, 1)])
    # 10 then 50: padding 2 x 50 - 60 = 40 > 30: stop after the first
    plans = prefill_plans(
        trace, vllm(max_num_batched_tokens=200, prefill_padding=True, max_paddings=30)
    )
    assert [p[:2] for p in plans] == [(1, 10), (2, 100)]  # 50 and 45: padding 5
    # no cap: all three in one step, padded to 50
    plans = prefill_plans(trace, vllm(max_num_batched_tokens=200, prefill_padding=True))
    assert [p[:2] for p in plans] == [(3, 150)]


def test_max_num_seqs_is_checked_before_the_padding_cap():
    # v0.2.3 checks the budget, then max_num_seqs, then the padding: a batch stopped by
    # the cap of sequences is not a padding stop (same admitted groups either way here)
    trace = make_trace([(0.0, 20, 1)] * 3)
    plans = prefill_plans(
        trace,
        vllm(max_num_batched_tokens=200, prefill_padding=True, max_num_seqs=2, max_paddings=0),
    )
    assert [p[:2] for p in plans] == [(2, 40), (1, 20)]


def test_padding_is_off_by_default_and_belongs_to_vllm():
    assert SchedulerSpec().prefill_padding is False
    with pytest.raises(ConfigError, match="needs scheduler.prefill_padding: true"):
        run_spec_from_dict({"scheduler": {"max_paddings": 256}})
    with pytest.raises(ConfigError, match="rule of vLLM v0.2's scheduler"):
        run_spec_from_dict(
            {"scheduler": {"kind": "orca", "prefill_padding": True}, "allocator": {"kind": "max"}}
        )
