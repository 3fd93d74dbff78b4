"""KV pool sizing: the paper's Table 1, the derived budget, swap space, errors."""

from __future__ import annotations

import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.memory import activation_reserve_bytes, kv_pool
from pagesim.simulator.model_gpu_specs import GIB, get_model
from pagesim.simulator.spec import HardwareSpec


def test_12_gib_on_opt_13b_is_15728_slots():
    pool = kv_pool(HardwareSpec(model="opt-13b", kv_budget_gib=12), swap_space_gib=4)
    assert pool.capacity_slots == 15_728
    assert pool.kv_bytes_per_token == 819_200
    assert pool.num_blocks(16) == 983


@pytest.mark.parametrize(
    "model, gpu, tp, budget_gib, paper_slots",
    [
        ("opt-13b", "a100-40gb", 1, 12, 15_700),
        ("opt-66b", "a100-40gb", 4, 21, 9_700),
        ("opt-175b", "a100-80gb", 8, 264, 60_100),
    ],
)
def test_paper_table_1_slots_from_its_budgets(model, gpu, tp, budget_gib, paper_slots):
    hw = HardwareSpec(model=model, gpu=gpu, tensor_parallel=tp, kv_budget_gib=budget_gib)
    assert kv_pool(hw, swap_space_gib=0).capacity_slots == pytest.approx(paper_slots, rel=0.02)


@pytest.mark.parametrize(
    "model, gpu, tp, paper_gb",
    [
        ("opt-13b", "a100-40gb", 1, 12),
        ("opt-66b", "a100-40gb", 4, 21),
        ("opt-175b", "a100-80gb", 8, 264),
    ],
)
def test_derived_budget_is_near_the_paper(model, gpu, tp, paper_gb):
    """Derived from 0.9 x memory - weights - activations: within 10% of Table 1's budget."""
    pool = kv_pool(HardwareSpec(model=model, gpu=gpu, tensor_parallel=tp), swap_space_gib=4)
    assert pool.kv_budget_bytes / 1e9 == pytest.approx(paper_gb, rel=0.10)


def test_derived_budget_of_opt_13b_is_the_documented_number():
    pool = kv_pool(HardwareSpec(), swap_space_gib=4)
    assert pool.capacity_slots == 15_296  # docs/cost_model.md and the memory module state it
    expected = 0.9 * 40 * GIB - get_model("opt-13b").weight_bytes
    expected -= activation_reserve_bytes(get_model("opt-13b"))
    assert pool.kv_budget_bytes == int(expected)


def test_more_utilisation_gives_more_slots():
    lo = kv_pool(HardwareSpec(gpu_memory_utilization=0.8), swap_space_gib=0)
    hi = kv_pool(HardwareSpec(gpu_memory_utilization=0.95), swap_space_gib=0)
    assert hi.capacity_slots > lo.capacity_slots


def test_kv_slots_given_directly():
    pool = kv_pool(HardwareSpec(kv_slots=1000), swap_space_gib=1)
    assert pool.capacity_slots == 1000
    assert pool.kv_budget_bytes == 1000 * 819_200


def test_cpu_swap_slots():
    pool = kv_pool(HardwareSpec(kv_budget_gib=12), swap_space_gib=4)
    assert pool.cpu_capacity_slots == 4 * GIB // 819_200 == 5242
    assert pool.num_cpu_blocks(16) == 327


def test_tp_splits_kv_heads_and_gqa_replication_counts_per_copy():
    hw = HardwareSpec(model="llama-2-70b", gpu="h100-sxm", tensor_parallel=8, kv_budget_gib=10)
    assert (
        kv_pool(hw, swap_space_gib=0).kv_bytes_per_token
        == get_model("llama-2-70b").kv_bytes_per_token
    )
    # 16 ranks, 8 KV heads: every head is stored twice
    hw16 = HardwareSpec(model="llama-2-70b", gpu="h100-sxm", tensor_parallel=16, kv_budget_gib=10)
    assert (
        kv_pool(hw16, swap_space_gib=0).kv_bytes_per_token
        == 2 * get_model("llama-2-70b").kv_bytes_per_token
    )


def test_weights_that_do_not_fit_are_a_config_error_with_the_arithmetic():
    with pytest.raises(ConfigError, match=r"opt-66b does not fit on 1 x a100-40gb.*weights 122\.4"):
        kv_pool(HardwareSpec(model="opt-66b"), swap_space_gib=4)


def test_tp_that_does_not_divide_heads_is_rejected():
    with pytest.raises(ConfigError, match="tensor_parallel=3"):
        kv_pool(HardwareSpec(model="opt-13b", tensor_parallel=3), swap_space_gib=0)


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_kv_cache_halves_the_bytes_per_token_and_doubles_the_slots(dtype):
    """vLLM's --kv-cache-dtype fp8*: one byte per K/V element where the 16-bit model has two,
    so the same budget (derived, not given in slots) holds twice the tokens."""
    base = kv_pool(HardwareSpec(model="llama-2-7b", gpu="a100-80gb"), swap_space_gib=4)
    fp8 = kv_pool(
        HardwareSpec(model="llama-2-7b", gpu="a100-80gb", kv_cache_dtype=dtype), swap_space_gib=4
    )
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token == 524_288
    assert fp8.kv_budget_bytes == base.kv_budget_bytes
    assert fp8.capacity_slots == base.kv_budget_bytes // (base.kv_bytes_per_token // 2)
    assert fp8.cpu_capacity_slots == 2 * base.cpu_capacity_slots
    # 16-bit forms are the model's own size; slots given directly stay the slots given
    same = HardwareSpec(model="llama-2-7b", gpu="a100-80gb", kv_cache_dtype="bfloat16")
    assert kv_pool(same, swap_space_gib=0).capacity_slots == base.capacity_slots
    given = HardwareSpec(kv_slots=1000, kv_cache_dtype=dtype)
    assert kv_pool(given, swap_space_gib=0).capacity_slots == 1000


def test_an_unknown_kv_cache_dtype_is_refused_naming_the_allowed():
    from pagesim.simulator.spec import run_spec_from_dict

    with pytest.raises(ConfigError, match=r"kv_cache_dtype.*'auto'.*'fp8'"):
        run_spec_from_dict({"hardware": {"kv_cache_dtype": "int4"}}, "t")
