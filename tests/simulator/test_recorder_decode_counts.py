"""StepRecorder.record_decode defers the counts of a decode span's steps (they share
them) and adds them when the window closes or the counts change: the time series and
totals must equal recording every step's counts at once."""

import numpy as np
import pandas as pd
import pytest

from pagesim.allocators.base import MemoryUsage
from pagesim.simulator.metrics import StepRecorder


def _replay(ops, *, every_step: bool, share_queues: bool) -> StepRecorder:
    rec = StepRecorder(
        capacity_slots=4096, block_size=16, sample_interval_s=0.5, every_step=every_step
    )
    for op in ops:
        if op[0] == "idle":
            _, start, dur, usage = op
            rec.record_idle(start, dur, MemoryUsage(4096, *usage))
        else:
            _, start, dur, groups, seqs, queues, usage = op
            # a fresh tuple per call: the counts are added at once (no shared span)
            rec.record_decode(
                start, dur, groups, seqs, queues if share_queues else tuple(list(queues)), usage
            )
    return rec


def _usage(rng: np.random.Generator) -> tuple[int, ...]:
    """Token, reserved, internal, external, unused (adding up to the capacity), saved."""
    parts = rng.multinomial(4096, [0.2] * 5).tolist()
    return (*parts, int(rng.integers(0, 800)))


def _ops(seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    ops, t = [], 0.0
    for _ in range(40):  # spans of decode steps with the same counts, idle gaps between
        groups = int(rng.integers(1, 20))
        seqs = groups * int(rng.integers(1, 4))
        queues = (int(rng.integers(0, 5)), groups, int(rng.integers(0, 3)))
        for _ in range(int(rng.integers(1, 30))):
            dur = float(rng.uniform(0.01, 0.2))
            usage = _usage(rng)
            ops.append(("decode", t, dur, groups, seqs, queues, usage))
            t += dur
        if rng.random() < 0.3:
            dur = float(rng.uniform(0.1, 1.0))
            ops.append(("idle", t, dur, _usage(rng)))
            t += dur
    return ops


@pytest.mark.parametrize("every_step", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_deferred_decode_counts_equal_counting_every_step(seed, every_step):
    ops = _ops(seed)
    deferred = _replay(ops, every_step=every_step, share_queues=True)
    at_once = _replay(ops, every_step=every_step, share_queues=False)
    pd.testing.assert_frame_equal(deferred.timeseries(), at_once.timeseries())
    assert deferred.num_steps == at_once.num_steps == sum(op[0] == "decode" for op in ops)
    assert deferred.num_decode_steps == at_once.num_decode_steps
    assert deferred.decode_batch_sum == at_once.decode_batch_sum > 0
    assert deferred.avg_batch_size == at_once.avg_batch_size
    assert deferred.mem_fracs() == at_once.mem_fracs()


def test_counts_are_complete_before_the_window_closes():
    """num_steps and avg_batch_size read mid-window include the deferred steps."""
    rec = StepRecorder(capacity_slots=64, block_size=16, sample_interval_s=10.0, every_step=False)
    queues = (0, 3, 0)
    for k in range(5):
        rec.record_decode(0.1 * k, 0.1, 3, 6, queues, (10, 0, 0, 0, 54, 0))
    assert rec.num_steps == 5
    assert rec.decode_batch_sum == 15
    assert rec.avg_batch_size == 3.0
    row = rec.timeseries().iloc[0]
    assert row["num_steps"] == 5
    assert row["num_decode_tokens"] == 30
    assert row["num_running"] == 3.0
