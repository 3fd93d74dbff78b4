"""The readers on the real published files (``../shared/data``; skipped where absent):
counts and invariants only. No latency of the vllm023 runs is computed here: they are
held out."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import DataError
from pagesim.records import format_of, read_run
from pagesim.records.distserve_exp import read_distserve_exp, read_distserve_workload
from pagesim.records.lmbench import read_lmbench_csv

VLLM023_COUNTS = {2: 1212, 4: 2363, 6: 3610, 8: 4830}


@pytest.mark.parametrize("rate", sorted(VLLM023_COUNTS))
def test_every_vllm023_run_reads_with_its_rows_and_prompts(shared_data, rate):
    root = shared_data("vllm023_h100_qwen3_14b")
    folder = shared_data(
        "vllm023_h100_qwen3_14b", "results", "sweep_rate", f"agg_{rate}rps", "vanilla"
    )
    assert format_of(folder) == "blis-trace-v3"
    run = read_run(folder, root=root)
    assert run.name == f"results/sweep_rate/agg_{rate}rps/vanilla"
    assert run.rate_req_s == rate and run.meta["rate"].startswith("nominal")
    assert run.num_requests == VLLM023_COUNTS[rate]
    assert run.num_failed == 0 and run.meta["num_never_sent"] == 0  # no failed row in these runs
    prompts = run.table["prompt_len"].to_numpy()
    assert 980 <= prompts.mean() <= 992  # about 986 as the server counted them
    assert (run.table["output_len"] == 128).all()  # min_tokens = max_tokens = 128
    assert run.meta["model"] == "Qwen/Qwen3-14B" and run.meta["workload_seed"] == 42
    assert run.meta["mode"] == "real" and run.meta["prompt_from_client_count"] == 0


def _lmbench_files(shared_data) -> list:
    root = shared_data("llmd_lmbench_2025", "data")
    return sorted(root.rglob("LMBench_*.csv.gz"))


def test_every_lmbench_file_reads_or_is_a_header_alone(shared_data):
    files = _lmbench_files(shared_data)
    kinds: dict[str, int] = {}
    header_only = 0
    for path in files:
        try:
            run = read_lmbench_csv(path)
        except DataError as exc:
            assert "a header and no records" in str(exc), str(exc)
            header_only += 1
            continue
        kinds[run.meta["workload"]] = kinds.get(run.meta["workload"], 0) + 1
        assert run.num_failed == 0
        # finish_time = launch + ttft + generation_time held in every row (else refused)
        assert run.meta["finish_check"].startswith("finish_time = launch_time")
        if "num_users" in run.meta:
            assert run.meta["num_short_rounds"] == 0  # no prompt shorter than its history
    assert (len(files), header_only) == (245, 15)
    assert kinds == {"long_input": 96, "sharegpt": 79, "short_input": 55}


def test_the_multi_round_rebuild_shares_each_users_history(shared_data):
    path = shared_data(
        "llmd_lmbench_2025", "data", "openshift", "lmbenchmark", "llama8B-all-2replicas", "vllm",
        "LMBench_long_input_output_3.0.csv.gz",
    )  # fmt: skip
    run = read_lmbench_csv(path)
    raw = pd.read_csv(io.BytesIO(gzip.decompress(path.read_bytes())))
    raw = raw.sort_values(["user_id", "question_id"])
    previous = raw.groupby("user_id")[["prompt_tokens", "generation_tokens"]].shift()
    history = (previous["prompt_tokens"] + previous["generation_tokens"]).dropna()
    # every later round holds its user's previous prompt and answer: their share of all
    # prompt tokens, computed from the file directly, is the rebuild's
    assert run.meta["history_share"] == pytest.approx(history.sum() / raw["prompt_tokens"].sum())
    assert run.meta["history_share"] > 0.85
    assert run.meta["num_users"] == raw["user_id"].nunique()
    t = run.table
    for _, rows in t.groupby("user_id"):
        segs = rows.sort_values("arrival_s")["segments"].tolist()
        for earlier, later in zip(segs, segs[1:], strict=False):
            assert later[: len(earlier)] == earlier
    firsts = [s[0] for s in t["segments"]]
    assert set(firsts) == {(0, 1000)}  # LMBench's 1,000-token system prompt, every user


def test_distserve_ground_truth_and_workloads_read_and_agree(shared_data):
    root = shared_data("distserve_pd_opt13b")
    setups: dict[str | None, int] = {}
    for path in sorted((root / "ground_truth").glob("*.exp")):
        run = read_distserve_exp(path)
        assert run.num_requests == run.meta["num_requests_named"]
        setups[run.meta["setup"]] = setups.get(run.meta["setup"], 0) + 1
        workload = read_distserve_workload(root / "workload" / path.name)
        assert sorted(workload.table["prompt_len"]) == sorted(run.table["prompt_len"])
        assert np.allclose(workload.table["arrival_s"], run.table["arrival_s"], atol=1e-6)
    assert setups == {None: 9, "c21d11": 7, "c21d12": 7}
    assert len([read_distserve_workload(p) for p in (root / "workload").glob("*.exp")]) == 37


def test_the_per_step_parquet_reads_with_its_pools(shared_data):
    path = shared_data(
        "inference_sim_h100_v0151", "steps", "hypotheses", "h-stepml", "round4",
        "idea-2-cycle-time-regression", "h1-cycle-time-extraction", "output",
        "enriched_steps.parquet",
    )  # fmt: skip
    steps = read_run(path)
    assert len(steps.table) == 20_112 and len(steps.experiments) == 3
    pools = {e: set(steps.of(e)["kv_blocks_total"]) for e in steps.experiments}
    assert sorted(pools.values(), key=min) == [{26_602}, {31_356}, {31_356}]
    assert {m["tp"] for m in steps.meta["experiments"].values()} == {2, 4}
