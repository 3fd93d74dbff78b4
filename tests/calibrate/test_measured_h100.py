"""The profile measured on a real H100 (calibrate/profiles/h100-sxm-measured): its
provenance, its report rebuilt from its own measurements, the second run it is checked
against, and the longest-walk diagnostic on timings whose law is known."""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

import pagesim
from pagesim.calibrate.compare import critical_path_section, cross_run_section, longest_walk
from pagesim.calibrate.fit import TermFit, fit_all
from pagesim.calibrate.measure import load_measurements
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR, rebuild_report
from pagesim.simulator.costmodel.profile import load_profile

RUN = DEFAULT_PROFILES_DIR / "h100-sxm-measured"
REPLICATE = RUN / "replicate-seed1"


def test_the_measured_profile_says_where_it_comes_from():
    profile = load_profile(RUN / "profile.yaml")
    assert profile.kind == "measured"
    assert profile.gpu_name == "NVIDIA H100 80GB HBM3" and profile.gpu_spec == "h100-sxm"
    assert profile.date == "2026-11-27"
    assert {"cupy", "cuda_runtime", "driver"} <= set(profile.software)
    for name, term in profile.terms.items():
        assert term.heldout_mape is not None and term.num_points > 0, name
    meta = json.loads((RUN / "calibration.json").read_text())
    assert meta["checked_on"] == "device" and all(c["passed"] for c in meta["checks"])
    assert meta["budget"]["num_timed"] == meta["budget"]["num_planned"]


def test_the_committed_report_is_what_its_measurements_give(tmp_path):
    copy = tmp_path / RUN.name
    shutil.copytree(RUN, copy, ignore=shutil.ignore_patterns("replicate-*"))
    report, _ = rebuild_report(copy)
    assert report.read_text() == (RUN / "report.md").read_text(), (
        "report.md is stale: pagesim calibrate report calibrate/profiles/h100-sxm-measured"
    )


def test_a_simulation_runs_on_the_measured_profile():
    run = pagesim.simulate(
        {
            "workload": {"num_requests": 20},
            "arrivals": {"rate_req_s": 2.0},
            "hardware": {"gpu": "h100-sxm", "profile": "h100-sxm-measured"},
        }
    )
    assert run.summary_frame["num_finished"].iloc[0] == 20


def test_the_cross_run_table_is_the_profile_on_every_point_of_the_other_run():
    lines = cross_run_section(RUN, REPLICATE)
    row = next(line for line in lines if line.startswith("| swap |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    df = load_measurements(REPLICATE / "measurements.csv")
    rows = df[df["in_fit"] & (df["term"] == "swap")]
    term = load_profile(RUN / "profile.yaml").terms["swap"]
    pred = np.array(
        [term.time_s(r.bytes, r.flops, r.blocks, r.seqs, r.tokens) for r in rows.itertuples()]
    )
    mape = np.mean(np.abs(pred / rows["median_s"].to_numpy() - 1))
    assert cells[1] == str(len(rows)) and cells[2] == f"{mape:.1%}"


def test_the_walk_diagnostic_recovers_a_walk_bound_law_the_fitted_form_misses():
    """Times made from the walk law (no noise) on the real grid's decode shapes: the
    diagnostic's held-out error is near zero while the bytes-and-FLOPs form's is not."""
    df = load_measurements(RUN / "measurements.csv")
    df = df[df["in_fit"] & df["term"].isin(["contiguous_decode_attention"])].copy()
    df["median_s"] = 5e-6 + np.maximum(df["bytes"] * 4e-13, longest_walk(df) * 2e-10)
    fits: dict[str, TermFit] = fit_all(df, np.random.default_rng(3))
    lines = critical_path_section(df, fits)
    row = next(line for line in lines if line.startswith("| contiguous_decode_attention"))
    cells = [float(c.strip().rstrip("%")) for c in row.strip("|").split("|")[2:5]]
    fitted_form, with_walk, worst = cells
    assert with_walk < 0.5 and worst < 1.0
    assert fitted_form > 5 * max(with_walk, 0.1)


def test_the_walk_is_one_partition_for_the_partitioned_kernel():
    rows = pd.DataFrame(
        {
            "max_context": [4096, 4096, 100],
            "kernel": ["paged_v1", "paged_v2", "paged_v2"],
            "head_dim": [128, 128, 64],
        }  # fmt: skip
    )
    assert list(longest_walk(rows)) == [4096 * 128, 512 * 128, 100 * 64]


@pytest.mark.parametrize("path", sorted(p.name for p in RUN.rglob("*") if p.is_file()))
def test_no_machine_path_in_the_shipped_run(path):
    for file in RUN.rglob(path):
        if file.suffix in {".png"}:
            continue
        assert not re.search(r"/(root|tmp|work|opt|home)/", file.read_text()), file


def test_the_committed_cross_run_table_is_up_to_date():
    text = "\n".join(cross_run_section(RUN, REPLICATE)) + "\n"
    assert (RUN / "against_replicate-seed1.md").read_text() == text, (
        "pagesim calibrate report calibrate/profiles/h100-sxm-measured "
        "--against calibrate/profiles/h100-sxm-measured/replicate-seed1"
    )


def test_the_reference_table_sets_each_shape_beside_the_same_shape_measured():
    report = (RUN / "report.md").read_text()
    row = next(r for r in report.splitlines() if r.startswith("| decode | batch 64 context 1024 |"))
    ref_us, ours_us, ratio = (float(c) for c in row.strip("|").split("|")[3:6])
    ref = pd.read_csv(RUN / "reference.csv")
    assert ref_us == pytest.approx(
        ref[ref["shape"] == "batch 64 context 1024"]["us"].iloc[0], abs=0.05
    )
    df = load_measurements(RUN / "measurements.csv")
    mine = df[
        (df["term"] == "paged_decode_attention") & (df["num_heads"] == 40) & (df["num_kv_heads"] == 40)
        & (df["block_size"] == 16) & (df["batch"] == 64) & (df["mean_context"] == 1024)
        & (df["context_mix"] == "uniform")
    ]  # fmt: skip
    assert ours_us == pytest.approx(mine["median_s"].median() * 1e6, abs=0.05)
    assert ratio == pytest.approx(ours_us / ref_us, abs=0.005)
