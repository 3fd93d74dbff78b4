"""A replay whose steps last what a real run's did (simulator/costmodel/recorded.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pagesim.calibrate.step_times import StepTimes
from pagesim.simulator import simulate
from pagesim.simulator.costmodel.recorded import RecordedStepCosts
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import run_spec_from_dict
from pagesim.workloads.assemble import assemble_trace


def _steps(edges, step_s):
    return StepTimes(np.array(edges, dtype=float), np.array(step_s, dtype=float), 10)


def test_steps_follow_each_other_and_an_idle_engine_starts_at_its_clock():
    clock = SimpleNamespace(now=0.0)
    model = RecordedStepCosts(_steps([0.0, 1.0, 2.0], [0.25, 0.5]), "made up")
    model.bind_clock(clock)
    plan = BatchPlan(num_decode_seqs=1, decode_context_sum=10, decode_num_blocks=1)
    durations = [model.step_time_s(plan) for _ in range(4)]  # 0, .25, .5, .75 start in bin 0
    decode = model.decode_time_fn(is_paged=True)
    durations.append(decode(1, 11, 1))  # starts at 1.0: bin 1
    clock.now = 5.0  # the engine waited idle: the next step starts at its clock
    durations.append(model.step_time_s(plan))
    assert durations == [0.25, 0.25, 0.25, 0.25, 0.5, 0.5]
    log = model.log
    assert log[:, 0].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 5.0]
    assert np.isnan(log[:, 2]).all()  # no shadow model


def test_a_shadow_model_prices_every_step_without_changing_it():
    shadow = SimpleNamespace(
        step_time_s=lambda plan: 0.125,
        decode_time_fn=lambda *, is_paged: lambda n, c, b: 0.0625,
    )
    model = RecordedStepCosts(_steps([0.0, 10.0], [0.5]), "made up", shadow=shadow)
    model.bind_clock(SimpleNamespace(now=0.0))
    assert model.step_time_s(BatchPlan(num_prefill_seqs=1, num_prefill_tokens=5)) == 0.5
    assert model.decode_time_fn(is_paged=False)(1, 5, 1) == 0.5
    assert model.log[:, 2].tolist() == [0.125, 0.0625]


def test_simulate_replays_under_the_recorded_step_times():
    """One request alone: its first token after one step (one prefill chunk), then one
    token per step; the steps last 40 ms until t = 2 s and 80 ms after."""
    doc = {
        "hardware": {"gpu": "a100-40gb"},
        "allocator": {"kind": "paged-v1", "block_size": 16},
        "scheduler": {"kind": "vllm-v1"},
    }
    spec = run_spec_from_dict(doc)
    model = RecordedStepCosts(_steps([-1e9, 2.0, 1e9], [0.04, 0.08]), "made up")
    trace = assemble_trace(
        prompt_len=np.array([100]), output_len=np.array([60]), arrival_s=np.array([0.5])
    )
    result = simulate(spec, trace=trace, cost_model=model)
    req = result.requests.iloc[0]
    start = model.log[0, 0]
    assert start == pytest.approx(req["arrival_s"])
    assert req["ttft_s"] == pytest.approx(0.04)
    # steps end every 40 ms before 2 s, every 80 ms after
    expected, t = [], start
    for _ in range(60):
        t += 0.04 if t < 2.0 else 0.08
        expected.append(t)
    assert req["finish_s"] == pytest.approx(expected[-1])
    assert result.notes["cost_model_description"] == "made up"


def test_the_shadow_s_all_reduce_part_is_logged_beside_its_price():
    """A TP-2 shadow: its price of each step, and the two all-reduces per layer in it."""
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    shadow = cost_model_for(None, get_model("llama-2-7b"), get_gpu("a100-80gb"), tensor_parallel=2)
    model = RecordedStepCosts(_steps([0.0, 10.0], [0.5]), "made up", shadow=shadow)
    model.bind_clock(SimpleNamespace(now=0.0))
    plan = BatchPlan(num_prefill_seqs=1, num_prefill_tokens=300, prefill_context_sum=300,
                     prefill_scores=45150.0, num_decode_seqs=4, decode_context_sum=800,
                     decode_num_blocks=52)  # fmt: skip
    model.step_time_s(plan)
    model.decode_time_fn(is_paged=True)(8, 4000, 256)
    layers = get_model("llama-2-7b").num_layers
    log = model.log
    assert log[:, 2].tolist() == [
        shadow.step_time_s(plan),
        shadow.decode_time_fn(is_paged=True)(8, 4000, 256),
    ]
    assert log[:, 3].tolist() == [
        2 * layers * shadow.allreduce_time_s(304),
        2 * layers * shadow.allreduce_time_s(8),
    ]
    assert (log[:, 3] > 0).all() and (log[:, 3] < log[:, 2]).all()


def test_the_log_keeps_each_step_s_batch():
    """Sequences, their context tokens and the prompt tokens computed, for either way the
    engine prices a step: what a serving path is fitted on (calibrate/serving_v1.py)."""
    from pagesim.simulator.costmodel.recorded import LOG_COLUMNS

    model = RecordedStepCosts(_steps([0.0, 10.0], [0.5]), "made up")
    model.bind_clock(SimpleNamespace(now=0.0))
    mixed = BatchPlan(num_prefill_seqs=2, num_prefill_tokens=300, prefill_context_sum=700,
                      num_decode_seqs=3, decode_context_sum=900, decode_num_blocks=60)  # fmt: skip
    model.step_time_s(mixed)
    model.decode_time_fn(is_paged=True)(7, 4000, 256)
    log = model.log
    assert log.shape == (2, len(LOG_COLUMNS))
    cols = [LOG_COLUMNS.index(c) for c in ("num_seqs", "context_tokens", "prefill_tokens")]
    assert log[:, cols].tolist() == [[5, 1600, 300], [7, 4000, 0]]
