"""`pagesim calibrate import --splitwise`: whole-iteration times -> an iteration-level profile.

Small tables the test writes in Splitwise's format (made-up times from a known formula of the
step's features, so the fit must recover them), and the real table from the shared data
(skipped where absent), which must reproduce the shipped profiles exactly.
"""

import hashlib

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate import splitwise
from pagesim.calibrate.external import Source, VidurTables, import_splitwise, measurement_rows
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR
from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.simulator.costmodel.iteration import step_features
from pagesim.simulator.costmodel.profile import load_profile
from pagesim.simulator.model_gpu_specs import get_model
from pagesim.simulator.plan import BatchPlan

MODEL = get_model("llama-2-70b")
#: the made-up law: const + bytes at 1.5 TB/s or flops at 200 TFLOP/s, + 20 us per token
CONST_S, S_PER_BYTE, S_PER_FLOP, S_PER_TOKEN = 0.02, 1 / 1.5e12, 1 / 200e12, 20e-6


def _law(feats):
    return (
        CONST_S
        + max(S_PER_BYTE * feats.bytes_, S_PER_FLOP * feats.flops)
        + S_PER_TOKEN * feats.tokens
    )


def _write_table(path, *, extra_model=True, repeats=3):
    rows = []
    for tp in (2, 4, 8):
        for p, b in [(128, 1), (512, 1), (512, 4), (1024, 2), (2048, 1), (512, 16), (256, 8)]:
            prefill = _law(step_features(MODEL, tp, BatchPlan.from_lens(prefill_new_lens=(p,) * b)))
            for t in (128, 512):
                plan = BatchPlan.from_lens(decode_context_lens=(p + t // 2,) * b)
                decode = _law(step_features(MODEL, tp, plan))
                for i in range(repeats):
                    jitter = 1 + 0.01 * (i - 1)  # repeats around the law; the median is the law
                    rows.append(
                        {
                            "model": "llama2-70b",
                            "hardware": "a100-80gb",
                            "prompt_size": p,
                            "batch_size": b,
                            "token_size": t,
                            "prompt_time": prefill * 1e3 * jitter,
                            "token_time": decode * 1e3 * jitter,
                            "e2e_time": 0.0,
                            "tensor_parallel": tp,
                        }
                    )
    if extra_model:
        rows.append(rows[0] | {"model": "bloom-176b", "tensor_parallel": 8})
        rows.append(rows[0] | {"hardware": "h100-80gb"})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_rows_one_prefill_per_shape_and_decode_at_the_mean_context(tmp_path):
    got = splitwise.iteration_rows(_write_table(tmp_path / "perf_model.csv"), "a100-80gb")
    df = got.rows
    pre, dec = df[df["term"] == "prefill_iteration"], df[df["term"] == "decode_iteration"]
    assert len(pre) == 3 * 7  # one per (TP, prompt, batch): the token sizes are one prefill
    assert len(dec) == 3 * 7 * 2
    assert pre["shape_id"].is_unique and dec["shape_id"].is_unique
    row = dec[dec["shape_id"] == "decode-llama-2-70b-tp4-b4-p512-t512"].iloc[0]
    want = step_features(MODEL, 4, BatchPlan.from_lens(decode_context_lens=(768,) * 4))
    assert (row["bytes"], row["flops"], row["seqs"], row["tokens"]) == tuple(
        want[i] for i in (0, 1, 3, 4)
    )
    assert row["median_s"] == pytest.approx(_law(want))
    assert got.skipped == ("bloom-176b: 1 rows (no pagesim model spec)",)
    assert got.other_hardware == ("h100-80gb: 1 rows",)
    assert got.below_peak.empty


def test_a_prefill_faster_than_the_fp16_peak_is_listed_not_fitted(tmp_path):
    path = _write_table(tmp_path / "perf_model.csv", extra_model=False)
    df = pd.read_csv(path)
    df.loc[(df["prompt_size"] == 2048) & (df["tensor_parallel"] == 2), "prompt_time"] = 1.0
    df.to_csv(path, index=False)
    got = splitwise.iteration_rows(path, "a100-80gb")
    assert list(got.below_peak["shape_id"]) == ["prefill-llama-2-70b-tp2-b1-p2048"]
    assert "prefill-llama-2-70b-tp2-b1-p2048" not in set(got.rows["shape_id"])


def test_the_fit_recovers_the_law_and_the_profile_is_labelled(tmp_path):
    path = _write_table(tmp_path / "perf_model.csv")
    src = Source(path, "made/up", "abc1234")
    profile_path, report = import_splitwise(src, "a100-80gb", tmp_path / "out", command="cmd")
    profile = load_profile(profile_path)
    assert profile.kind == "external"
    assert set(profile.terms) == {"prefill_iteration", "decode_iteration"}
    assert profile.sources[0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "NOT measured by pagesim" in profile.notes and "bloom-176b" in profile.notes
    for name in profile.terms:
        term = profile.term(name)
        assert term.heldout_mape < 0.01, name  # exact law up to the median of the repeats
        assert "whole engine iterations" in term.origin
    text = report.read_text()
    assert "| prefill_iteration |" in text and "made/up" in text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "token_time"}, "missing column 'token_time'"),
        ({"set": ("prompt_time", -1.0)}, "prompt_time must be a positive time"),
    ],
)
def test_bad_tables_fail_with_one_line_naming_the_file(tmp_path, change, message):
    path = _write_table(tmp_path / "perf_model.csv")
    df = pd.read_csv(path)
    if "drop" in change:
        df = df.drop(columns=change["drop"])
    else:
        col, value = change["set"]
        df.loc[3, col] = value
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=message) as info:
        splitwise.iteration_rows(path, "a100-80gb")
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_gpu_splitwise_did_not_measure_is_refused(tmp_path):
    path = _write_table(tmp_path / "perf_model.csv")
    with pytest.raises(DataError, match=r"--gpu 'h200' has no Splitwise hardware; allowed"):
        splitwise.iteration_rows(path, "h200")


