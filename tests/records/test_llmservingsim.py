"""LLMServingSim's vLLM runs and token-id workloads: records, and prompt segments from token ids.

Small files the test writes in LLMServingSim's formats (made-up requests), and the real runs
from the shared data (skipped where absent).
"""

import hashlib
import json
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from pagesim.allocators.prefix_cache import prompt_block_keys
from pagesim.errors import DataError
from pagesim.records.llmservingsim import (
    prompt_segments,
    read_llmservingsim_run,
    read_workload,
    replay_trace,
)


def _common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _shared_blocks(prompts, block_size):
    segments = prompt_segments(prompts)
    keys = [
        prompt_block_keys(s, len(p), block_size) for s, p in zip(segments, prompts, strict=True)
    ]
    return segments, keys


def test_prompts_share_segments_exactly_where_their_tokens_agree():
    base = list(range(100, 140))
    prompts = [
        base,  # 40 tokens
        base[:20] + [7] * 10,  # agrees on 20
        base[:33],  # a prefix of the first
        base,  # the first again
        [5, 6, 7],  # shares nothing
        base[:20] + [7] * 5 + [8],  # agrees with the second on 25
    ]
    segments = prompt_segments(prompts)
    for p, s in zip(prompts, segments, strict=True):
        assert sum(n for _, n in s) == len(p)
    assert segments[3] == segments[0]  # identical prompts, identical content
    assert segments[0][:1] == segments[1][:1] == segments[5][:1] == ((0, 20),)
    assert segments[4] == ((segments[4][0][0], 3),) and segments[4][0][0] not in {
        i for s in segments[:4] for i, _ in s
    }
    for block_size in (1, 4, 16):
        _, keys = _shared_blocks(prompts, block_size)
        for (i, a), (j, b) in combinations(enumerate(prompts), 2):
            common = sum(1 for x, y in zip(keys[i], keys[j], strict=False) if x == y)
            # full blocks inside the common prefix are shared, no other
            assert common == min(_common_prefix(a, b) // block_size, len(keys[i]), len(keys[j])), (
                i,
                j,
            )


def test_random_prompts_share_blocks_as_their_token_ids_do():
    rng = np.random.default_rng(3)
    trunks = [rng.integers(0, 50, 70).tolist() for _ in range(3)]
    prompts = []
    for _ in range(40):
        trunk = trunks[rng.integers(3)]
        cut = int(rng.integers(1, 70))
        prompts.append(trunk[:cut] + rng.integers(0, 50, int(rng.integers(1, 30))).tolist())
    for block_size in (2, 16):
        _, keys = _shared_blocks(prompts, block_size)
        for i, j in combinations(range(len(prompts)), 2):
            same = 0
            while same < min(len(keys[i]), len(keys[j])) and keys[i][same] == keys[j][same]:
                same += 1
            want = _common_prefix(prompts[i], prompts[j]) // block_size
            assert same == min(want, len(keys[i]), len(keys[j])), (i, j)


def _write_run(folder, *, null=False):
    """A three-request run: the engine's clock starts at 5,000 s, the client's at 1.7e9."""
    vllm = folder / "vllm"
    vllm.mkdir(parents=True)
    rows = [
        ("bench-0", 30, 4, 0.0, 0.0, 0.01, 0.20, 0.50),
        ("bench-1", 20, 2, 0.1, 0.12, 0.12, 0.30, 0.40),
        ("bench-2", 10, 3, 0.3, 0.31, 0.35, 0.60, 0.90),
    ]
    with (vllm / "requests.jsonl").open("w") as f:
        for rid, i, o, sent, queued, sched, first, last in rows:
            rec = {
                "request_id": rid,
                "input_toks": i,
                "output_toks": o,
                "arrival_time": 1.7e9 + sent,
                "queued_ts": 5000 + queued,
                "scheduled_ts": 5000 + sched,
                "first_token_ts": None if null and rid == "bench-1" else 5000 + first,
                "last_token_ts": 5000 + last,
            }
            f.write(json.dumps(rec) + "\n")
    meta = {
        "model": "meta-llama/Llama-3.1-8B",
        "vllm_version": "0.19.0",
        "engine_kwargs": {"max_num_seqs": 8, "max_num_batched_tokens": 64},
        "dataset_path": "workloads/made-up-3-sps2.5.jsonl",
        "dataset_hash": "0" * 64,
        "num_requests": 3,
    }
    (vllm / "meta.json").write_text(json.dumps(meta))
    pd.DataFrame(
        {"t": [1.0, 2.0], "running": [2, 1], "waiting": [1, 0], "kv_cache_pct": [40.0, 12.5]}
    ).to_csv(vllm / "timeseries.csv", index=False)
    return folder


def _write_workload(path, prompts, outputs, *, agentic=False):
    with path.open("w") as f:
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True)):
            row = {"input_toks": len(p), "output_toks": o, "arrival_time_ns": i * 100_000_000}
            row["input_tok_ids"] = p
            f.write(json.dumps(row) + "\n")
        if agentic:
            f.write(
                json.dumps({"session_id": "s", "arrival_time_ns": 0, "sub_requests": []}) + "\n"
            )
    return path


