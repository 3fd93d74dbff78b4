"""What the timings answer, written from a dry run's measurements (the synthetic device).

The numbers are the synthetic truth's, not a GPU's: these tests check that every
comparison the GPU run is to answer is computed from the measurements as documented.
"""

import json
import re

import numpy as np
import pandas as pd
import pytest

from pagesim.calibrate import compare
from pagesim.calibrate.budget import SimulatedClock
from pagesim.calibrate.grid import BLOCK_SIZES, FULL_GRID
from pagesim.calibrate.measure import load_measurements
from pagesim.calibrate.models import model_dims
from pagesim.calibrate.pipeline import calibrate
from pagesim.calibrate.synthetic import SyntheticBackend, reference_profile
from pagesim.simulator.costmodel.profile import load_profile


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    clock = SimulatedClock()
    out = calibrate(
        model_dims("opt-13b"),
        SyntheticBackend(reference_profile(), np.random.default_rng(1), clock=clock),
        tmp_path_factory.mktemp("dry"),
        np.random.default_rng(0),
        command="test",
        budget_s=240.0,
        clock=clock,
    )
    df = load_measurements(out.measurements)
    return out, df, json.loads(out.meta.read_text()), out.report.read_text()


def _table_row(report: str, first_cells: str) -> list[str]:
    line = next(ln for ln in report.splitlines() if ln.startswith(f"| {first_cells} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_report_answers_every_question(run):
    out, _, _, report = run
    for heading in (
        "## What the timings answer (synthetic)",
        "### Held-out error by term (goal <= 5%)",
        "### Paged decode attention: achieved K/V bandwidth",
        "By block size",
        "By context mix",
        "By kernel variant",
        "### opt-13b's shapes: 40 heads, 40 KV heads (no grouping), head dim 128, block 16",
        "### Single pass (v1) vs partitioned (v2)",
        "### GEMMs by model",
        "### Measured vs shipped vs analytic, term by term",
    ):
        assert heading in report, heading
    assert (out.report.parent / compare.BANDWIDTH_PNG).read_bytes()[:4] == b"\x89PNG"


def test_bandwidth_by_block_size_is_the_median_kv_rate_of_the_sweep(run):
    _, df, meta, report = run
    sweep = df[df["shape_id"].str.startswith("bsweep-") & df["in_fit"]]
    for bs in BLOCK_SIZES:
        rows = sweep[sweep["block_size"] == bs]
        kv = 2.0 * rows["tokens"] * rows["num_kv_heads"] * rows["head_dim"] * 2
        gbs = float(np.median(kv / rows["median_s"])) / 1e9
        cells = _table_row(report, str(bs))
        assert cells[1] == str(len(rows)) == str(len(FULL_GRID.block_sweep) * 2)
        assert float(cells[2]) == pytest.approx(gbs, abs=0.5)
        assert cells[3] == f"{gbs * 1e9 / 3.35e12:.1%}"  # h100-sxm's 3.35 TB/s
        assert cells[4] == f"{gbs * 1e9 / meta['copy_bandwidth_bytes_per_s']:.1%}"


def test_peaks_include_the_one_the_device_clock_and_bus_imply():
    meta = {
        "gpu_spec": "h200",
        "device": {"memory_clock_mhz": 2619.0, "memory_bus_width_bits": 5120},
        "copy_bandwidth_bytes_per_s": 5e12,
    }
    assert compare.peaks(meta) == {
        "HBM peak (h200 spec)": 4.8e12,
        "HBM peak (device clock x bus)": pytest.approx(3.352e12, rel=1e-3),
        "copy, read + write (measured)": 5e12,
    }


def test_the_model_shapes_table_has_every_core_shape_with_each_profiles_prediction(run):
    _, df, meta, report = run
    core = df[df["shape_id"].str.startswith("core-") & (df["term"] == "paged_decode_attention")]
    section = report.split("### opt-13b's shapes")[1].split("###")[0]
    rows = [ln for ln in section.splitlines() if re.match(r"\| \d", ln)]
    assert len(rows) == len(core) > 40
    header = next(ln for ln in section.splitlines() if ln.startswith("| batch"))
    for label in ("measured (this run)", "shipped h100-sxm-vidur", "analytic h100-sxm"):
        assert f"{label} µs" in header
    shipped = load_profile(compare.SHIPPED_PROFILE).term("paged_decode_attention")
    first = core.sort_values(["batch", "mean_context", "context_mix"]).iloc[[0]]
    want = shipped.time_s(*(first[f].iloc[0] for f in compare.FEATURES))
    assert compare.predict_s(shipped, first)[0] == pytest.approx(want)
    assert rows[0].split("|")[-3].strip() == f"{want * 1e6:.1f}"


def test_variant_pairs_compare_v1_and_v2_and_name_the_rules_choice(run):
    _, df, _, report = run
    rows = df[df["shape_id"].str.startswith("variant-b1-c4096-")].set_index("kernel")
    assert set(rows.index) == {"paged_v1", "paged_v2"}
    assert rows.loc["paged_v2", "in_fit"] and not rows.loc["paged_v1", "in_fit"]
    section = report.split("### Single pass (v1) vs partitioned (v2)")[1].split("###")[0]
    cells = _table_row(section, "1 | 4096")
    ratio = rows.loc["paged_v2", "median_s"] / rows.loc["paged_v1", "median_s"]
    assert cells[4] == f"{ratio:.2f}" and cells[5] == "paged_v2"


def test_report_only_rows_are_measured_but_never_fitted(run):
    out, df, _, _ = run
    assert (~df["in_fit"]).sum() == len(FULL_GRID.variant_pairs)
    paged = df[df["term"] == "paged_decode_attention"]
    assert (
        load_profile(out.profile).term("paged_decode_attention").num_points == paged["in_fit"].sum()
    )


def test_gemms_are_reported_per_model_of_the_shipped_experiments(run):
    _, df, _, report = run
    for model in FULL_GRID.gemm_models:
        cells = _table_row(report, model)
        assert int(cells[1]) == ((df["term"] == "gemm") & (df["model"] == model)).sum() > 0


def test_profiles_are_compared_term_by_term(run):
    out, df, _, report = run
    fitted = load_profile(out.profile)
    for term in fitted.terms:
        mine = _table_row(report, f"{term} | measured (this run)")
        assert mine[-2] == f"{fitted.term(term).heldout_mape:.1%}"
        analytic = _table_row(report, f"{term} | analytic h100-sxm")
        assert analytic[-1] != "—"
    # terms the shipped profile lacks are marked, the others get its error on these rows
    assert _table_row(report, "kv_write | shipped h100-sxm-vidur")[-1] == "—"
    gemm = df[(df["term"] == "gemm") & df["in_fit"]]
    shipped = load_profile(compare.SHIPPED_PROFILE).term("gemm")
    ratio = compare.predict_s(shipped, gemm) / gemm["median_s"].to_numpy()
    cells = _table_row(report, "gemm | shipped h100-sxm-vidur")
    assert (
        cells[-2] == f"{np.mean(np.abs(ratio - 1)):.1%}" and cells[-1] == f"{np.median(ratio):.2f}"
    )


def test_a_folder_without_the_new_columns_still_reports(run, tmp_path):
    out, df, meta, _ = run
    old = df.drop(columns=["in_fit", "model", "layer"])
    old.to_csv(tmp_path / "measurements.csv", index=False)
    (tmp_path / "calibration.json").write_text(json.dumps(meta))
    from pagesim.calibrate.pipeline import rebuild_report

    report, _ = rebuild_report(tmp_path)
    text = report.read_text()
    assert "### Measured vs shipped vs analytic" in text and "### GEMMs by model" not in text
    assert len(pd.read_csv(tmp_path / "measurements.csv")) == len(df)
