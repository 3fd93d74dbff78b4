"""inference-perf's shared-prefix client, as the inference-sim runs resolved it, as a Trace.

A made-up experiment folder in inference-sim's layout, and the 16 real ones from the shared
data (skipped where absent).
"""

import json

import numpy as np
import pytest
import yaml

from pagesim.errors import DataError
from pagesim.records.inference_perf import read_client, shared_prefix_trace


def _write_experiment(folder, *, resolved=True, mean_prompt=None, multi_turn=True):
    folder.mkdir(parents=True)
    asked = {
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_unique_system_prompts": 3,
                "num_users_per_system_prompt": 2,
                "system_prompt_len": 10,
                "question_len": 30,
                "output_len": 5,
                "enable_multi_turn_chat": multi_turn,
            },
        },
        "load": {
            "type": "constant",
            "stages": [{"rate": 4, "duration": 5}, {"rate": 2, "duration": 3}],
        },
    }
    (folder / "profile.yaml").write_text(json.dumps(asked))  # one line of JSON, as there
    if resolved:
        (folder / "results").mkdir()
        ran = {
            "data": {
                "type": "shared_prefix",
                "shared_prefix": {
                    "num_groups": 2,
                    "num_prompts_per_group": 2,
                    "system_prompt_len": 10,
                    "question_len": 30,
                    "output_len": 5,
                },
            },
            "load": {**asked["load"], "interval": 1.0},
        }
        (folder / "results" / "config.yaml").write_text(yaml.safe_dump(ran))
        if mean_prompt is not None:
            for stage in (0, 1):
                metrics = {"successes": {"prompt_len": {"mean": mean_prompt}}}
                path = folder / "results" / f"stage_{stage}_lifecycle_metrics.json"
                path.write_text(json.dumps(metrics))
    return folder


def test_the_resolved_configuration_is_what_ran(tmp_path):
    client = read_client(_write_experiment(tmp_path / "exp", mean_prompt=43.0))
    assert (client.num_groups, client.num_prompts_per_group) == (2, 2)  # not the asked 3 x 2
    assert "num_groups" in client.notes[0] and "enable_multi_turn_chat" in client.notes[0]
    assert client.token_scale == pytest.approx((43.0 - 1) / 40)
    assert (client.shared_len, client.own_len) == (1 + 10, 32)  # BOS + system; question rescaled
    with pytest.raises(DataError, match="multi-turn chat is not modelled"):
        read_client(_write_experiment(tmp_path / "asked", resolved=False))
    assert (
        read_client(
            _write_experiment(tmp_path / "single", resolved=False, multi_turn=False)
        ).num_groups
        == 3
    )
    with pytest.raises(DataError, match="neither results/config.yaml nor profile.yaml"):
        read_client(tmp_path / "missing")


def test_the_trace_cycles_the_shuffled_prompts_stage_by_stage(tmp_path):
    client = read_client(_write_experiment(tmp_path / "exp"))
    trace = shared_prefix_trace(client, np.random.default_rng(0))
    t = trace.table
    assert len(t) == 4 * 5 + 2 * 3
    arrival = t["arrival_s"].to_numpy()
    assert arrival[19] == pytest.approx(5.0)  # gaps rescaled to the stage's duration
    assert arrival[20] > 5.0 + 2.0  # the next stage: set-up 1 s + interval 1 s later
    assert arrival[-1] == pytest.approx(5.0 + 2.0 + 3.0)
    segments = t["segments"].tolist()
    assert segments[:4] == segments[4:8]  # request n sends prompt n % 4
    assert segments[20:24] == segments[:4]  # and the index restarts with each stage
    groups = {s[0] for s in segments[:4]}
    assert groups == {(0, 11), (1, 11)}  # two groups, each shared by two prompts
    assert len({s[1][0] for s in segments[:4]}) == 4  # four distinct questions
    assert set(t["prompt_len"]) == {41} and set(t["output_len"]) == {5}
    again = shared_prefix_trace(client, np.random.default_rng(0)).table
    assert again["arrival_s"].tolist() == t["arrival_s"].tolist()  # seeded


def test_every_real_run_resolved_ten_by_ten_single_turn(shared_data):
    """The notes' claim, checked on all 16: whatever profile.yaml asked, 10 x 10, no multi-turn;
    each stage sends rate x duration requests; prompt lengths rescaled to the measured mean."""
    root = shared_data("inference_sim_h100_v0151")
    folders = sorted(p for p in root.iterdir() if (p / "profile.yaml").is_file())
    assert len(folders) == 16
    for folder in folders:
        client = read_client(folder)
        assert (client.num_groups, client.num_prompts_per_group) == (10, 10), folder.name
        assert 1.03 < client.token_scale < 1.06, folder.name
        for i, stage in enumerate(client.stages):
            metrics = json.loads(
                (folder / "results" / f"stage_{i}_lifecycle_metrics.json").read_text()
            )
            assert metrics["load_summary"]["count"] == stage.num_requests, folder.name
            mean = metrics["successes"]["prompt_len"]["mean"]
            assert client.shared_len + client.own_len == pytest.approx(mean, abs=1.0), folder.name
    general = read_client(root / "20260217-231439-llama-2-7b-tp1-general")
    trace = shared_prefix_trace(general, np.random.default_rng(0))
    assert len(trace) == 8 * 600 + 20 * 600
    assert trace.table["output_len"].iloc[0] == 248
