"""`pagesim run --intervals`: replicates per point, lo / hi columns, bands, one summary line."""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.cli import main

EXPERIMENT = """
name: tiny_intervals
base:
  workload: {num_requests: 40}
  arrivals: {rate_req_s: 2.0}
  hardware: {gpu: a100-80gb, profile: %s}
sweep:
  grid:
    arrivals.rate_req_s: [1.0, 4.0]
charts:
  - {kind: latency_vs_rate}
"""


def _run(tmp_path, profile, *extra):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT % profile)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--jobs", "1", *extra]) == 0
    return out


def test_intervals_add_lo_hi_columns_from_the_replicates(tmp_path):
    out = _run(tmp_path, "a100-80gb-vidur", "--intervals", "90", "--replicates", "6")
    results = pd.read_csv(out / "results.csv")
    assert results["num_seeds"].tolist() == [6, 6]
    for metric in ("normalized_latency_s_per_tok", "ttft_s_p50", "throughput_req_s"):
        lo, hi = results[f"{metric}_lo"], results[f"{metric}_hi"]
        assert (lo <= hi).all() and (hi > lo).any()
    # no conformal factor in this profile: the raw range, said in the summary
    assert results["interval_source"].str.startswith("raw").all()
    summary = (out / "summary.md").read_text()
    assert "2 point(s) × 6 replicates. Intervals: 90%" in summary
    assert "sources seeds, cost, serving" in summary
    # every replicate is its own run; the first keeps its per-request and per-step tables
    assert (
        len(list((out / "requests").glob("p000_*_r*.csv.gz"))) == 1
    )  # replicate 0 keeps its tables
    first = (out / "results.csv").read_bytes()
    _run(tmp_path, "a100-80gb-vidur", "--intervals", "90", "--replicates", "6")
    assert (out / "results.csv").read_bytes() == first  # deterministic (and from the cache)


def test_a_profiles_conformal_factor_widens_its_intervals(tmp_path):
    out = _run(
        tmp_path,
        "a100-80gb-vidur-vllm023-serving",
        "--intervals",
        "90",
        "--replicates",
        "4",
        "--spread",
        "cost,serving",
    )
    results = pd.read_csv(out / "results.csv")
    assert results["interval_source"].str.startswith("conformal factor 0.775").all()


def test_bad_interval_flags_name_the_flag(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT % "a100-80gb-vidur")
    code = main(["run", str(path), "--out", str(tmp_path / "o"), "--intervals", "150"])
    assert code == 2
    assert "--intervals/--replicates/--spread" in capsys.readouterr().err
    code = main(
        ["run", str(path), "--out", str(tmp_path / "o"), "--intervals", "90", "--spread", "moon"]
    )
    assert code == 2
    assert "sources" in capsys.readouterr().err


def test_each_run_can_be_written_as_a_vllm_bench_serve_result(tmp_path):
    import json

    out = _run(tmp_path, "a100-80gb-vidur", "--vllm-json")
    results = pd.read_csv(out / "results.csv").set_index("point")
    for point in ("p000", "p001"):
        doc = json.loads((out / "vllm_bench" / f"{point}_seed0.json").read_text())
        assert doc["completed"] == 40 and isinstance(doc["completed"], int)
        assert len(doc["input_lens"]) == len(doc["ttfts"]) == len(doc["start_times"]) == 40
        assert doc["median_ttft_ms"] == pytest.approx(results.loc[point, "median_ttft_ms"])
        assert doc["request_throughput"] == pytest.approx(results.loc[point, "request_throughput"])
