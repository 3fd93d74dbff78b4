"""End to end without a GPU: plan -> measure (synthetic) -> fit -> profile -> report, and the CLI."""

import json

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate.models import model_dims
from pagesim.calibrate.pipeline import calibrate, gpu_dir_name
from pagesim.calibrate.synthetic import SyntheticBackend, reference_profile
from pagesim.cli import main
from pagesim.simulator.costmodel.profile import load_profile

#: coefficients the grid identifies (decode attention is never compute-bound: no s_per_flop)
IDENTIFIED = {
    "gemm": ("const_s", "s_per_byte", "s_per_flop"),
    "prefill_attention": ("const_s", "s_per_flop", "s_per_seq"),
    "paged_decode_attention": ("const_s", "s_per_byte", "s_per_block", "s_per_seq"),
    "contiguous_decode_attention": ("const_s", "s_per_byte", "s_per_seq"),
    "kv_write": ("const_s", "s_per_byte"),
    "block_copy": ("const_s", "s_per_byte", "s_per_block"),
    "swap": ("const_s", "s_per_byte", "s_per_block"),
}


def _run(tmp_path, seed=0, noise=0.01):
    truth = reference_profile()
    backend = SyntheticBackend(truth, np.random.default_rng(seed + 100), noise_rel=noise)
    out = calibrate(
        model_dims("opt-13b"),
        backend,
        tmp_path,
        np.random.default_rng(seed),
        quick=True,
        command="test",
    )
    return truth, out


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("cal"))


def test_fit_recovers_the_ground_truth_profile(calibrated):
    truth, out = calibrated
    profile = load_profile(out.profile)
    assert set(profile.terms) == set(IDENTIFIED)
    for term, names in IDENTIFIED.items():
        got = profile.term(term)
        for name in names:
            assert got.coef(name) == pytest.approx(truth.term(term).coef(name), rel=0.10), (
                term,
                name,
            )
        assert got.heldout_mape < 0.02  # noise is 1%: the model fits to the noise level
        assert got.num_points > 0
        assert all(v >= 0 for v in got.coefficients.values())
    assert "SYNTHETIC" in profile.notes and profile.kind == "synthetic"
    assert profile.gpu_spec == "h100-sxm"  # the synthetic truth's GPU, not a guess
    assert profile.gpu_spec in {"a100-40gb", "a100-80gb", "h100-sxm", "h200"}


def test_measurements_csv_has_a_row_per_shape_with_features_and_stats(calibrated):
    _, out = calibrated
    df = pd.read_csv(out.measurements)
    for col in (
        "term",
        "shape_id",
        "bytes",
        "flops",
        "blocks",
        "seqs",
        "tokens",
        "median_s",
        "iqr_s",
        "num_repeats",
    ):
        assert col in df.columns
    assert (df["median_s"] > 0).all()
    assert len(df) == len(df.drop_duplicates(["term", "shape_id"]))


def test_report_lists_targets_fits_and_plot(calibrated):
    _, out = calibrated
    text = out.report.read_text()
    for needle in (
        "## Targets",
        "paged decode K/V bandwidth",
        "paged vs contiguous overhead",
        "held-out MAPE, gemm",
        "paged_decode_attention",
        "fit_predicted_vs_measured.png",
    ):
        assert needle in text
    assert out.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_profile_and_measurements(tmp_path):
    _, a = _run(tmp_path / "a", seed=3)
    _, b = _run(tmp_path / "b", seed=3)
    assert a.profile.read_text() == b.profile.read_text()
    assert a.measurements.read_text() == b.measurements.read_text()


def test_report_command_rebuilds_from_the_csv(calibrated, tmp_path, capsys):
    _, out = calibrated
    folder = tmp_path / "copy"
    folder.mkdir()
    for path in (out.measurements, out.meta):
        (folder / path.name).write_text(path.read_text())
    assert main(["calibrate", "report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == out.report.read_text()
    assert "report.md" in capsys.readouterr().out


def test_report_command_on_a_broken_folder_is_one_line_error(tmp_path, capsys):
    assert main(["calibrate", "report", str(tmp_path)]) == 2
    assert "calibration.json not found" in capsys.readouterr().err
    (tmp_path / "calibration.json").write_text(json.dumps({"device": {}}))
    assert main(["calibrate", "report", str(tmp_path)]) == 2
    assert "missing key" in capsys.readouterr().err


def test_calibrate_without_cupy_says_what_is_missing(tmp_path, capsys):
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed: the no-GPU message is not reachable")
    except ImportError:
        pass
    assert main(["calibrate", "--model", "opt-13b", "--out", str(tmp_path), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "pagesim[gpu]" in err and "CuPy" in err and err.count("\n") == 1


def test_unknown_model_is_rejected_before_touching_the_gpu(capsys):
    assert main(["calibrate", "--model", "gpt-9"]) == 2
    assert "gpt-9" in capsys.readouterr().err


def test_gpu_dir_name():
    assert gpu_dir_name("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
