"""`pagesim calibrate import`: Vidur-format tables -> the same fit -> an `external` profile.

Two kinds of test: small tables the test writes itself in Vidur's format (made-up times
from a known formula, so the fit must recover it), and the real tables from the shared
data (skipped where absent), which must reproduce the shipped profiles exactly.
"""

import hashlib

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate import vidur
from pagesim.calibrate.external import Source, VidurTables, import_vidur, parse_origins
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR
from pagesim.cli import main
from pagesim.errors import ConfigError, DataError
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.factory import make_cost_model
from pagesim.simulator.costmodel.profile import load_profile, profile_from_dict
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.spec import HardwareSpec

CPU_CONST_MS, CPU_PER_SEQ_MS = 1.2, 0.04


def _write_cpu_table(path, tp=1):
    rows = []
    for batch in (8, 16, 32, 64, 96, 128):
        total = CPU_CONST_MS + CPU_PER_SEQ_MS * batch
        parts = dict.fromkeys(vidur.CPU_PARTS, total / 5)
        rows.append(
            {
                "model_name": "made/up-7b",
                "batch_size": batch,
                "tensor_parallel_degree": tp,
                **parts,
                vidur.RAY_PART: total / 5,
            }
        )
    pd.DataFrame(rows).to_csv(path)
    return path


def _write_attention_table(path):
    """Decode rows: 20 us + 1.6 TB/s of K/V; prefill rows: 10 us + 150 TFLOP/s."""
    rows = []
    for batch in (1, 2, 4, 8, 16, 32, 64, 128):
        for ctx in (32, 256, 1024, 2048, 4032):
            kv_bytes = batch * ctx * 4 * 128 * 2 * 2
            rows.append(
                {
                    "is_prefill": False,
                    "batch_size": batch,
                    "kv_cache_size": ctx,
                    "prefill_chunk_size": 0,
                    "decode": 0.020 + kv_bytes / 1.6e12 * 1e3,
                }
            )
    for chunk in (64, 128, 512, 1024, 2048, 4096):
        for cached in (0, 512, 2048):
            scores = chunk * cached + chunk * (chunk + 1) / 2
            flops = 4 * 128 * 32 * scores
            rows.append(
                {
                    "is_prefill": True,
                    "batch_size": 1,
                    "kv_cache_size": cached,
                    "prefill_chunk_size": chunk,
                    "prefill": 0.010 + flops / 150e12 * 1e3,
                }
            )
    df = pd.DataFrame(rows)
    df = df.assign(
        n_embd=8192, n_q_head=64, n_kv_head=8, block_size=16, num_tensor_parallel_workers=2
    )
    df["time_stats.attn_decode.median"] = df.pop("decode")
    df["time_stats.attn_prefill.median"] = df.pop("prefill")
    df.to_csv(path, index=False)
    return path