def test_cli_refuses_operator_tables_beside_splitwise(tmp_path, capsys):
    path = _write_table(tmp_path / "perf_model.csv")
    argv = ["calibrate", "import", "--gpu", "a100-80gb", "--splitwise", str(path)]
    argv += ["--mlp", str(path), "--origin", "perf_model.csv=made/up@abc", "--out", "o"]
    assert main(argv) == 2
    assert "--splitwise fits whole iterations and takes no operator tables" in (
        capsys.readouterr().err
    )


def test_cli_writes_the_profile(tmp_path, capsys):
    path = _write_table(tmp_path / "perf_model.csv")
    out = tmp_path / "out"
    argv = ["calibrate", "import", "--gpu", "a100-80gb", "--splitwise", str(path)]
    assert main([*argv, "--origin", "perf_model.csv=made/up@abc", "--out", str(out)]) == 0
    profile = load_profile(out / "profile.yaml")
    assert profile.command.startswith("pagesim calibrate import --gpu a100-80gb --splitwise")
    assert str(tmp_path) not in profile.command  # no machine paths in the profile


# ---- the real table (shared data) -----------------------------------------------------------


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
def test_shipped_splitwise_profiles_are_reproduced_from_the_real_table(gpu, shared_data, tmp_path):
    path = shared_data("splitwise") / "perf_model.csv"
    shipped = load_profile(DEFAULT_PROFILES_DIR / f"{gpu}-splitwise" / "profile.yaml")
    (src,) = shipped.sources
    assert hashlib.sha256(path.read_bytes()).hexdigest() == src["sha256"]
    fresh = load_profile(
        import_splitwise(Source(path, src["repository"], src["commit"]), gpu, tmp_path)[0]
    )
    for name in ("prefill_iteration", "decode_iteration"):
        got, want = fresh.term(name), shipped.term(name)
        assert got.coefficients == pytest.approx(want.coefficients, rel=1e-9), name
        assert got.heldout_mape == pytest.approx(want.heldout_mape, rel=1e-9), name
        # 19 (prefill, one below-peak point left out on the A100) + 38 decode points a TP
        assert got.num_points in (38, 57)
        assert np.isfinite(got.heldout_mape) and got.heldout_mape < 0.10


def test_floors_use_the_import_split_and_bound_the_shipped_errors(shared_data):
    """calibrate/floors.py: its 'shipped form' column is the shipped profile's held-out MAPE
    (same split), and a per-shape model is never worse than the one-form fit it bounds."""
    from pagesim.calibrate import floors

    folder = shared_data("vidur_profiling")
    tables = VidurTables(
        gpu="a100-80gb",
        attention=(Source(folder / "a100_llama2_70b_tp2_attention.csv", "", ""),),
        mlp=(
            Source(folder / "a100_llama2_7b_mlp.csv", "", ""),
            Source(folder / "a100_llama2_70b_mlp.csv", "", ""),
        ),
        cpu_overheads=(Source(folder / "a100_cpu_overheads.csv", "", ""),),
    )
    table = floors.floors(measurement_rows(tables), seed=0).set_index("term")
    shipped = load_profile(DEFAULT_PROFILES_DIR / "a100-80gb-vidur" / "profile.yaml")
    for term, row in table.iterrows():
        assert row["shipped_form"] == pytest.approx(shipped.term(term).heldout_mape, rel=1e-9)
        assert row["interpolation_per_shape"] < row["shipped_form"], term
    assert "| gemm | 8,352 | 32 |" in floors.render(table.reset_index())
