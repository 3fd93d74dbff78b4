"""`pagesim validate-vllm`: DistServe's real vLLM runs replayed and compared.

Small runs the test writes itself in DistServe's format (made-up requests) check the
loading, the replay and the report; the real runs (shared data, skipped where absent)
check that docs/validation.md is what the command writes today.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.experiments import vllm_validation as V

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _write_run(folder: Path, num: int, rate: float, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    issue = 1000.0 + np.cumsum(rng.exponential(1 / rate, num))
    prompt = rng.integers(20, 400, num)
    output = rng.integers(2, 60, num)
    ttft = rng.uniform(0.05, 0.2, num)
    tpot = rng.uniform(0.02, 0.05, num)
    first = issue + ttft
    done = first + tpot * (output - 1)
    df = pd.DataFrame(
        {
            "issue_time": issue,
            "first_token_time": first,
            "complete_time": done,
            "prompt_len": prompt,
            "output_len": output,
            "ttft_ms": ttft * 1e3,
            "tpot_ms": tpot * 1e3,
            "latency_ms": (done - issue) * 1e3,
        }
    )
    path = folder / f"vllm-{num}-{rate:g}.csv"
    df.to_csv(path, index=False)
    return path


def test_runs_are_loaded_by_rate_and_replayed_with_their_own_arrivals(tmp_path):
    _write_run(tmp_path, 12, 2)
    _write_run(tmp_path, 8, 1, seed=1)
    (tmp_path / "notes.txt").write_text("ignored")
    runs = V.load_runs(tmp_path)
    assert [(r.name, r.rate_req_s) for r in runs] == [("vllm-8-1", 1.0), ("vllm-12-2", 2.0)]
    trace = V.run_trace(runs[1])
    issue = runs[1].table["issue_time"].to_numpy()
    assert trace.table["arrival_s"].to_numpy() == pytest.approx(issue - issue[0])
    assert trace.table["prompt_len"].tolist() == runs[1].table["prompt_len"].tolist()
    assert trace.table["output_len"].tolist() == runs[1].table["output_len"].tolist()


def test_bad_folders_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="not a folder"):
        V.load_runs(tmp_path / "missing")
    with pytest.raises(DataError, match="no file named like vllm-N-RATE.csv"):
        V.load_runs(tmp_path)
    path = _write_run(tmp_path, 5, 1)
    path.rename(tmp_path / "vllm-6-1.csv")
    with pytest.raises(DataError, match="the name says 6 requests, the file has 5"):
        V.load_runs(tmp_path)


def test_saturation_rate_interpolates_where_ttft_crosses_one_second():
    rates = np.array([1.0, 2.0, 3.0, 4.0])
    assert V.saturation_rate(rates, np.array([0.1, 0.2, 0.4, 4.0])) == pytest.approx(3 + 0.6 / 3.6)
    assert V.saturation_rate(rates, np.array([0.1, 0.2, 0.3, 0.4])) == float("inf")
    assert V.saturation_rate(rates, np.array([2.0, 3.0, 4.0, 5.0])) == 1.0


def test_compare_and_the_page_on_small_runs(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _write_run(data, 10, 1)
    _write_run(data, 10, 2, seed=3)
    code = main(["validate-vllm", "--data", str(data), "--out", str(tmp_path / "out")])
    assert code == 0
    table = pd.read_csv(tmp_path / "out" / V.CSV_NAME)
    assert table["source"].tolist() == ["measured", "analytic", "fitted"] * 2
    measured = table[table["source"] == "measured"].iloc[0]
    run = V.load_runs(data)[0].table
    assert measured["ttft_s_p50"] == pytest.approx(np.median(run["ttft_ms"]) / 1e3, rel=1e-5)
    predicted = table[table["source"] != "measured"]
    assert (predicted[[f"{m}_s_p50" for m in V.METRICS]] > 0).all().all()
    page = (tmp_path / "out" / V.PAGE_NAME).read_text()
    assert "Nothing is fitted on these runs" in page
    assert "a100-80gb-vidur" in page and "| fitted: saturation within 0.5 req/s |" in page
    assert (tmp_path / "out" / V.CHART_NAME).stat().st_size > 0
    assert str(tmp_path) not in page  # no machine paths in what may be committed


def test_docs_validation_page_is_up_to_date(shared_data):
    data = shared_data("distserve_vllm_opt13b")
    table = V.compare(data)
    assert (DOCS / V.PAGE_NAME).read_text() == V.render_page(table, data), (
        "docs/validation.md is stale: run `pagesim validate-vllm --data "
        "../shared/data/distserve_vllm_opt13b --out OUT --docs docs/validation.md`"
    )
    assert (DOCS / V.CHART_NAME).is_file()
