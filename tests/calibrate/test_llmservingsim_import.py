"""`pagesim calibrate import --llmservingsim`: LLMServingSim's layer profiles -> an `external` profile.

Two kinds of test: a small bundle the test writes itself in LLMServingSim's format (made-up
times from known laws, so the fit must recover them), and the real bundles from the shared
data (skipped where absent), which must reproduce the shipped profiles exactly.
"""

import hashlib

import numpy as np
import pandas as pd
import pytest
import yaml

from pagesim.calibrate import llmservingsim as L
from pagesim.calibrate.import_llmservingsim import import_llmservingsim
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR
from pagesim.cli import main
from pagesim.errors import ConfigError, DataError
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.factory import make_cost_model
from pagesim.simulator.costmodel.model import CostModel, layer_gemm_shapes, lm_head_shape
from pagesim.simulator.costmodel.profile import load_profile
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import HardwareSpec

MODEL = get_model("llama-3.1-8b")
TOKENS = (1, 4, 16, 64, 256, 512, 1024, 2048)
HEADS, KV_HEADS, D = 32, 8, 128
MIXED_DECODE_SLOWDOWN = 1.6


def _gemm_us(m, k, n):
    f = F.gemm(m, k, n)
    return 5 + max(f.bytes_ / 1.0e12, f.flops / 150e12) * 1e6


def _pointwise_us(t):
    elems = F.pointwise_elems_per_token("llama", 4096, 14336, HEADS * D, KV_HEADS * D)
    return 6 + F.pointwise(t, elems).bytes_ / 0.8e12 * 1e6


def _prefill_us(chunk, cached):
    f = F.prefill_attention([chunk], [cached + chunk], HEADS, KV_HEADS, D)
    return 5 + f.flops / 100e12 * 1e6


def _decode_us(n, kv):
    f = F.decode_attention([kv + 1] * n, HEADS, KV_HEADS, D, 16)
    return 10 + f.bytes_ / 0.9e12 * 1e6


