"""Every `replay-vllm --set` acts or is refused (experiments/validation/replay_settings.py).

The ground truth of "acts" is independent of the replay's own table: the RunSpec fields
that `simulate(spec, trace=...)` reads (recorded as tests/test_spec_fields.py records them).
A field it never reads when the trace is given would be accepted and ignored: the replay
must refuse it or handle it itself (the send times' scale)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pagesim.cli import main
from pagesim.errors import ConfigError
from pagesim.experiments.validation.bench import JSON_NAME, PAGE_NAME, replay_vllm
from pagesim.experiments.validation.replay_settings import REFUSED, SCALES, split_replay_settings
from pagesim.simulator import simulate
from pagesim.simulator.spec import RunSpec, run_spec_from_dict
from pagesim.specbase import StrictSpec
from pagesim.workloads.assemble import assemble_trace


def _result(tmp_path, rate=2.0):
    rng = np.random.default_rng(1)
    n = 30
    out = rng.integers(5, 60, n)
    doc = {
        "backend": "vllm",
        "request_rate": rate,
        "input_lens": rng.integers(50, 600, n).tolist(),
        "output_lens": out.tolist(),
        "ttfts": rng.uniform(0.04, 0.09, n).tolist(),
        "itls": [rng.uniform(0.02, 0.03, o - 1).tolist() for o in out],
        "start_times": (100 + np.cumsum(rng.exponential(1 / rate, n))).tolist(),
        "errors": [""] * n,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path, doc


def _replay(tmp_path, name, *sets):
    path, _ = _result(tmp_path)
    out = tmp_path / name
    args = ["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb",
            "--server-args", "--num-gpu-blocks-override 400", "--out", str(out)]  # fmt: skip
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    return json.loads((out / JSON_NAME).read_text()), (out / PAGE_NAME).read_text()


def test_time_scale_divides_the_recorded_send_times(tmp_path):
    base, _ = _replay(tmp_path, "x1")
    fast, page = _replay(tmp_path, "x2", "arrivals.time_scale=2")
    assert np.allclose(np.array(fast["start_times"]) * 2, base["start_times"])
    assert fast["mean_ttft_ms"] != base["mean_ttft_ms"]
    assert "the recorded send times divided by 2" in page and "compare two loads" in page


def test_a_rate_re_spaces_the_recorded_send_times_by_the_runs_rate_over_it(tmp_path):
    base, _ = _replay(tmp_path, "x1")
    fast, page = _replay(tmp_path, "r8", "arrivals.rate_req_s=8")
    assert np.allclose(np.array(fast["start_times"]) * 4, base["start_times"])  # 2 req/s -> 8
    assert "multiplied by 0.25 (the run's 2 req/s over the 8 asked" in page


@pytest.mark.parametrize("path", sorted(REFUSED))
def test_each_refused_path_is_refused_in_one_line_naming_what_to_use(tmp_path, path):
    value = {"workload": {"name": "sharegpt"}, "metrics.reducers": ["time-weighted"]}.get(path, 1)
    with pytest.raises(ConfigError, match=rf"--set {path}: not followed by a replay: .*`pagesim"):
        replay_vllm(_result(tmp_path)[0], tmp_path / "o", model="llama-2-7b", gpu="a100-80gb",
                    overrides={path: value})  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_sub_paths_sections_and_both_scales_are_refused():
    for key in ("workload.num_requests", "workload.prompt.mean", "metrics", "arrivals"):
        with pytest.raises(ConfigError, match=f"--set {key}: not followed by a replay"):
            split_replay_settings({key: 1}, 2.0)
    with pytest.raises(ConfigError, match="give one"):
        split_replay_settings({"arrivals.time_scale": 2, "arrivals.rate_req_s": 4}, 2.0)
    with pytest.raises(ConfigError, match="time_scale"):
        split_replay_settings({"arrivals.time_scale": -1}, 2.0)
    # a seed acts with spread (its draws), and is then kept
    kept, _ = split_replay_settings({"seed": 3, "spread": {"sources": ["cost"]}}, 2.0)
    assert kept["seed"] == 3


#: replay-like specs under each scheduler family, simulated with a trace given
TRACE_DOCS = [
    {"hardware": {"kv_slots": 4096}, "scheduler": {"kind": "vllm", "max_paddings": 64,
     "prefill_padding": True}, "metrics": {"slo": {"ttft_ms": 100.0}, "percentiles": [50.0]}},
    {"hardware": {"kv_slots": 4096, "kv_cache_dtype": "fp8"}, "allocator": {"kind": "paged-v1"},
     "scheduler": {"kind": "vllm-v1", "chunked_prefill": False, "max_num_batched_tokens": 4096},
     "server": {"vllm_version": "0.19.0", "enforce_eager": True}},
    {"hardware": {"gpu": "a100-80gb", "profile": "a100-80gb-vidur", "tensor_parallel": 2,
                  "link": {"bus_bw_gbps": 40.0, "latency_us": 15.0, "source": "a test"}},
     "spread": {"sources": ["cost"], "replicate": 1}, "max_sim_time_s": 100.0,
     "check_invariants": True},
    {"hardware": {"kv_slots": 4096}, "allocator": {"kind": "pow2", "placement": "first_fit",
     "granule_slots": 8}, "scheduler": {"kind": "orca", "admission": "artifact"}},
    {"hardware": {"kv_slots": 4096}, "allocator": {"kind": "oracle"},
     "scheduler": {"kind": "static", "max_batch_size": 4}},
    {"hardware": {"kv_slots": 4096}, "scheduler": {"kind": "vllm-paper"}},
]  # fmt: skip


def _leaf_paths(model=RunSpec, prefix=""):
    from pagesim.experiments.schema_paths import _model_in

    for name, field in model.model_fields.items():
        sub = _model_in(field.annotation)
        if sub is None:
            yield f"{prefix}{name}", (model.__name__, name)
        else:
            yield from _leaf_paths(sub, f"{prefix}{name}.")


def test_every_path_a_replay_would_not_follow_is_refused_or_handled(monkeypatch):
    trace = assemble_trace(
        prompt_len=np.arange(20, 60, 2), output_len=np.arange(5, 25), arrival_s=np.arange(20) * 0.1
    )
    specs = [run_spec_from_dict(doc) for doc in TRACE_DOCS]
    read: set[tuple[str, str]] = set()
    original = StrictSpec.__getattribute__

    def recording(self, name):
        if name in type(self).model_fields:
            read.add((type(self).__name__, name))
        return original(self, name)

    monkeypatch.setattr(StrictSpec, "__getattribute__", recording)
    for spec in specs:
        simulate(spec, trace=trace)
    monkeypatch.undo()
    ignored = sorted(path for path, field in _leaf_paths() if field not in read)
    assert ignored, "simulate(trace=...) reads every field: nothing for the replay to refuse?"
    assert any(p.startswith("workload.") for p in ignored)  # the ground truth is not empty
    for path in ignored:
        if path in SCALES:
            continue
        with pytest.raises(ConfigError, match=f"--set {path}: not followed by a replay"):
            split_replay_settings({path: 1}, 2.0)
