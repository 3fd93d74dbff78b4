"""Datasets validated from a manifest alone (experiments/validation/schema.py, generic.py):
a new dataset of a known format is one manifest file; the schema's refusals; saturation as
the bracket the runs show; and the vLLM 0.23 H100 page, regenerated from the real runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from numtext import page_diff

from pagesim.errors import ConfigError
from pagesim.experiments.validation import generic, schema
from pagesim.experiments.validation.generic_page import bracket_text, saturation_bracket
from pagesim.experiments.validation.pipeline import page_text, run_validation

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "records"))
from record_writers import T0_US, blis_row, write_blis  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"

MANIFEST = {
    "dataset": "toy_server",
    "title": "A made-up server",
    "origin": "made up for a test",
    "repository": "nobody/nothing",
    "commit": "0000000",
    "match": {"file": "server_config.json", "keys": {"model": "Org/Toy", "vllm_version": "0.23.0"}},
    "reader": "blis-trace-v3",
    "runs": "**/trace.yaml",
    "server": {
        "description": "vLLM 0.23 on an H100, made up",
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "vllm_version": "0.23.0",
        "args": "--max-num-seqs 64 --max-num-batched-tokens 2048 --max-model-len 8192",
        "logged_pool_blocks": 20000,
    },
    "variants": [
        {"name": "headline", "headline": True, "rule": "unseen", "decided_at": "abc1234"},
        {"name": "kernels", "profile": "h100-sxm-vidur", "decided_at": "abc1234", "post_hoc": True},
    ],
    "goals": [
        {"metric": "ttft", "bound": 10.0},
        {"metric": "e2e", "bound": 0.01, "regime": "saturated"},
    ],
    "pool_goal": 0.03,
}


def _rows(rate: float, n: int = 12) -> list[str]:
    gap = int(1e6 / rate)
    return [
        blis_row(i, T0_US + i * gap, T0_US + i * gap + 60_000, T0_US + i * gap + 400_000, out=20)
        for i in range(n)
    ]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A data folder of two made-up BLIS runs and its manifest in a manifests folder."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "toy.yaml").write_text(yaml.safe_dump(MANIFEST))
    monkeypatch.setattr(schema, "MANIFESTS", manifests)
    data = tmp_path / "data"
    for rate in (2, 4):
        write_blis(data / "results" / f"agg_{rate}rps" / "vanilla", _rows(rate))
    (data / "server_config.json").write_text(
        json.dumps({"model": "Org/Toy", "vllm_version": "0.23.0"})
    )
    return data, manifests


def test_a_new_dataset_of_a_known_format_is_one_manifest_file(toy, tmp_path):
    data, _ = toy
    study, table, goals, replays = run_validation(data, tmp_path / "out")
    assert study.dataset == "toy_server" and [v.name for v in study.runs] == [
        "results/agg_2rps/vanilla",
        "results/agg_4rps/vanilla",
    ]
    assert {v.launch for v in study.runs} == {"results/agg_*rps/vanilla"}
    assert set(table["cost_model"]) == {"headline", "kernels"}
    assert set(table.loc[table["cost_model"] == "kernels", "role"]) == {"post_hoc"}
    assert set(table.loc[table["cost_model"] == "headline", "role"]) == {"held_out"}
    ttft, saturated, pool = goals
    assert ttft.met is True and saturated.met is None and "not scored" in saturated.detail
    assert pool.met is False and "20,000" in pool.text  # a made-up pool the rule does not give
    text = page_text(study, table, goals, replays)
    assert "## Saturation" in text and "above 4 req/s (no run crosses)" in text
    assert "`abc1234`" in text and "| kernels |  | `abc1234` | **yes** |" in text


def test_a_folder_no_manifest_matches_is_not_recognised(toy, tmp_path):
    data, _ = toy
    (data / "server_config.json").write_text(
        json.dumps({"model": "Org/Other", "vllm_version": "0.23.0"})
    )
    assert not generic.recognise(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"variants": [{"name": "a", "decided_at": "x"}]}, "exactly one must be the headline"),
        (
            {"goals": [{"metric": "ttft", "bound": 0.1, "cost_model": "nope"}]},
            "'nope' is not one of",
        ),
        ({"surprise": 1}, "surprise"),
        ({"goals": [{"metric": "itl", "bound": 0.1}]}, "metric"),
    ],
)
def test_the_schema_refuses_a_bad_manifest_naming_the_key(tmp_path, change, message):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**MANIFEST, **change}))
    with pytest.raises(ConfigError, match=message):
        schema.load_dataset_manifest(path)


def test_saturation_is_the_bracket_the_runs_show():
    rates = np.array([2, 4, 6, 8])
    assert saturation_bracket(rates, np.array([0.1, 0.2, 3.0, 9.0]), 1.0) == (4.0, 6.0)
    assert saturation_bracket(rates, np.array([0.1, 0.2, 0.3, 0.4]), 1.0) == (8.0, None)
    assert saturation_bracket(rates, np.array([2.0, 3.0, 4.0, 5.0]), 1.0) == (None, 2.0)
    assert bracket_text((4.0, 6.0)) == "between 4 and 6 req/s"
    assert generic.series_of("results/x/agg_12.5rps/vanilla") == "results/x/agg_*rps/vanilla"
    assert generic.series_of("run-a") == generic.ONE_SERIES


@pytest.fixture(scope="module")
def vllm023(shared_data, tmp_path_factory):
    data = shared_data("vllm023_h100_qwen3_14b")
    return run_validation(data, tmp_path_factory.mktemp("v023"))


def test_the_vllm023_page_is_up_to_date_and_its_goals_met(vllm023):
    study, table, goals, replays = vllm023
    diff = page_diff(
        page_text(study, table, goals, replays), (DOCS / "validation_vllm023.md").read_text()
    )
    assert diff is None, (
        f"docs/validation_vllm023.md is stale ({diff}): run `pagesim validate-vllm --data "
        "../shared/data/vllm023_h100_qwen3_14b --out OUT --docs docs/validation_vllm023.md`"
    )
    scored = [g for g in goals if g.met is not None]
    assert scored and all(g.met for g in scored), [(g.text, g.detail) for g in scored]


def test_the_vllm023_pool_is_within_3_percent_of_the_logged_one(vllm023):
    study, *_ = vllm023
    predicted, logged = study.extra["pool"]
    assert logged == 18038 and abs(predicted / logged - 1) <= 0.03


def test_your_own_blis_runs_with_a_release_and_a_config_are_validated(tmp_path):
    """pagesim-runs.yaml naming the model by its config.json and the release: every BLIS trace
    folder is a run named by its path, held out, priced by the rule for an unseen server."""
    from pagesim.simulator.model_catalog import CONFIG_DIR

    folder = tmp_path / "mine"
    for rate in (2, 4):
        write_blis(folder / "sweep" / f"r{rate}rps", _rows(rate))
    (folder / "model").mkdir()
    (folder / "model" / "config.json").write_text((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    (folder / "pagesim-runs.yaml").write_text(
        "model: model/config.json\ngpu: h100-sxm\nvllm_version: 0.23.0\nfit: []\n"
        "server_args: --max-num-seqs 64 --max-model-len 8192\n"
    )
    study, table, goals, replays = run_validation(folder, tmp_path / "out")
    assert [v.name for v in study.runs] == ["sweep/r2rps", "sweep/r4rps"]
    assert set(table["role"]) == {"held_out"} and study.headline.name == "kernels"
    assert study.headline.profile == "h100-sxm-compiled-steps"
    assert study.runs[0].settings["server"]["vllm_version"] == "0.23.0"
    text = page_text(study, table, goals, replays)
    assert "rule for an unseen server" in text