def _write_bundle(root, *, gpu="NVIDIA GeForce RTX 4090", heads_override=32):
    """A bundle of Llama-3.1-8B shapes in LLMServingSim's layout, times from the laws above."""
    root.mkdir(parents=True)
    meta = {
        "profiler_version": "1.0.0",
        "vllm_version": "0.19.0",
        "cuda_version": "12.8",
        "gpu": gpu,
        "hardware": "RTX4090",
        "model": "meta-llama/Llama-3.1-8B",
        "variant": "bf16",
        "tp_degrees": [1],
        "engine_effective": {"hf_overrides": {"num_attention_heads": heads_override}},
    }
    (root / "meta.yaml").write_text(yaml.safe_dump(meta))
    tp = root / "tp1"
    tp.mkdir()
    dense = []
    shapes = dict(zip(L.GEMM_LAYERS, layer_gemm_shapes(MODEL, 1), strict=True))
    for t in TOKENS:
        for op, (k, n) in shapes.items():
            dense.append((op, t, _gemm_us(t, k, n)))
        for op in ("layernorm", "rotary_emb", "act_fn"):  # 2 x layernorm + rotary + act = law
            dense.append((op, t, _pointwise_us(t) / 4))
        dense += [("embedding", t, 3.0), ("final_layernorm", t, 2.0)]
    pd.DataFrame(dense, columns=["layer", "tokens", "time_us"]).to_csv(
        tp / "dense.csv", index=False
    )
    k, n = lm_head_shape(MODEL, 1)
    per_seq = [("lm_head", s, _gemm_us(s, k, n)) for s in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    per_seq += [("sampler", s, 20 + 0.5 * s) for s in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    pd.DataFrame(per_seq, columns=["layer", "sequences", "time_us"]).to_csv(
        tp / "per_sequence.csv", index=False
    )
    attn = []
    for chunk in (16, 64, 256, 512, 1024, 2048):
        for cached in (0, 512, 4096, 16384):
            attn.append((chunk, cached, 0, 0, _prefill_us(chunk, cached)))
    for n in (1, 4, 16, 64, 256):
        for kv in (16, 256, 2048, 16384):
            attn.append((0, 0, n, kv, _decode_us(n, kv)))
            # a mixed call: its decodes run MIXED_DECODE_SLOWDOWN times slower than alone
            mixed = _prefill_us(512, 0) + MIXED_DECODE_SLOWDOWN * _decode_us(n, kv)
            attn.append((512, 0, n, kv, mixed))
    cols = ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]
    pd.DataFrame(attn, columns=cols).to_csv(tp / "attention.csv", index=False)
    return root


def test_import_recovers_known_laws_and_labels_the_profile(tmp_path):
    bundle = L.read_bundle(_write_bundle(tmp_path / "bf16"), 1, gpu="rtx-4090")
    path, report = import_llmservingsim(
        bundle, "made/up", "abc1234", tmp_path / "out", date="2026-01-01"
    )
    profile = load_profile(path)
    assert profile.kind == "external" and profile.gpu_spec == "rtx-4090"
    assert profile.dtype == "bfloat16"
    gemm = profile.term("gemm")
    assert 1 / gemm.coef("s_per_byte") == pytest.approx(1.0e12, rel=0.02)
    assert 1 / gemm.coef("s_per_flop") == pytest.approx(150e12, rel=0.02)
    # decode K/V bytes, FLOPs and Q/O bytes per sequence are proportional here: check the time
    decode = profile.term("paged_decode_attention")
    unseen = F.decode_attention([1001] * 8, HEADS, KV_HEADS, D, 16)
    assert decode.time_s(*unseen) == pytest.approx(_decode_us(8, 1000) * 1e-6, rel=0.01)
    assert 1 / profile.term("prefill_attention").coef("s_per_flop") == pytest.approx(
        100e12, rel=0.02
    )
    step = profile.term("step_overhead")
    assert step.coef("const_s") == pytest.approx(20e-6, rel=0.02)
    assert step.coef("s_per_seq") == pytest.approx(0.5e-6, rel=0.02)
    pointwise = profile.term("pointwise")
    assert 1 / pointwise.coef("s_per_byte") == pytest.approx(0.8e12, rel=0.02)
    for name in (
        "gemm",
        "prefill_attention",
        "paged_decode_attention",
        "step_overhead",
        "pointwise",
    ):
        assert profile.term(name).heldout_mape < 0.01, name
    kv_write = profile.term("kv_write")  # inside the attention timings: zero, and said so
    assert kv_write.coefficients == {} and "included in the attention timings" in kv_write.origin
    files = {s["file"]: s for s in profile.sources}
    assert set(files) == {
        "RTX4090/meta-llama/Llama-3.1-8B/bf16/meta.yaml",
        *(f"RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/{t}" for t in L.TABLES),
    }
    dense = files["RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv"]
    assert (
        dense["sha256"]
        == hashlib.sha256((tmp_path / "bf16/tp1/dense.csv").read_bytes()).hexdigest()
    )
    assert dense["repository"] == "made/up" and dense["commit"] == "abc1234"
    text = report.read_text()
    # the mixed rows' decodes cost 1.6x: the additive sum misses it, the one-coefficient form
    # recovers the law exactly and is chosen (the three-coefficient one cannot win by 0.5 points)
    assert "| additive | no | — |" in text and "| decode-scale | **yes** |" in text
    mixed = profile.term("mixed_decode_attention")
    assert mixed.coefficients == pytest.approx(
        {k: (MIXED_DECODE_SLOWDOWN - 1) * v for k, v in decode.coefficients.items()}, rel=0.02
    )
    assert mixed.heldout_mape < 0.01 and "decode-scale" in mixed.origin
    # and the simulator prices a mixed step's attention as the law does; a pure step as before
    gpu = get_gpu("rtx-4090")
    full = profile.with_terms(terms={**analytic_profile(gpu).terms, **profile.terms})
    additive = full.with_terms(
        terms={k: v for k, v in full.terms.items() if k != "mixed_decode_attention"}
    )
    cost, without = (CostModel(MODEL, gpu, p) for p in (full, additive))
    mixed_plan = BatchPlan.from_lens([512], [512], [1001] * 8)
    extra = (MIXED_DECODE_SLOWDOWN - 1) * _decode_us(8, 1000) * 1e-6 * MODEL.num_layers
    assert cost.step_time_s(mixed_plan) - without.step_time_s(mixed_plan) == pytest.approx(
        extra, rel=0.02
    )
    for pure in (BatchPlan.from_lens([512], [512]), BatchPlan.from_lens((), None, [1001] * 8)):
        assert cost.step_time_s(pure) == without.step_time_s(pure)
    assert "Other forms and mappings tried" in text and "embedding" in text
    assert not (tmp_path / "out" / "measurements.csv").exists()  # no table is copied


def test_bad_bundles_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="no meta.yaml"):
        L.read_bundle(tmp_path, 1)
    other = _write_bundle(tmp_path / "other", gpu="NVIDIA A10")
    with pytest.raises(DataError, match="GPU 'NVIDIA A10' has no pagesim spec"):
        L.read_bundle(other, 1)
    good = _write_bundle(tmp_path / "good")
    with pytest.raises(ConfigError, match="timed on NVIDIA GeForce RTX 4090"):
        L.read_bundle(good, 1, gpu="h100-sxm")
    with pytest.raises(ConfigError, match=r"profiled at TP \[1\]"):
        L.read_bundle(good, 2)
    with pytest.raises(DataError, match="num_attention_heads is 16"):
        L.read_bundle(_write_bundle(tmp_path / "shard", heads_override=16), 1)
    pd.DataFrame({"layer": ["lm_head"], "time_us": [1.0]}).to_csv(good / "tp1/per_sequence.csv")
    with pytest.raises(DataError, match="missing column 'sequences'"):
        L.measurement_rows(L.read_bundle(good, 1))