def _write_mlp_table(path):
    """Each linear layer: 5 us + max(bytes / 1.5 TB/s, flops / 250 TFLOP/s); the element-wise
    operators together 15 us + their bytes at 1.2 TB/s."""
    rows = []
    for tp in (1, 2):
        for m in (1, 8, 32, 128, 512, 1024, 2048, 4096):
            row = {
                "n_head": 32,
                "n_kv_head": 32,
                "n_embd": 4096,
                "n_expanded_embd": 11008,
                "use_gated_mlp": True,
                "num_tokens": m,
                "num_tensor_parallel_workers": tp,
            }
            for op, (k, n) in vidur.gemm_shapes(4096, 32, 32, 11008, True, tp).items():
                b = (m * k + k * n + m * n) * 2
                row[f"time_stats.{op}.median"] = (
                    5e-6 + max(b / 1.5e12, 2 * m * k * n / 250e12)
                ) * 1e3
            elems = F.pointwise_elems_per_token("llama", 4096, 11008 // tp, 4096 // tp, 4096 // tp)
            for op in vidur.POINTWISE_OPS:  # together: 15 us + their bytes at 1.2 TB/s
                row[f"time_stats.{op}.median"] = (3e-6 + m * elems * 2 / 1.2e12 / 5) * 1e3
            rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _tables(tmp_path, gpu="a100-80gb", attention_gpu=None):
    src = lambda p: Source(p, "made/up", "abc1234")  # noqa: E731
    return VidurTables(
        gpu=gpu,
        attention=(src(_write_attention_table(tmp_path / "attn.csv")),),
        mlp=(src(_write_mlp_table(tmp_path / "mlp.csv")),),
        cpu_overheads=(src(_write_cpu_table(tmp_path / "cpu.csv")),),
        attention_gpu=attention_gpu,
    )


def test_import_recovers_known_times_and_labels_the_profile(tmp_path):
    tables = _tables(tmp_path)
    path, report = import_vidur(tables, tmp_path / "out", command="test", date="2026-01-01")
    profile = load_profile(path)
    assert profile.kind == "external"
    step = profile.term("step_overhead")
    assert step.coef("const_s") == pytest.approx(CPU_CONST_MS * 1e-3, rel=1e-3)
    assert step.coef("s_per_seq") == pytest.approx(CPU_PER_SEQ_MS * 1e-3, rel=1e-3)
    for name in (
        "gemm",
        "paged_decode_attention",
        "prefill_attention",
        "step_overhead",
        "pointwise",
    ):
        assert profile.term(name).heldout_mape < 0.01, name
        assert "fitted on" in profile.term(name).origin
    pointwise = profile.term("pointwise")
    assert pointwise.coef("const_s") == pytest.approx(15e-6, rel=0.02)
    assert 1 / pointwise.coef("s_per_byte") == pytest.approx(1.2e12, rel=0.02)
    gemm = profile.term("gemm")
    assert 1 / gemm.coef("s_per_byte") == pytest.approx(1.5e12, rel=0.02)
    assert 1 / gemm.coef("s_per_flop") == pytest.approx(250e12, rel=0.02)
    digests = {s["file"]: s["sha256"] for s in profile.sources}
    assert digests["cpu.csv"] == hashlib.sha256((tmp_path / "cpu.csv").read_bytes()).hexdigest()
    assert {s["repository"] for s in profile.sources} == {"made/up"}
    text = report.read_text()
    assert "external" in text and "not by pagesim" in text and "abc1234" in text
    assert not (tmp_path / "out" / "measurements.csv").exists()  # no table is copied


def test_projected_attention_is_rescaled_and_named_in_every_run(tmp_path):
    a100 = load_profile(import_vidur(_tables(tmp_path), tmp_path / "a100")[0])
    h100 = load_profile(
        import_vidur(_tables(tmp_path, "h100-sxm", "a100-80gb"), tmp_path / "h100")[0]
    )
    assert h100.gpu_spec == "h100-sxm"
    assert sorted(h100.projected_terms) == ["paged_decode_attention", "prefill_attention"]
    ratio = get_gpu("a100-80gb").fp16_flops / get_gpu("h100-sxm").fp16_flops
    assert h100.term("prefill_attention").coef("s_per_flop") == pytest.approx(
        a100.term("prefill_attention").coef("s_per_flop") * ratio
    )
    assert h100.term("gemm").origin.startswith("fitted")
    assert "PROJECTED" in h100.notes
    hw = HardwareSpec(gpu="h100-sxm", profile=str(tmp_path / "h100" / "profile.yaml"))
    cost = make_cost_model(hw, get_model("opt-13b"), get_gpu("h100-sxm"))
    assert "projected from another GPU" in cost.description
    assert "prefill_attention" in cost.description


def test_origins_are_required_for_every_table(tmp_path):
    files = [tmp_path / "a.csv", tmp_path / "b.csv"]
    assert parse_origins(["a.csv=o/r@1", "b.csv=o/r@2"], files)["b.csv"] == ("o/r", "2")
    with pytest.raises(ConfigError, match="no origin given for 'b.csv'"):
        parse_origins(["a.csv=o/r@1"], files)
    with pytest.raises(ConfigError, match="FILE=OWNER/REPO@COMMIT"):
        parse_origins(["a.csv"], files)


def test_bad_tables_are_one_line_errors(tmp_path):
    bad = tmp_path / "cpu.csv"
    pd.DataFrame({"batch_size": [1]}).to_csv(bad)
    with pytest.raises(DataError, match="missing column 'model_name'"):
        vidur.cpu_overhead_rows(bad)
    with pytest.raises(DataError, match="no rows with tensor_parallel_degree 4"):
        vidur.cpu_overhead_rows(_write_cpu_table(tmp_path / "cpu1.csv"), tensor_parallel=4)
    with pytest.raises(ConfigError, match="--gpu: 'a200' is not a known GPU"):
        VidurTables(gpu="a200", cpu_overheads=(Source(bad, "o/r", "1"),))


def test_profile_schema_checks_sources_and_origin():
    doc = {"kind": "external", "gpu_name": "x", "gpu_spec": "a100-80gb", "terms": {}}
    with pytest.raises(ConfigError, match=r"sources\[0\]: missing key 'sha256'"):
        profile_from_dict({**doc, "sources": [{"file": "f", "repository": "r", "commit": "c"}]})
    with pytest.raises(ConfigError, match=r"sources\[0\]: unknown key 'url'"):
        profile_from_dict({**doc, "sources": [{"url": "u"}]})
    bad_term = {"gemm": {"coefficients": {}, "origin": 3}}
    with pytest.raises(ConfigError, match=r"terms.gemm.origin: must be a string"):
        profile_from_dict({**doc, "terms": bad_term})


def test_cli_import_writes_profile_and_report(tmp_path, capsys):
    _write_cpu_table(tmp_path / "cpu.csv")
    code = main(
        [
            "calibrate",
            "import",
            "--gpu",
            "a100-80gb",
            "--cpu-overheads",
            str(tmp_path / "cpu.csv"),
            "--origin",
            "cpu.csv=made/up@abc",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    profile = load_profile(tmp_path / "out" / "profile.yaml")
    assert profile.kind == "external" and list(profile.terms) == ["step_overhead"]
    assert str(tmp_path) not in profile.command  # file names only, no machine paths
    assert (
        main(
            [
                "calibrate",
                "import",
                "--gpu",
                "a100-80gb",
                "--cpu-overheads",
                str(tmp_path / "cpu.csv"),
                "--out",
                str(tmp_path / "o2"),
            ]
        )
        == 2
    )
    assert "no origin given" in capsys.readouterr().err


# ---- the real tables (shared data) ----------------------------------------------------------

SHIPPED = {
    "a100-80gb-vidur": ("a100-80gb", None),
    "h100-sxm-vidur": ("h100-sxm", "a100-80gb"),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_profiles_are_reproduced_from_the_real_tables(name, shared_data, tmp_path):
    """The shipped profile is exactly what this code fits on the tables its sources name."""
    folder = shared_data("vidur_profiling")
    shipped = load_profile(DEFAULT_PROFILES_DIR / name / "profile.yaml")
    assert shipped.kind == "external"
    files = {s["file"]: s for s in shipped.sources}
    for f, s in files.items():
        assert hashlib.sha256((folder / f).read_bytes()).hexdigest() == s["sha256"], f
    gpu, attention_gpu = SHIPPED[name]

    def group(kind):
        return tuple(
            Source(folder / f, s["repository"], s["commit"]) for f, s in files.items() if kind in f
        )

    tables = VidurTables(
        gpu=gpu,
        attention=group("attention"),
        mlp=group("mlp"),
        cpu_overheads=group("cpu_overheads"),
        attention_gpu=attention_gpu,
    )
    fresh = load_profile(import_vidur(tables, tmp_path, seed=0)[0])
    assert set(fresh.terms) == set(shipped.terms)
    for term in shipped.terms:
        got, want = fresh.term(term), shipped.term(term)
        assert got.coefficients == pytest.approx(want.coefficients, rel=1e-9), term
        assert got.heldout_mape == pytest.approx(want.heldout_mape, rel=1e-9), term
        if want.heldout_residual_quantiles is not None:
            assert got.heldout_residual_quantiles == pytest.approx(
                want.heldout_residual_quantiles, rel=1e-9, abs=1e-12
            ), term
    # the fitted step overhead: Vidur's TP-1 per-step CPU time, ~1 ms + ~48 us per sequence
    step = fresh.term("step_overhead")
    assert step.heldout_mape <= 0.05
    assert 0.5e-3 < step.coef("const_s") < 2e-3 and 20e-6 < step.coef("s_per_seq") < 80e-6
    assert np.isfinite([fresh.term(t).heldout_mape for t in fresh.terms]).all()


def test_the_pointwise_term_is_charged_per_layer_and_optional(tmp_path):
    """An external profile's element-wise kernels cost pointwise(T) per layer; without the
    term (the analytic profile) they cost nothing, so analytic step times are unchanged."""
    path, _ = import_vidur(_tables(tmp_path), tmp_path / "out")
    profile = load_profile(path)
    model, gpu = get_model("opt-13b"), get_gpu("a100-80gb")
    with_pw = make_cost_model(HardwareSpec(gpu="a100-80gb", profile=str(path)), model, gpu)
    terms = {k: v for k, v in profile.terms.items() if k != "pointwise"}
    without_path = profile.with_terms(terms=terms).save(tmp_path / "other.yaml")
    no_pw = make_cost_model(HardwareSpec(gpu="a100-80gb", profile=str(without_path)), model, gpu)
    assert "'pointwise'" not in no_pw.description  # optional: not filled from the analytic profile
    elems = F.pointwise_elems_per_token("opt", 5120, 20480, 5120, 5120)
    per_layer = profile.term("pointwise").time_s(bytes_=8 * elems * 2, tokens=8)
    got = with_pw.layer_linear_time_s(8) - no_pw.layer_linear_time_s(8)
    assert got == pytest.approx(per_layer)
    assert per_layer > 0
