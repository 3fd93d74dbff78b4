"""`pagesim replay-vllm`: a hand-written `vllm bench serve` result (made-up requests, the
real format's keys) replayed and compared; pagesim's own run in that format."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pagesim.cli import main
from pagesim.errors import ConfigError
from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.bench import JSON_NAME, PAGE_NAME
from pagesim.experiments.validation.server_args import server_settings


def _result(tmp_path, n=30, seed=0):
    rng = np.random.default_rng(seed)
    start = 500 + np.cumsum(rng.exponential(0.5, n))
    out = rng.integers(3, 120, n)
    doc = {
        "backend": "vllm",
        "model_id": "meta-llama/Llama-2-7b-hf",
        "request_rate": 2.0,
        "completed": n,
        "request_throughput": 1.9,
        "mean_ttft_ms": 60.0,
        "median_ttft_ms": 55.0,
        "p99_ttft_ms": 120.0,
        "mean_tpot_ms": 25.0,
        "input_lens": rng.integers(50, 800, n).tolist(),
        "output_lens": out.tolist(),
        "ttfts": rng.uniform(0.04, 0.09, n).tolist(),
        "itls": [rng.uniform(0.02, 0.03, o - 1).tolist() for o in out],
        "start_times": start.tolist(),
        "errors": [""] * n,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path, doc


def test_replay_writes_every_metric_beside_the_measured_one(tmp_path):
    path, doc = _result(tmp_path)
    out = tmp_path / "out"
    code = main(
        [
            "replay-vllm",
            str(path),
            "--model",
            "llama-2-7b",
            "--gpu",
            "a100-80gb",
            "--server-args",
            "--max-num-seqs 64 --block-size 16 --num-gpu-blocks-override 500",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    assert set(table["role"]) == {"held_out"} and table["headline"].all()
    ttft = table[(table["metric"] == "ttft") & (table["stat"] == "p50")].iloc[0]
    assert ttft["measured_ms"] == pytest.approx(np.median(doc["ttfts"]) * 1e3)
    page = (out / PAGE_NAME).read_text()
    assert "| median_ttft_ms | 55 |" in page and "scheduler.max_num_seqs: 64" in page
    assert "hardware.kv_blocks" not in page or "500" in page
    sim = json.loads((out / JSON_NAME).read_text())
    # pagesim's run in vllm bench serve's format: its keys, per request in send order
    assert sim["completed"] == 30 and len(sim["ttfts"]) == 30
    assert sim["input_lens"] == doc["input_lens"]
    assert sim["start_times"] == pytest.approx(np.array(doc["start_times"]) - doc["start_times"][0])
    assert {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "request_throughput"} <= set(sim)
    assert str(tmp_path) not in page


def test_server_args_map_to_run_spec_keys_and_unknown_ones_are_named():
    got = server_settings(
        "--max-num-seqs 128 -tp 2 --gpu-memory-utilization 0.85 --enable-prefix-caching "
        "--max-paddings 256"
    )
    assert got == {
        "scheduler.max_num_seqs": 128,
        "hardware.tensor_parallel": 2,
        "hardware.gpu_memory_utilization": 0.85,
        "allocator.prefix_caching": True,
        "scheduler.max_paddings": 256,
        "scheduler.prefill_padding": True,
    }
    assert server_settings("--async-scheduling") == {"scheduler.async_scheduling": True}
    assert server_settings("--no-async-scheduling") == {"scheduler.async_scheduling": False}
    # a flag pagesim does not model is kept aside (the page lists it), not applied
    assert server_settings("--speculative-model x --max-num-seqs 8") == {
        "scheduler.max_num_seqs": 8
    }
    with pytest.raises(ConfigError, match="--server-args"):
        server_settings("--max-num-seqs many")


def test_a_result_without_aggregates_is_measured_from_its_arrays(tmp_path):
    """A result cut down to its per-request arrays: the measured statistics come from the
    arrays (vllm bench serve's definitions), and the page says which."""
    path, doc = _result(tmp_path)
    for key in [k for k in doc if k.endswith("_ms")]:
        del doc[key]
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    args = ["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb",
            "--server-args", "--max-num-seqs 64", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    page = (out / PAGE_NAME).read_text()
    median_ttft = np.median(doc["ttfts"]) * 1e3
    assert f"| median_ttft_ms | {median_ttft:.4g} |" in page
    gaps = [g for row in doc["itls"] for g in row]
    assert f"| mean_itl_ms | {np.mean(gaps) * 1e3:.4g} |" in page
    e2e = (np.array(doc["ttfts"]) + np.array([sum(r) for r in doc["itls"]])) * 1e3
    assert f"| p99_e2el_ms | {np.percentile(e2e, 99):.4g} |" in page
    assert "measured from its per-request arrays" in page and "median_ttft_ms" in page


def _v1_run_by_pagesim(
    tmp_path, n=160, serving=None, blocks=3000, rate=8.0, name="v1.json", seed=3
):
    """A `vllm bench serve` result written from a pagesim run of a V1 server (vllm-v1,
    the analytic profile, plus ``serving`` where given): the scheduler and the step cost
    that made it are known."""
    from pagesim.simulator import simulate
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.costmodel.serving import ServingCostModel
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model
    from pagesim.simulator.spec import run_spec_from_dict
    from pagesim.workloads.assemble import assemble_trace

    rng = np.random.default_rng(seed)
    trace = assemble_trace(
        prompt_len=rng.integers(50, 1500, n),
        output_len=rng.integers(20, 300, n),
        arrival_s=np.cumsum(rng.exponential(1 / rate, n)),
    )
    doc = {
        "hardware": {"model": "llama-2-7b", "gpu": "a100-80gb", "kv_slots": blocks * 16},
        "allocator": {"kind": "paged-v1", "block_size": 16},
        "scheduler": {"kind": "vllm-v1", "max_num_seqs": 64, "max_num_batched_tokens": 2048},
    }
    doc["metrics"] = {"every_step": True}
    cost_model = None
    if serving is not None:
        kernels = cost_model_for(None, get_model("llama-2-7b"), get_gpu("a100-80gb"))
        cost_model = ServingCostModel(kernels, serving)
    result = simulate(run_spec_from_dict(doc), trace=trace, cost_model=cost_model)
    req = result.requests
    out = req["output_len"].to_numpy()
    steps = result.timeseries
    ends = np.sort((steps["t_s"] + steps["duration_s"]).to_numpy())
    itls = []
    for first, last, o in zip(req["first_token_s"], req["finish_s"], out, strict=True):
        # its tokens: the ends of the steps it decoded in (a V1 step gives each one a token)
        mine = ends[(ends > first + 1e-9) & (ends <= last + 1e-9)]
        assert len(mine) == o - 1  # nothing preempted: one token a step
        itls.append(np.diff(np.concatenate([[first], mine])).tolist())
    result = {
        "backend": "vllm",
        "model_id": "meta-llama/Llama-2-7b-hf",
        "request_rate": rate,
        "completed": n,
        "input_lens": req["prompt_len"].astype(int).tolist(),
        "output_lens": out.astype(int).tolist(),
        "ttfts": req["ttft_s"].tolist(),
        "itls": itls,
        "start_times": (100.0 + req["arrival_s"]).tolist(),
        "errors": [""] * n,
    }
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return path


def test_scheduler_alone_separates_the_scheduler_from_the_step_cost(tmp_path, capsys):
    """On a run pagesim made itself, replayed with its own steps read back off every
    token's time, the same scheduler lands within a few percent (the scheduler's error is
    nil but for the reading's), and the same profile prices the decodes within a few
    percent (the step cost's error is nil)."""
    path = _v1_run_by_pagesim(tmp_path)
    out = tmp_path / "alone"
    args = ["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb"]
    server = "--max-num-seqs 64 --max-num-batched-tokens 2048 --num-gpu-blocks-override 3000"
    code = main(
        [*args, "--scheduler", "vllm-v1", "--server-args", server, "--scheduler-alone",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    alone = table[table["cost_model"] == vcsv.RECORDED_STEPS]
    assert len(alone) == 9 and not alone["headline"].any()
    assert (alone["error"].abs() < 0.02).all(), alone[["metric", "stat", "error"]]
    priced = table[table["metric"] == "decode_given_concurrency"]
    assert list(priced["cost_model"]) == ["analytic"] * 3 and priced["headline"].all()
    assert (priced["error"].abs() < 0.02).all(), priced[["stat", "error"]]
    page = (out / PAGE_NAME).read_text()
    assert "## The scheduler's error apart from the cost model's" in page
    assert "The steps are read from every token's time" in page
    # a V1 replay without the flag says async scheduling is off, and how to turn it on
    assert "Async scheduling: off in this replay" in page
    served_async = tmp_path / "async"
    code = main(
        [*args, "--scheduler", "vllm-v1", "--server-args", server + " --async-scheduling",
         "--out", str(served_async)]
    )  # fmt: skip
    assert code == 0
    page = (served_async / PAGE_NAME).read_text()
    assert "Async scheduling: off" not in page and "scheduler.async_scheduling: True" in page
    # a v0 scheduler's steps do not each give every decoding request a token
    assert main([*args, "--scheduler-alone", "--out", str(tmp_path / "no")]) != 0
    assert "it needs --scheduler vllm-v1, not 'vllm'" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_fit_serving_recovers_the_serving_path_a_v1_run_was_made_with(tmp_path):
    """A run pagesim made under the analytic profile plus a known serving path (4 ms a
    step, 0.15 ms a sequence, 12 ms front-end delay): fitted on its batches replayed under
    its own step times, the serving path comes back, and the run replayed under the fitted
    profile lands where the run is."""
    import yaml

    from pagesim.simulator.costmodel.serving import ServingPath

    made = ServingPath("seq", {"const_s": 4e-3, "s_per_seq": 1.5e-4}, frontend_delay_s=0.012)
    path = _v1_run_by_pagesim(tmp_path, serving=made, blocks=8000)  # nothing preempted
    server = "--max-num-seqs 64 --max-num-batched-tokens 2048 --num-gpu-blocks-override 8000"
    args = ["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb",
            "--scheduler", "vllm-v1", "--server-args", server]  # fmt: skip
    fit_dir = tmp_path / "fitted"
    code = main([*args, "--scheduler-alone", "--fit-serving", str(fit_dir), "--server",
                 "a made-up server", "--out", str(tmp_path / "alone")])  # fmt: skip
    assert code == 0
    doc = yaml.safe_load((fit_dir / "profile.yaml").read_text())
    serving = doc["serving"]
    coefs = serving["coefficients"]
    # the step cost per running sequence at this run's batches: 4 ms + 0.15 ms x ~40
    assert serving["form"] in ("seq", "seq_ctx")
    assert coefs["const_s"] == pytest.approx(4e-3, rel=0.25)
    assert coefs["s_per_seq"] == pytest.approx(1.5e-4, rel=0.25)
    assert serving["frontend_delay_s"] == pytest.approx(0.012, abs=0.004)
    assert serving["sources"][0]["file"] == "v1.json" and len(serving["sources"][0]["sha256"]) == 64
    assert "a made-up server" in serving["origin"]
    assert "--fit-serving DIR" in doc["command"]
    report = (fit_dir / "report.md").read_text()
    assert "| seq | **yes** |" in report or "| seq_ctx | **yes** |" in report
    # the fitted profile replays the run: the analytic profile alone is far off
    out = tmp_path / "served"
    assert main([*args, "--profile", str(fit_dir / "profile.yaml"), "--out", str(out)]) == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    assert (table["error"].abs() < 0.06).all(), table[["metric", "stat", "error"]]
    bare = tmp_path / "bare"
    assert main([*args, "--out", str(bare)]) == 0
    off = vcsv.read(bare / vcsv.FILE_NAME)
    assert off.loc[off["metric"] == "tpot", "error"].abs().min() > 0.1
    # fitted on the first half by send time, the second half is reported as held out
    half = tmp_path / "half"
    code = main([*args, "--scheduler-alone", "--fit-serving", str(half), "--fit-fraction",
                 "0.5", "--out", str(tmp_path / "alone-half")])  # fmt: skip
    assert code == 0
    doc = yaml.safe_load((half / "profile.yaml").read_text())
    assert doc["serving"]["fitted_on"] == "v1.json (requests 1-80)"
    assert doc["serving"]["coefficients"]["const_s"] == pytest.approx(4e-3, rel=0.25)
    assert "--fit-fraction 0.5" in doc["command"]
    report = (half / "report.md").read_text()
    assert "| held out | " in report and "Held out: requests 81-160" in report
    assert "The step times hold each request's output − 1 within" in report
    # the run replayed closed loop under the fitted profile, each part's rows
    assert "The run replayed closed loop under the fitted profile" in report
    rows = vcsv.read(tmp_path / "alone-half" / vcsv.FILE_NAME)
    served = rows[rows["cost_model"] == "analytic+serving-fit"]
    assert set(served["run"]) == {"v1 (fitted requests)", "v1 (held out requests)"}
    held = served[served["run"] == "v1 (held out requests)"]
    assert set(held["role"]) == {"held_out"} and not served["headline"].any()
    assert (held["error"].abs() < 0.06).all(), held[["metric", "stat", "error"]]
    # the same result fitted again: the same bytes
    again = tmp_path / "half-again"
    code = main([*args, "--scheduler-alone", "--fit-serving", str(again), "--fit-fraction",
                 "0.5", "--out", str(tmp_path / "alone-half-again")])  # fmt: skip
    assert code == 0
    for name in ("profile.yaml", "report.md"):
        assert (again / name).read_bytes() == (half / name).read_bytes()
    assert (tmp_path / "alone-half-again" / vcsv.FILE_NAME).read_bytes() == (
        tmp_path / "alone-half" / vcsv.FILE_NAME
    ).read_bytes()


def test_fit_serving_needs_the_scheduler_alone_replay_and_a_kernel_profile(tmp_path, capsys):
    path = _v1_run_by_pagesim(tmp_path, n=40)
    args = ["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb",
            "--scheduler", "vllm-v1"]  # fmt: skip
    assert main([*args, "--fit-serving", str(tmp_path / "f"), "--out", str(tmp_path / "o")]) != 0
    assert "--fit-serving fits on the batches of the --scheduler-alone replay" in (
        capsys.readouterr().err
    )
    assert main([*args, "--fit-fraction", "0.5", "--out", str(tmp_path / "o")]) != 0
    assert "--fit-fraction says which requests --fit-serving fits on" in capsys.readouterr().err
    bad = ["--scheduler-alone", "--fit-serving", str(tmp_path / "f"), "--fit-fraction", "0"]
    assert main([*args, *bad, "--out", str(tmp_path / "o")]) != 0
    assert "--fit-fraction: must be in (0, 1], got 0.0" in capsys.readouterr().err
    served = "a100-80gb-vidur-vllm023-serving"
    code = main([*args, "--profile", served, "--scheduler-alone", "--fit-serving",
                 str(tmp_path / "f"), "--out", str(tmp_path / "o2")])  # fmt: skip
    assert code != 0
    assert "already has a serving section" in capsys.readouterr().err


def test_validate_vllm_on_your_own_runs(tmp_path, capsys):
    """Your own results in a folder beside pagesim-runs.yaml: `validate-vllm` replays every
    run, fits the serving path on the one the manifest names and holds out the others.
    The runs: pagesim's own V1 server (analytic kernels plus a known serving path) at 3, 6
    and 9 req/s."""
    import yaml

    from pagesim.simulator.costmodel.serving import ServingPath

    made = ServingPath("seq", {"const_s": 4e-3, "s_per_seq": 1.5e-4}, frontend_delay_s=0.012)
    folder = tmp_path / "runs"
    folder.mkdir()
    for seed, rate in enumerate((3.0, 6.0, 9.0)):
        _v1_run_by_pagesim(folder, n=120, serving=made, blocks=8000, rate=rate,
                           name=f"run-{rate:g}.json", seed=seed)  # fmt: skip
    manifest = {
        "model": "llama-2-7b",
        "gpu": "a100-80gb",
        "scheduler": "vllm-v1",
        "server_args": "--max-num-seqs 64 --max-num-batched-tokens 2048 "
        "--num-gpu-blocks-override 8000",
        "server": "a made-up server",
        "fit": ["run-3.json"],
    }
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    assert main(["validate-vllm", "--data", str(folder), "--out", str(out)]) == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    assert set(table["dataset"]) == {"vllm_bench_runs"}
    roles = table.drop_duplicates("run").set_index("run")["role"].to_dict()
    assert roles == {"run-3": "fit", "run-6": "held_out", "run-9": "held_out"}
    head = table[table["headline"] & table["metric"].isin(vcsv.METRICS)]
    assert set(head["cost_model"]) == {"serving"}
    held = head[head["role"] == "held_out"]
    assert (held["error"].abs() < 0.08).all(), held[["run", "metric", "stat", "error"]]
    kernels = table[(table["cost_model"] == "kernels") & (table["metric"] == "tpot")]
    assert (kernels["error"] < -0.1).all()  # the kernels alone are far short
    fitted = yaml.safe_load((out / "profiles" / "serving" / "profile.yaml").read_text())
    assert fitted["serving"]["coefficients"]["const_s"] == pytest.approx(4e-3, rel=0.25)
    assert fitted["serving"]["fitted_on"] == "run-3.json"
    page = (out / "validation.md").read_text()
    assert "Async scheduling: off in these replays" in page
    for heading in ("## Your server", "## The serving path, fitted on the fit runs",
                    "## Saturation rate (req/s)", "## The step cost alone"):  # fmt: skip
        assert heading in page
    decode = table[table["metric"] == "decode_given_concurrency"]
    assert set(decode["cost_model"]) == {"serving"} and len(decode) == 9
    assert (decode["error"].abs() < 0.05).all(), decode[["run", "stat", "error"]]
    # intervals where the manifest asks for them: the headline's rows get lo / hi /
    # covered, the page its coverage, the fitted profile the conformal factor
    manifest["intervals"] = {"nominal": 0.9, "replicates": 4, "sources": ["serving"], "seed": 0}
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out-intervals"
    assert main(["validate-vllm", "--data", str(folder), "--out", str(out)]) == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    head = table[table["headline"] & table["metric"].isin(vcsv.METRICS)]
    assert head[["lo_ms", "hi_ms"]].notna().all().all() and head["covered"].notna().all()
    assert "## Intervals (90%)" in (out / "validation.md").read_text()
    fitted = yaml.safe_load((out / "profiles" / "serving" / "profile.yaml").read_text())
    assert fitted["intervals"]["replicates"] == 4
    # seeds cannot draw recorded requests again: refused in one line, the allowed named
    manifest["intervals"]["sources"] = ["seeds", "cost"]
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    capsys.readouterr()
    assert main(["validate-vllm", "--data", str(folder), "--out", str(tmp_path / "o1")]) != 0
    err = capsys.readouterr().err
    assert "sources" in err and "'cost'" in err and "'serving'" in err, err
    assert "Traceback" not in err
    del manifest["intervals"]
    # a manifest naming a file that is not there is one line naming it
    manifest["fit"] = ["run-4.json"]
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    assert main(["validate-vllm", "--data", str(folder), "--out", str(tmp_path / "o2")]) != 0
    assert "fit: no file or folder 'run-4.json'" in capsys.readouterr().err
    manifest["fit"], manifest["sheduler"] = ["run-3.json"], "vllm"
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    assert main(["validate-vllm", "--data", str(folder), "--out", str(tmp_path / "o3")]) != 0
    assert "sheduler" in capsys.readouterr().err


def test_validate_vllm_on_your_own_runs_of_a_v0_server(tmp_path):
    """A v0 server's results (made-up requests in the real format): the serving path is
    fitted from the records directly (calibrate/serving.py); no recorded-steps replay."""
    import yaml

    folder = tmp_path / "runs"
    folder.mkdir()
    for seed in (0, 1):
        path, _ = _result(folder, n=40, seed=seed)
        path.rename(folder / f"run-{seed}.json")
    manifest = {"model": "llama-2-7b", "gpu": "a100-80gb", "scheduler": "vllm",
                "server_args": "--max-num-seqs 64", "fit": ["run-0.json"]}  # fmt: skip
    (folder / "pagesim-runs.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    assert main(["validate-vllm", "--data", str(folder), "--out", str(out)]) == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    assert set(table["cost_model"]) == {"kernels", "serving"}
    assert set(table.loc[table["run"] == "run-1", "role"]) == {"held_out"}
    profile = yaml.safe_load((out / "profiles" / "serving" / "profile.yaml").read_text())
    assert profile["serving"]["fitted_on"] == "run-0.json"
    assert "| form | chosen |" in (out / "validation.md").read_text()


def test_a_fit_the_kernels_already_price_slower_than_the_server_says_why(tmp_path):
    """Issue 46 item 4: a run pagesim made on the A100 (analytic, no serving path), fitted
    with the RTX 4090's slower kernels: every serving coefficient is 0 (a serving path only
    adds time), and the report says the kernels alone are slower, by how much per term, and
    points to timing the GPU's own steps."""
    path = _v1_run_by_pagesim(tmp_path, n=80, blocks=8000)
    server = "--max-num-seqs 64 --max-num-batched-tokens 2048 --num-gpu-blocks-override 8000"
    fit_dir = tmp_path / "fitted"
    code = main(["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "rtx-4090",
                 "--scheduler", "vllm-v1", "--server-args", server, "--scheduler-alone",
                 "--fit-serving", str(fit_dir), "--out", str(tmp_path / "alone")])  # fmt: skip
    assert code == 0
    report = (fit_dir / "report.md").read_text()
    assert "Every serving coefficient came out 0: the fit cannot help." in report
    decode = re.search(r"decode time given the concurrency ([+-][\d.]+)%", report)
    ttft = re.search(r"TTFT ([+-][\d.]+)%, kernels alone", report)
    assert decode and float(decode.group(1)) > 20 and ttft and float(ttft.group(1)) > 0
    assert "pagesim calibrate steps --models llama-2-7b@tp1` on the rtx-4090" in report


@pytest.mark.parametrize(
    "lens, match",
    [
        ([(100, 1)] * 10, "no request decodes"),
        ([(100, 50)] * 3, "3 decoding request"),
        ([(100, 50)] * 30, "every decoding request is the same"),
    ],
)
def test_a_fit_on_too_little_independent_data_is_refused_naming_why(tmp_path, capsys, lens, match):
    """Issue 50 item 3: one request, identical requests, no decodes wrote a profile."""
    n = len(lens)
    doc = {"backend": "vllm", "request_rate": 1.0, "input_lens": [p for p, _ in lens],
           "output_lens": [o for _, o in lens], "ttfts": [0.05] * n,
           "itls": [[0.02] * (o - 1) for _, o in lens], "start_times": [1.0 * i for i in range(n)],
           "errors": [""] * n}  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    code = main(["replay-vllm", str(path), "--model", "llama-2-7b", "--gpu", "a100-80gb",
                 "--scheduler", "vllm-v1", "--scheduler-alone", "--fit-serving",
                 str(tmp_path / "fit"), "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 2 and match in capsys.readouterr().err
    assert not (tmp_path / "fit" / "profile.yaml").exists()
