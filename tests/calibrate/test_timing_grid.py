"""The timing rule (repeat until tight, flush before each run) and the grid planner."""

import numpy as np
import pytest

from pagesim.calibrate.grid import FULL_GRID, QUICK_GRID, plan_grid
from pagesim.calibrate.models import ModelDims, model_dims
from pagesim.calibrate.timing import TimingPolicy, measure
from pagesim.errors import ConfigError
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.iteration import ITERATION_TERMS
from pagesim.simulator.costmodel.profile import TERM_NAMES


def test_measure_stops_once_spread_is_tight_and_flushes_before_every_run():
    calls = []
    samples = iter([9.0, 9.0] + [1.0, 1.01, 0.99, 1.0, 1.0] + [5.0] * 100)  # 2 warm-ups first
    stats = measure(
        lambda: calls.append("run") or next(samples),
        TimingPolicy(2, 5, 50, 0.05),
        lambda: calls.append("flush"),
    )
    assert stats.num_repeats == 5 and stats.is_converged
    assert stats.median_s == pytest.approx(1.0)
    assert calls == ["flush", "run"] * 7


def test_measure_gives_up_at_max_repeats_and_says_so():
    rng = np.random.default_rng(0)
    stats = measure(lambda: float(rng.uniform(1, 3)), TimingPolicy(0, 3, 20, 0.01))
    assert stats.num_repeats == 20 and not stats.is_converged
    assert stats.iqr_s > 0


def test_bad_policy_is_a_config_error():
    with pytest.raises(ConfigError):
        TimingPolicy(min_repeats=10, max_repeats=5)


def test_grid_covers_every_measured_term_and_the_target_shapes():
    cases = plan_grid(model_dims("opt-13b"), QUICK_GRID, np.random.default_rng(0))
    # not timed on the GPU: the CPU-side step overhead, and the optional element-wise kernels
    # (both fitted by `calibrate import` on others' measurements), and the whole-iteration
    # terms (fitted on others' whole-iteration times), and the decodes of a mixed
    # prefill + decode call (pagesim's own kernels run prefills and decodes apart; fitted
    # on vLLM's mixed calls by `calibrate import --llmservingsim`)
    not_timed = {"step_overhead", "pointwise", "mixed_decode_attention", *ITERATION_TERMS}
    assert {c.term for c in cases} == set(TERM_NAMES) - not_timed
    target = [
        c
        for c in cases
        if c.term == "paged_decode_attention"
        and c.params["batch"] >= 64
        and c.params["block_size"] == 16
        and 1024 <= np.mean(c.params["context_lens"]) <= 4096
        and c.params["head_dim"] == 128
    ]
    assert target
    twins = {c.shape_id for c in cases if c.term == "contiguous_decode_attention"}
    assert {c.shape_id for c in target} <= twins
    assert {c.params["block_size"] for c in cases if c.term == "paged_decode_attention"} >= {
        1,
        256,
    } or len(cases) < 400


def test_grid_features_are_the_simulator_features():
    dims = model_dims("opt-13b")
    for c in plan_grid(dims, QUICK_GRID, np.random.default_rng(1)):
        if c.term == "paged_decode_attention":
            p = c.params
            want = F.decode_attention(
                p["context_lens"], p["num_heads"], p["num_kv_heads"], p["head_dim"], p["block_size"]
            )
            assert c.features == want
        if c.term == "gemm":
            assert c.features == F.gemm(c.params["m"], c.params["k"], c.params["n"])


def test_grid_is_deterministic_and_respects_the_memory_cap():
    dims = model_dims("opt-13b")
    a = plan_grid(dims, FULL_GRID, np.random.default_rng(3))
    b = plan_grid(dims, FULL_GRID, np.random.default_rng(3))
    assert [(c.shape_id, c.params) for c in a] == [(c.shape_id, c.params) for c in b]
    for c in a:
        if c.term == "contiguous_decode_attention":
            p = c.params
            assert (
                2
                * 2
                * len(p["context_lens"])
                * max(p["context_lens"])
                * p["num_kv_heads"]
                * p["head_dim"]
                <= FULL_GRID.max_kv_bytes
            )


def test_model_dims_validate_and_unknown_model_names_known_ones():
    assert model_dims("opt-13b").linear_shapes["fc1"] == (5120, 20480)
    with pytest.raises(ConfigError, match="opt-13b"):
        model_dims("gpt-9")
    with pytest.raises(ConfigError, match="num_kv_heads"):
        ModelDims("x", 64, 256, 6, 4, 64)
