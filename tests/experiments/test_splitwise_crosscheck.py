"""`pagesim crosscheck-splitwise`: Splitwise's iteration times predicted, nothing fitted."""

from pathlib import Path

import pandas as pd
import pytest

from pagesim.cli import main
from pagesim.errors import DataError
from pagesim.experiments import splitwise_crosscheck as S
from pagesim.simulator.costmodel.factory import make_cost_model
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan
from pagesim.simulator.spec import HardwareSpec

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _write(path: Path) -> Path:
    rows = []
    for hw in ("a100-80gb", "h100-80gb"):
        for batch in (1, 4):
            for repeat in range(3):
                rows.append(
                    {
                        "model": "llama2-70b",
                        "hardware": hw,
                        "prompt_size": 512,
                        "batch_size": batch,
                        "token_size": 128,
                        "prompt_time": 200.0 * batch + repeat,
                        "token_time": 50.0 + repeat,
                        "e2e_time": 0.0,
                        "tensor_parallel": 4,
                    }
                )
    rows.append({**rows[0], "model": "bloom-176b"})
    rows.append({**rows[0], "batch_size": 64, "prompt_time": 10.0})  # faster than the peak
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_points_are_medians_and_predictions_use_the_cost_model(tmp_path):
    points = S.load_points(_write(tmp_path / "perf.csv"))
    one = points[
        (points["hardware"] == "a100-80gb")
        & (points["batch_size"] == 1)
        & (points["model"] == "llama2-70b")
    ]
    assert one["prompt_time"].item() == 201.0 and one["token_time"].item() == 51.0
    pred = S.predict(points)
    assert set(pred["model"]) == {"llama2-70b"}  # no spec for BLOOM: skipped
    row = pred[(pred["hardware"] == "a100-80gb") & (pred["batch_size"] == 4)].iloc[0]
    hw = HardwareSpec(
        model="llama-2-70b", gpu="a100-80gb", tensor_parallel=4, profile="a100-80gb-vidur"
    )
    cost = make_cost_model(hw, get_model("llama-2-70b"), get_gpu("a100-80gb"))
    want = cost.step_time_s(BatchPlan.from_lens(decode_context_lens=(512 + 64,) * 4)) * 1e3
    assert row["token_ms_fitted"] == pytest.approx(want)
    assert pred["is_below_peak"].sum() == 1


def test_summary_leaves_impossible_prefill_points_out(tmp_path):
    pred = S.predict(S.load_points(_write(tmp_path / "perf.csv")))
    summary = S.summarize(pred)
    a100 = summary[summary["hardware"] == "a100-80gb"].iloc[0]
    use = pred[(pred["hardware"] == "a100-80gb") & ~pred["is_below_peak"]]
    rel = (use["prompt_ms_fitted"] / use["prompt_time"] - 1).abs().mean()
    assert a100["prompt_mape_fitted"] == pytest.approx(rel)


def test_cli_and_errors(tmp_path):
    assert (
        main(
            [
                "crosscheck-splitwise",
                "--data",
                str(_write(tmp_path / "p.csv")),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    page = (tmp_path / "out" / S.PAGE_NAME).read_text()
    assert "Skipped (no pagesim model spec): bloom-176b" in page and "64 x 512" in page
    with pytest.raises(DataError, match="file not found"):
        S.load_points(tmp_path / "none.csv")
    pd.DataFrame({"model": ["x"]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="missing column 'hardware'"):
        S.load_points(tmp_path / "bad.csv")


def test_docs_crosscheck_page_is_up_to_date(shared_data):
    data = shared_data("splitwise") / "perf_model.csv"
    points = S.load_points(data)
    pred = S.predict(points)
    assert (DOCS / S.PAGE_NAME).read_text() == S.render_page(points, pred, S.summarize(pred)), (
        "docs/crosscheck_splitwise.md is stale: run `pagesim crosscheck-splitwise --data "
        "../shared/data/splitwise/perf_model.csv --out OUT --docs docs/crosscheck_splitwise.md`"
    )
