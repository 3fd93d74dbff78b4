"""CostModel: the step-time sum, its monotonicity, the analytic roofline, projection, building."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.errors import ConfigError
from pagesim.simulator.costmodel import (
    CostModel,
    analytic_profile,
    load_profile,
    make_cost_model,
    project_profile,
)
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import HardwareSpec

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_profile.yaml"
OPT13B, A100 = get_model("opt-13b"), get_gpu("a100-40gb")


@pytest.fixture(scope="module")
def analytic_a100() -> CostModel:
    return CostModel(OPT13B, A100, analytic_profile(A100))


@pytest.fixture(scope="module")
def tiny() -> CostModel:
    return CostModel(OPT13B, A100, load_profile(FIXTURE))


def _reference_step_time_s(model, profile, lens: dict) -> float:
    """The documented sum, written plainly with Term.time_s on the shared features (TP 1),
    from the per-sequence lengths the plan ``BatchPlan.from_lens(**lens)`` totals."""
    plan = BatchPlan.from_lens(**lens)
    prefill_new_lens = lens.get("prefill_new_lens", ())
    prefill_context_lens = lens.get("prefill_context_lens", prefill_new_lens)
    decode_context_lens = lens.get("decode_context_lens", ())
    term = profile.term
    h, f, d, L = model.hidden_size, model.ffn_size, model.head_dim, model.num_layers
    nh, kvh = model.num_heads, model.num_kv_heads
    T = plan.num_tokens
    layer = 0.0
    if T:
        for k, n in ((h, 3 * h), (h, h), (h, f), (f, h)):
            layer += term("gemm").time_s(**_kw(F.gemm(T, k, n)))
        layer += term("kv_write").time_s(**_kw(F.kv_write(T, kvh, d)))
    if prefill_new_lens:
        fe = F.prefill_attention(prefill_new_lens, prefill_context_lens, nh, kvh, d)
        layer += term("prefill_attention").time_s(**_kw(fe))
    if decode_context_lens:
        ctx = decode_context_lens
        if plan.is_paged:
            fe = F.decode_attention(ctx, nh, kvh, d, plan.block_size)
            layer += term("paged_decode_attention").time_s(**_kw(fe))
        else:
            fe = F.decode_attention(ctx, nh, kvh, d, max(ctx))
            layer += term("contiguous_decode_attention").time_s(**_kw(fe))
    t = L * layer
    if plan.num_seqs:
        t += term("gemm").time_s(**_kw(F.gemm(plan.num_seqs, h, model.vocab_size)))
    block_bytes = plan.block_size * 2 * kvh * d * 2
    if plan.num_copied_blocks:
        t += L * term("block_copy").time_s(**_kw(F.block_copy(plan.num_copied_blocks, block_bytes)))
    for nb in (plan.num_swapped_in_blocks, plan.num_swapped_out_blocks):
        if nb:
            t += L * term("swap").time_s(**_kw(F.swap(nb, block_bytes)))
    return t + term("step_overhead").time_s(**_kw(F.step_overhead(plan.num_seqs, T)))


def _kw(f: F.Features) -> dict:
    return {
        "bytes_": f.bytes_,
        "flops": f.flops,
        "blocks": f.blocks,
        "seqs": f.seqs,
        "tokens": f.tokens,
    }


PLANS = [
    {"decode_context_lens": (1,)},
    {"decode_context_lens": (17, 300, 2048), "num_copied_blocks": 3},
    {"decode_context_lens": (17, 300), "is_paged": False, "block_size": 8},
    {"prefill_new_lens": (100, 7), "prefill_context_lens": (132, 7)},
    {"prefill_new_lens": (5,), "prefill_context_lens": (5,), "decode_context_lens": (40, 41)},
    {"decode_context_lens": (64,) * 8, "num_swapped_in_blocks": 4, "num_swapped_out_blocks": 2},
    {"num_swapped_out_blocks": 5},
]


@pytest.mark.parametrize("lens", PLANS)
@pytest.mark.parametrize("profile_of", ["tiny", "analytic"])
def test_step_time_is_the_documented_sum(lens, profile_of, tiny, analytic_a100):
    cm = tiny if profile_of == "tiny" else analytic_a100
    expected = _reference_step_time_s(OPT13B, cm.profile, lens)
    plan = BatchPlan.from_lens(**lens)
    assert cm.step_time_s(plan) == pytest.approx(expected, rel=1e-12)
    assert cm.step_time_s(plan) == cm.step_time_s(plan)  # memoisation does not change it


def test_empty_plan_costs_nothing(tiny):
    assert tiny.step_time_s(BatchPlan()) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    ctx=st.lists(st.integers(1, 4096), min_size=1, max_size=40),
    grow_at=st.integers(0, 39),
    grow_by=st.integers(1, 500),
    block_size=st.sampled_from([1, 8, 16, 128]),
    is_paged=st.booleans(),
)
def test_longer_contexts_and_more_sequences_never_cheaper(
    ctx, grow_at, grow_by, block_size, is_paged
):
    cm = CostModel(OPT13B, A100, analytic_profile(A100))
    base = BatchPlan.from_lens(
        decode_context_lens=tuple(ctx), block_size=block_size, is_paged=is_paged
    )
    longer = list(ctx)
    longer[grow_at % len(ctx)] += grow_by
    t0 = cm.step_time_s(base)
    assert (
        cm.step_time_s(
            BatchPlan.from_lens(
                decode_context_lens=tuple(longer), block_size=block_size, is_paged=is_paged
            )
        )
        >= t0
    )
    more = BatchPlan.from_lens(
        decode_context_lens=(*ctx, grow_by), block_size=block_size, is_paged=is_paged
    )
    assert cm.step_time_s(more) > t0


@settings(max_examples=40, deadline=None)
@given(new=st.integers(1, 3000), extra=st.integers(1, 3000), cached=st.integers(0, 1000))
def test_more_prefill_tokens_never_cheaper(new, extra, cached):
    cm = CostModel(OPT13B, A100, analytic_profile(A100))
    a = BatchPlan.from_lens(prefill_new_lens=(new,), prefill_context_lens=(new + cached,))
    b = BatchPlan.from_lens(
        prefill_new_lens=(new + extra,), prefill_context_lens=(new + extra + cached,)
    )
    assert cm.step_time_s(b) > cm.step_time_s(a)


def test_paged_decode_costs_more_than_contiguous_by_the_paper_margin(analytic_a100):
    """§7.1: the paged kernel is 20–26% slower than FasterTransformer's (attention alone)."""
    cm = analytic_a100
    ctx = (512,) * 32
    t_paged = cm.step_time_s(BatchPlan.from_lens(decode_context_lens=ctx))
    t_contig = cm.step_time_s(BatchPlan.from_lens(decode_context_lens=ctx, is_paged=False))
    assert t_paged > t_contig
    fe = F.decode_attention_totals(32, 512 * 32, 32 * 32, 40, 40, 128)
    paged = cm.profile.term("paged_decode_attention").time_s(**_kw(fe))
    contig = cm.profile.term("contiguous_decode_attention").time_s(**_kw(fe))
    assert 1.15 < paged / contig < 1.35


