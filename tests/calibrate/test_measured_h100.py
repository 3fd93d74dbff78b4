"""The profiles measured on a real H100 and H200 (calibrate/profiles/h100-sxm-measured,
h200-measured): their provenance, their reports rebuilt from their own measurements, the
second run each is checked against, the H100 profile projected onto the H200's
measurements, and the longest-walk diagnostic on timings whose law is known."""

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
H200 = DEFAULT_PROFILES_DIR / "h200-measured"
#: each measured run: (folder, device name, GPU spec, date)
RUNS = [
    (RUN, "NVIDIA H100 80GB HBM3", "h100-sxm", "2026-11-27"),
    (H200, "NVIDIA H200", "h200", "2026-11-28"),
]


@pytest.mark.parametrize(("run", "name", "spec", "date"), RUNS, ids=lambda x: str(x)[-20:])
def test_the_measured_profile_says_where_it_comes_from(run, name, spec, date):
    profile = load_profile(run / "profile.yaml")
    assert profile.kind == "measured"
    assert profile.gpu_name == name and profile.gpu_spec == spec
    assert profile.date == date
    assert {"cupy", "cuda_runtime", "driver"} <= set(profile.software)
    for term_name, term in profile.terms.items():
        assert term.heldout_mape is not None and term.num_points > 0, term_name
    meta = json.loads((run / "calibration.json").read_text())
    assert meta["checked_on"] == "device" and all(c["passed"] for c in meta["checks"])
    assert meta["budget"]["num_timed"] == meta["budget"]["num_planned"]
    assert meta["device"]["name"] == name


@pytest.mark.parametrize("run", [r[0] for r in RUNS], ids=lambda p: p.name)
def test_the_committed_report_is_what_its_measurements_give(tmp_path, run):
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("replicate-*"))
    report, _ = rebuild_report(copy)
    assert report.read_text() == (run / "report.md").read_text(), (
        f"report.md is stale: pagesim calibrate report calibrate/profiles/{run.name}"
    )


@pytest.mark.parametrize(("run", "spec"), [(r[0], r[2]) for r in RUNS], ids=lambda x: str(x)[-12:])
def test_a_simulation_runs_on_the_measured_profile(run, spec):
    result = pagesim.simulate(
        {
            "workload": {"num_requests": 20},
            "arrivals": {"rate_req_s": 2.0},
            "hardware": {"gpu": spec, "profile": run.name},
        }
    )
    assert result.summary_frame["num_finished"].iloc[0] == 20


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


@pytest.mark.parametrize(
    "file",
    sorted(p for r in RUNS for p in r[0].rglob("*") if p.is_file() and p.suffix != ".png"),
    ids=lambda p: str(p.relative_to(DEFAULT_PROFILES_DIR)),
)
def test_no_machine_path_in_the_shipped_run(file):
    assert not re.search(r"/(root|tmp|work|opt|home)/", file.read_text()), file


@pytest.mark.parametrize(
    ("run", "other"),
    [(RUN, REPLICATE), (H200, H200 / "replicate-seed1"), (RUN, H200)],
    ids=["h100-seed1", "h200-seed1", "h100-on-h200"],
)
def test_the_committed_cross_run_table_is_up_to_date(run, other):
    text = "\n".join(cross_run_section(run, other)) + "\n"
    assert (run / f"against_{other.name}.md").read_text() == text, (
        f"pagesim calibrate report calibrate/profiles/{run.name} --against "
        f"{other.relative_to(DEFAULT_PROFILES_DIR.parents[1])}"
    )


def test_across_gpus_the_profile_is_also_priced_projected_onto_the_other_gpu():
    """The H100 profile on the H200's points: as measured, and projected by the rules of
    simulator/costmodel/projection.py (bytes by the HBM ratio 3.35 / 4.8)."""
    from pagesim.simulator.costmodel.projection import project_profile
    from pagesim.simulator.model_gpu_specs import GPUS

    lines = cross_run_section(RUN, H200)
    assert "(another GPU)" in lines[0] and "bytes x0.698" in lines[2]
    row = next(line for line in lines if line.startswith("| kv_write |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    df = load_measurements(H200 / "measurements.csv")
    rows = df[df["in_fit"] & (df["term"] == "kv_write")]
    mine = load_profile(RUN / "profile.yaml")
    moved = project_profile(mine, GPUS["h200"], GPUS["h100-sxm"]).terms["kv_write"]
    for term, col in ((mine.terms["kv_write"], 2), (moved, 4)):
        pred = np.array(
            [term.time_s(r.bytes, r.flops, r.blocks, r.seqs, r.tokens) for r in rows.itertuples()]
        )
        assert cells[col] == f"{np.mean(np.abs(pred / rows['median_s'].to_numpy() - 1)):.1%}"
    # a kernel that moves only bytes is priced 30% faster projected than as measured
    assert moved.coefficients["s_per_byte"] == pytest.approx(
        mine.terms["kv_write"].coefficients["s_per_byte"] * 3.35 / 4.8
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