def test_a_run_reads_with_engine_arrivals_and_its_meta(tmp_path):
    run = read_llmservingsim_run(_write_run(tmp_path / "GPU" / "Model"))
    assert run.name == "GPU-Model" and run.rate_req_s == 2.5  # the workload name's -sps2.5
    t = run.table
    assert t["arrival_s"].tolist() == pytest.approx([0.0, 0.12, 0.31])  # queued_ts, from the first
    lat = run.latencies()
    assert lat["ttft_s"].tolist() == pytest.approx([0.20, 0.18, 0.29])  # first token - queued
    assert lat["tpot_s"].tolist() == pytest.approx([0.10, 0.10, 0.15])
    assert run.meta["request_ids"] == ["bench-0", "bench-1", "bench-2"]
    assert run.meta["client_arrival_s"].tolist() == pytest.approx([0.0, 0.1, 0.3], abs=1e-6)
    assert run.meta["engine_kwargs"]["max_num_batched_tokens"] == 64
    assert run.meta["timeseries"]["kv_cache_pct"].tolist() == [40.0, 12.5]
    assert {p.rsplit("/", 1)[-1] for p, _ in run.sources} == {
        "requests.jsonl",
        "meta.json",
        "timeseries.csv",
    }
    with pytest.raises(DataError, match="first_token_ts is null: the request was not served"):
        read_llmservingsim_run(_write_run(tmp_path / "G2" / "M", null=True))
    with pytest.raises(DataError, match="no requests.jsonl"):
        read_llmservingsim_run(tmp_path)


def test_workloads_become_traces_and_replays_check_what_they_pair(tmp_path):
    prompts = [list(range(30)), list(range(20)), list(range(10)) + [99] * 0]
    path = _write_workload(tmp_path / "w.jsonl", prompts, [4, 2, 3])
    trace = read_workload(path)
    assert trace.table["prompt_len"].tolist() == [30, 20, 10]
    assert trace.table["arrival_s"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    assert trace.table["segments"].tolist() == [
        ((0, 10), (1, 10), (2, 10)),
        ((0, 10), (1, 10)),
        ((0, 10),),
    ]
    run = read_llmservingsim_run(_write_run(tmp_path / "GPU" / "Model"))
    with pytest.raises(DataError, match="not the workload this run was sent"):
        replay_trace(run, path)
    run.meta["dataset_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    replay = replay_trace(run, path)
    assert replay.table["arrival_s"].tolist() == pytest.approx([0.0, 0.12, 0.31])
    assert replay.table["segments"].tolist() == trace.table["segments"].tolist()
    bad = _write_workload(tmp_path / "b.jsonl", prompts, [4, 5, 3])
    run.meta["dataset_sha256"] = None
    with pytest.raises(DataError, match="bench-1 has 20 / 2 tokens"):
        replay_trace(run, bad)
    with pytest.raises(DataError, match="agentic session"):
        read_workload(_write_workload(tmp_path / "a.jsonl", prompts, [4, 2, 3], agentic=True))
    (tmp_path / "n.jsonl").write_text(
        json.dumps(
            {"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0, "input_tok_ids": [1, 2]}
        )
    )
    with pytest.raises(DataError, match="input_tok_ids has 2 tokens, input_toks says 3"):
        read_workload(tmp_path / "n.jsonl")


# ---- the real runs (shared data) --------------------------------------------------------------


def test_the_rtx4090_run_gives_llmservingsims_own_vllm_numbers(shared_data):
    """TTFT = first token - queued, TPOT = (last - first) / (out - 1): the medians of their
    validation summary (vLLM column: TTFT 60110.9 ms, TPOT 30.8 ms, latency 83413.3 ms)."""
    run = read_llmservingsim_run(shared_data("llmservingsim_vllm019", "RTX4090", "Llama-3.1-8B"))
    assert run.num_requests == 300 and run.rate_req_s == 10.0
    med = run.latencies().median() * 1e3
    assert med["ttft_s"] == pytest.approx(60110.9, abs=0.1)
    assert med["tpot_s"] == pytest.approx(30.8, abs=0.05)
    assert med["e2e_s"] == pytest.approx(83413.3, abs=0.1)
    assert run.meta["kv_cache"]["num_gpu_blocks"] == 2588
    assert run.meta["scheduler_config"]["max_num_batched_tokens"] == 2048
    assert run.meta["timeseries"]["kv_cache_pct"].max() <= 100


@pytest.mark.parametrize(
    "run_dir, workload",
    [
        ("RTX4090/Llama-3.1-8B", "sharegpt-llama-3.1-8b-300-sps10.jsonl"),
        ("RTXPRO6000/Qwen3-32B", "sharegpt-qwen3-32b-300-sps10.jsonl"),
    ],
)
def test_real_prompts_hit_the_cache_exactly_as_their_token_ids_share(
    run_dir, workload, shared_data
):
    path = shared_data("llmservingsim_vllm019", "workloads", workload)
    run = read_llmservingsim_run(shared_data("llmservingsim_vllm019", *run_dir.split("/")))
    trace = replay_trace(run, path)  # also checks the file's sha256 against the run's
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    order = [int(rid.split("-")[1]) for rid in run.meta["request_ids"]]
    prompts = [rows[i]["input_tok_ids"] for i in order]
    keys = [
        prompt_block_keys(s, n, 16)
        for s, n in zip(trace.table["segments"], trace.table["prompt_len"], strict=True)
    ]
    seen, hits, want = set(), 0, 0
    for i, k in enumerate(keys):
        hits += sum(key in seen for key in k)
        seen.update(k)
        want += max((_common_prefix(prompts[i], prompts[j]) // 16 for j in range(i)), default=0)
    assert hits == want > 1000  # ShareGPT's later turns repeat earlier prompts