def test_cli_import_names_the_bundle_not_the_machine(tmp_path, capsys):
    root = _write_bundle(tmp_path / "bf16")
    args = ["calibrate", "import", "--gpu", "rtx-4090", "--llmservingsim", str(root)]
    assert main([*args, "--origin", "made/up@abc", "--out", str(tmp_path / "out")]) == 0
    profile = load_profile(tmp_path / "out" / "profile.yaml")
    assert str(tmp_path) not in profile.command
    assert "--llmservingsim RTX4090/meta-llama/Llama-3.1-8B/bf16" in profile.command
    assert main([*args, "--out", str(tmp_path / "o2")]) == 2
    assert "give it once with --llmservingsim" in capsys.readouterr().err
    assert main([*args, "--origin", "x.csv=made/up@abc", "--out", str(tmp_path / "o3")]) == 2
    assert "expected OWNER/REPO@COMMIT" in capsys.readouterr().err


def test_qwen3_pointwise_counts_the_qk_norms(tmp_path):
    """A model with per-head q/k norms moves 2 (q + kv) more elements a token per layer."""
    qwen = get_model("qwen3-32b")
    d, tp = qwen.head_dim, 2
    q, kv = qwen.num_heads // tp * d, qwen.num_kv_heads_per_gpu(tp) * d
    args = ("llama", qwen.hidden_size, qwen.ffn_size // tp, q, kv)
    assert F.pointwise_elems_per_token(*args, True) - F.pointwise_elems_per_token(*args) == 2 * (
        q + kv
    )


# ---- the real bundles (shared data) ---------------------------------------------------------

SHIPPED = {
    "rtx-4090-llama-3.1-8b-llmservingsim": ("rtx-4090", "RTX4090/meta-llama/Llama-3.1-8B/bf16", 1),
    "rtx-pro-6000-server-llama-3.1-8b-llmservingsim": (
        "rtx-pro-6000-server",
        "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16",
        1,
    ),
    "rtx-pro-6000-server-qwen3-32b-tp2-llmservingsim": (
        "rtx-pro-6000-server",
        "RTXPRO6000/Qwen/Qwen3-32B/bf16",
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_profiles_are_reproduced_from_the_real_bundles(name, shared_data, tmp_path):
    """The shipped profile is exactly what this code fits on the files its sources name."""
    gpu, prefix, tp = SHIPPED[name]
    root = shared_data("llmservingsim_vllm019", "profiles", *prefix.split("/"))
    shipped = load_profile(DEFAULT_PROFILES_DIR / name / "profile.yaml")
    assert shipped.kind == "external" and shipped.gpu_spec == gpu
    for src in shipped.sources:
        assert src["repository"] == "casys-kaist/LLMServingSim" and src["commit"] == "5daddb2"
        path = root.parents[len(prefix.split("/")) - 1] / src["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == src["sha256"], src["file"]
    bundle = L.read_bundle(root, tp, gpu=gpu)
    fresh = load_profile(
        import_llmservingsim(bundle, "casys-kaist/LLMServingSim", "5daddb2", tmp_path)[0]
    )
    assert set(fresh.terms) == set(shipped.terms)
    for term in shipped.terms:
        got, want = fresh.term(term), shipped.term(term)
        assert got.coefficients == pytest.approx(want.coefficients, rel=1e-9), term
        if want.heldout_mape is not None:
            assert got.heldout_mape == pytest.approx(want.heldout_mape, rel=1e-9), term
    # vLLM's decode attention streams K/V near the memory's rate; its GEMMs below the tensor peak
    spec = get_gpu(gpu)
    decode_bw = 1 / fresh.term("paged_decode_attention").coef("s_per_byte")
    assert 0.5 * spec.hbm_bw_bytes_s < decode_bw < 1.05 * spec.hbm_bw_bytes_s
    assert 1 / fresh.term("gemm").coef("s_per_flop") < spec.fp16_flops
    hw = HardwareSpec(gpu=gpu, model=bundle.model.name, tensor_parallel=tp, profile=name)
    cost = make_cost_model(hw, bundle.model, spec)
    assert (
        "terms ['contiguous_decode_attention', 'block_copy', 'swap'] from the analytic"
        in cost.description
    )
    assert np.isfinite(cost.layer_linear_time_s(2048))