def test_small_blocks_make_paged_attention_slower(analytic_a100):
    ctx = (1000,) * 16
    times = [
        analytic_a100.step_time_s(BatchPlan.from_lens(decode_context_lens=ctx, block_size=bs))
        for bs in (1, 4, 16, 64)
    ]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_swap_costs_more_per_byte_at_small_blocks(analytic_a100):
    per_byte = []
    for bs in (1, 8, 16, 64, 256):
        t = analytic_a100.step_time_s(
            BatchPlan.from_lens(num_swapped_out_blocks=4096 // bs, block_size=bs)
        )
        per_byte.append(t / (4096 * OPT13B.kv_bytes_per_token))
    assert per_byte == sorted(per_byte, reverse=True)
    assert per_byte[0] > 5 * per_byte[-1]


def test_decode_at_batch_1_is_weight_bandwidth_bound(analytic_a100):
    """OPT-13B batch 1 on A100: ~26 GB of weights / 1.5 TB/s ~ 17 ms, before efficiency and overhead."""
    t = analytic_a100.step_time_s(BatchPlan.from_lens(decode_context_lens=(128,)))
    roofline = OPT13B.weight_bytes / A100.hbm_bw_bytes_s
    assert roofline == pytest.approx(0.0165, rel=0.02)
    assert roofline < t < 2 * roofline


def test_2048_token_prefill_is_compute_bound(analytic_a100):
    term = analytic_a100.profile.term("gemm")
    fe = F.gemm(2048, 5120, 20480)
    assert term.coef("s_per_flop") * fe.flops > 3 * term.coef("s_per_byte") * fe.bytes_
    t = analytic_a100.step_time_s(
        BatchPlan.from_lens(prefill_new_lens=(2048,), prefill_context_lens=(2048,))
    )
    compute_roofline = 2 * OPT13B.num_params * 2048 / A100.fp16_flops
    assert compute_roofline < t < 3 * compute_roofline


def test_tensor_parallel_shards_work_and_adds_all_reduces():
    m, gpu = get_model("opt-66b"), get_gpu("a100-40gb")
    prof = analytic_profile(gpu)
    plan = BatchPlan.from_lens(decode_context_lens=(300,) * 16)
    tp1, tp4 = CostModel(m, gpu, prof), CostModel(m, gpu, prof, tensor_parallel=4)
    assert tp4.allreduce_time_s(16) > 0 and tp1.allreduce_time_s(16) == 0
    assert tp4.step_time_s(plan) < tp1.step_time_s(plan)
    ar = 2 * 3 / 4 * 16 * m.hidden_size * 2 / gpu.nvlink_bw_bytes_s
    assert tp4.allreduce_time_s(16) == pytest.approx(ar + 10e-6)


def test_a_measured_link_prices_the_all_reduces_and_is_named():
    """hardware.link replaces the GPU spec's link and the 10 us latency in the ring formula
    (nccl-tests' busbw convention), at TP > 1 only, and the description says so."""
    from pagesim.simulator.costmodel.factory import make_cost_model

    m, gpu = get_model("qwen3-32b"), get_gpu("rtx-pro-6000-server")
    link = {"bus_bw_gbps": 16, "latency_us": 20, "source": "all_reduce_perf, 2 GPUs"}
    spec = HardwareSpec(model="qwen3-32b", gpu=gpu.name, tensor_parallel=2, link=link)
    measured = make_cost_model(spec, m, gpu)
    default = make_cost_model(spec.model_copy(update={"link": None}), m, gpu)
    num_bytes = 256 * m.hidden_size * 2
    assert measured.allreduce_time_s(256) == pytest.approx(num_bytes / 16e9 + 20e-6)
    assert default.allreduce_time_s(256) == pytest.approx(num_bytes / gpu.nvlink_bw_bytes_s + 10e-6)
    plan = BatchPlan.from_lens(decode_context_lens=(500,) * 64)
    extra = 2 * m.num_layers * (measured.allreduce_time_s(64) - default.allreduce_time_s(64))
    assert measured.step_time_s(plan) - default.step_time_s(plan) == pytest.approx(extra)
    assert "hardware.link (16 GB/s bus bandwidth, 20 µs; all_reduce_perf, 2 GPUs)" in (
        measured.description
    )
    tp1 = spec.model_copy(update={"tensor_parallel": 1})
    assert make_cost_model(tp1, m, gpu).allreduce_time_s(256) == 0.0
    # whole steps that hold their all-reduces (Splitwise's) say the link goes unused
    steps = HardwareSpec(
        model="llama-2-70b", gpu="a100-80gb", tensor_parallel=2, profile="a100-80gb-splitwise"
    )
    a100 = get_gpu("a100-80gb")
    with_link = steps.model_copy(update={"link": spec.link})
    described = make_cost_model(with_link, get_model("llama-2-70b"), a100).description
    assert "inside the fitted steps; hardware.link not used" in described
    assert "not used" not in make_cost_model(steps, get_model("llama-2-70b"), a100).description


@pytest.mark.parametrize(
    "link, key",
    [({"bus_bw_gbps": 0, "latency_us": 5}, "bus_bw_gbps"), ({"bus_bw_gbps": 50}, "latency_us")],
)
def test_a_bad_link_is_refused_naming_its_key(link, key):
    from pagesim.simulator.spec import run_spec_from_dict

    with pytest.raises(ConfigError, match=rf"exp.yaml: hardware\.link\.{key}"):
        run_spec_from_dict({"hardware": {"link": link}}, "exp.yaml")


def test_llama_gqa_reads_less_kv_than_mha():
    gpu = get_gpu("h100-sxm")
    prof = analytic_profile(gpu)
    l2, l3 = (
        CostModel(get_model("llama-2-7b"), gpu, prof),
        CostModel(get_model("llama-3-8b"), gpu, prof),
    )
    ctx = (4000,) * 64
    attn = [
        cm.step_time_s(BatchPlan.from_lens(decode_context_lens=ctx))
        - cm.step_time_s(BatchPlan.from_lens(decode_context_lens=(1,) * 64))
        for cm in (l2, l3)
    ]
    assert attn[1] < attn[0] / 2


@pytest.mark.parametrize("model", ["opt-13b", "llama-2-7b", "llama-3-8b"])
@pytest.mark.parametrize("block_size", [1, 16, 7, None])
def test_decode_formula_equals_the_summed_step_time_exactly(model, block_size):
    gpu = get_gpu("a100-80gb")
    cm = CostModel(get_model(model), gpu, analytic_profile(gpu))
    is_paged = block_size is not None
    rng = np.random.default_rng(block_size or 0)
    for num_seqs in (1, 2, 23, 256):
        ctx = [int(c) for c in rng.integers(1, 4000, size=num_seqs)]
        if is_paged:
            blocks = sum(-(-c // block_size) for c in ctx)
            plan = BatchPlan.from_lens(decode_context_lens=tuple(ctx), block_size=block_size)
        else:  # contiguous: one region per sequence
            blocks = num_seqs
            plan = BatchPlan.from_lens(
                decode_context_lens=tuple(ctx), block_size=16, is_paged=False
            )
        assert plan.decode_num_blocks == blocks
        # bit for bit, not approximately: a pure decode step takes the precomputed formula
        assert cm.step_time_s(plan) == cm.summed_step_time_s(plan)
        assert cm.step_time_s(plan) == cm.summed_step_time_s(plan)  # memoised path


@pytest.mark.parametrize("model", ["opt-13b", "llama-2-7b", "llama-3-8b"])
@pytest.mark.parametrize("profile", ["analytic", "fixture"])
def test_prefill_formula_equals_the_summed_step_time_exactly(model, profile):
    gpu = get_gpu("a100-40gb")
    prof = analytic_profile(gpu) if profile == "analytic" else load_profile(FIXTURE)
    cm = CostModel(get_model(model), gpu, prof)
    rng = np.random.default_rng(7)
    for num_seqs in (1, 2, 5, 40):
        new = [int(q) for q in rng.integers(1, 3000, size=num_seqs)]
        # a cached prefix on some prompts (prefix caching): context > new tokens
        cached = rng.integers(0, 4, size=num_seqs).tolist()
        ctx = [q + c * 16 for q, c in zip(new, cached, strict=True)]
        for plan in (
            BatchPlan.from_lens(new, ctx),
            BatchPlan.from_lens(new, ctx, is_paged=False),
            BatchPlan.from_lens(new),
        ):
            # bit for bit: a prefill-only step takes the precomputed formula
            assert cm.step_time_s(plan) == cm.summed_step_time_s(plan)
            assert cm.step_time_s(plan) == cm.summed_step_time_s(plan)  # memoised path
    # a step that also decodes, copies or swaps takes the general sum
    mixed = BatchPlan.from_lens((100,), decode_context_lens=(50,), num_copied_blocks=1)
    assert cm.step_time_s(mixed) == cm.summed_step_time_s(mixed)


# ---- projection ---------------------------------------------------------------------


def test_projection_scales_as_documented():
    src, dst = get_gpu("a100-40gb"), get_gpu("h100-sxm")
    p = load_profile(FIXTURE)
    q = project_profile(p, dst, src)
    assert q.kind == "projected" and q.gpu_spec == "h100-sxm" and "a100-40gb" in q.notes
    g, gq = p.term("gemm"), q.term("gemm")
    assert gq.coef("s_per_byte") == pytest.approx(g.coef("s_per_byte") * 1555e9 / 3.35e12)
    assert gq.coef("s_per_flop") == pytest.approx(g.coef("s_per_flop") * 312e12 / 989.4e12)
    assert gq.coef("const_s") == g.coef("const_s")
    s, sq = p.term("swap"), q.term("swap")
    assert sq.coef("s_per_byte") == pytest.approx(s.coef("s_per_byte") * 32e9 / 64e9)
    assert sq.coef("s_per_block") == s.coef("s_per_block")
    pd_, pdq = p.term("paged_decode_attention"), q.term("paged_decode_attention")
    assert pdq.coef("s_per_block") == pd_.coef("s_per_block")


def test_projecting_the_analytic_profile_gives_the_target_analytic_profile():
    """The analytic efficiencies are GPU-independent, so projection and analytic agree."""
    a100, h200 = get_gpu("a100-80gb"), get_gpu("h200")
    q = project_profile(analytic_profile(a100), h200, a100)
    direct = analytic_profile(h200)
    for name, term in direct.terms.items():
        for c, v in term.coefficients.items():
            assert q.term(name).coef(c) == pytest.approx(v), (name, c)


# ---- building from a HardwareSpec ---------------------------------------------------


def test_make_cost_model_defaults_to_analytic():
    cm = make_cost_model(HardwareSpec(), OPT13B, A100)
    assert cm.profile.kind == "analytic" and "analytic" in cm.description


def test_make_cost_model_loads_a_path_and_projects_it():
    h100 = get_gpu("h100-sxm")
    cm = make_cost_model(HardwareSpec(gpu="h100-sxm", profile=str(FIXTURE)), OPT13B, h100)
    assert cm.profile.kind == "projected" and "projected to h100-sxm" in cm.description
    same = make_cost_model(HardwareSpec(profile=str(FIXTURE)), OPT13B, A100)
    assert same.profile == load_profile(FIXTURE) and "projected" not in same.description


def test_make_cost_model_fills_missing_terms_and_says_so(tmp_path):
    p = load_profile(FIXTURE)
    partial = p.with_terms(terms={k: v for k, v in p.terms.items() if k != "step_overhead"})
    path = partial.save(tmp_path / "partial.yaml")
    cm = make_cost_model(HardwareSpec(profile=str(path)), OPT13B, A100)
    assert "['step_overhead'] from the analytic profile" in cm.description
    assert cm.profile.term("step_overhead") == analytic_profile(A100).term("step_overhead")


def test_unknown_shipped_profile_and_missing_path_are_config_errors():
    with pytest.raises(ConfigError, match="no shipped profile 'tpu-v9'"):
        make_cost_model(HardwareSpec(profile="tpu-v9"), OPT13B, A100)
    with pytest.raises(ConfigError, match="profile file not found"):
        make_cost_model(HardwareSpec(profile="missing/profile.yaml"), OPT13B, A100)


def test_profile_of_an_unknown_gpu_cannot_be_projected(tmp_path):
    p = load_profile(FIXTURE).with_terms(gpu_spec="rtx-9090")
    path = p.save(tmp_path / "p.yaml")
    with pytest.raises(ConfigError, match="gpu_spec 'rtx-9090' is not a known GPU"):
        make_cost_model(HardwareSpec(profile=str(path)), OPT13B, A100)


def test_shipped_profile_is_found_by_name(tmp_path, monkeypatch):
    from pagesim.simulator.costmodel import factory

    assert factory.shipped_profiles_dir().parts[-2:] == ("calibrate", "profiles")
    (tmp_path / "a100-hand").mkdir()
    load_profile(FIXTURE).save(tmp_path / "a100-hand" / "profile.yaml")
    monkeypatch.setattr(factory, "shipped_profiles_dir", lambda: tmp_path)
    assert factory.shipped_profile_names() == ["a100-hand"]
    cm = make_cost_model(HardwareSpec(profile="a100-hand"), OPT13B, A100)
    assert cm.profile == load_profile(FIXTURE) and "(a100-hand)" in cm.description
    with pytest.raises(ConfigError, match=r"shipped profiles: \['a100-hand'\]"):
        make_cost_model(HardwareSpec(profile="h100-hand"), OPT13B, A100)


def test_same_spec_gives_bit_identical_step_times():
    plans = [BatchPlan.from_lens(**lens) for lens in PLANS]
    plans.append(BatchPlan.from_lens(decode_context_lens=tuple(range(1, 300, 7))))
    hw = HardwareSpec(model="opt-66b", tensor_parallel=4)
    a = make_cost_model(hw, get_model("opt-66b"), A100)
    b = make_cost_model(hw, get_model("opt-66b"), A100)
    assert [a.step_time_s(p) for p in plans] == [b.step_time_s(p) for p in reversed(plans)][::-1]


def test_fast_coefficients_follow_the_schema_order():
    """CostModel's attribute form of a Term is filled positionally from COEFFICIENT_NAMES."""
    import dataclasses

    from pagesim.simulator.costmodel.model import _Coefs
    from pagesim.simulator.costmodel.profile import COEFFICIENT_NAMES

    assert tuple(f.name for f in dataclasses.fields(_Coefs)) == COEFFICIENT_NAMES
