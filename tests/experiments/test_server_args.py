"""A vLLM server's command line pasted as it is (experiments/validation/server_args.py,
server_desc.py): the flags pagesim models applied, the rest listed once as not modelled,
typos of applied flags refused, the scheduler following the release, said in one line."""

from __future__ import annotations

import json

import pytest

from pagesim.cli import main
from pagesim.errors import ConfigError
from pagesim.experiments.validation.server_args import parse_server_args
from pagesim.experiments.validation.server_desc import describe_server

PRODUCTION = (
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --dtype bfloat16 --kv-cache-dtype fp8 "
    "-tp 2 --max-num-seqs 128 --max-num-batched-tokens 8k --enable-chunked-prefill "
    "--no-enable-prefix-caching --async-scheduling --block-size 32 "
    "--gpu-memory-utilization=0.92 --max-model-len 32K --num-gpu-blocks-override 9000 "
    "--swap-space 8 --enforce-eager --trust-remote-code --served-model-name chat "
    "--host 0.0.0.0 --port 8000 --quantization fp8 --seed -1 "
    "--compilation-config '{\"level\": 3}' --disable-log-requests"
)


def test_a_production_command_line_is_applied_flag_by_flag():
    args = parse_server_args(PRODUCTION, v1=True)
    assert args.settings == {
        "hardware.kv_cache_dtype": "fp8",
        "hardware.tensor_parallel": 2,
        "scheduler.max_num_seqs": 128,
        "scheduler.max_num_batched_tokens": 8000,
        "scheduler.chunked_prefill": True,
        "allocator.prefix_caching": False,
        "scheduler.async_scheduling": True,
        "allocator.block_size": 32,
        "hardware.gpu_memory_utilization": 0.92,
        "max_model_len": 32768,
        "hardware.kv_blocks": 9000,
        "server.enforce_eager": True,
    }
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.not_modelled == (
        "--trust-remote-code",
        "--served-model-name chat",
        "--host 0.0.0.0",
        "--port 8000",
        "--quantization fp8",
        "--seed -1",
        '--compilation-config {"level": 3}',
        "--disable-log-requests",
    )
    line = args.not_modelled_line()
    assert line.count("`--port 8000`") == 1
    assert "of these `--quantization fp8` change the server's speed or memory" in line
    # V1 has no swap: the flag changes nothing there, and says so; 16-bit dtype is pagesim's
    assert any("--swap-space 8" in note and "no swap" in note for note in args.notes)
    assert any("--dtype bfloat16" in note for note in args.notes)
    assert parse_server_args("--swap-space 8", v1=False).settings == {
        "allocator.swap_space_gib": 8.0
    }


@pytest.mark.parametrize(
    "text, match",
    [
        ("--max-num-seq 8", "did you mean '--max-num-seqs'"),
        ("--gpu-memory-utilisation 0.9", "did you mean '--gpu-memory-utilization'"),
        ("--enable-prefix-cache", "did you mean '--enable-prefix-caching'"),
        ("--dtype float32", "pagesim prices 16-bit weights"),
        ("--max-num-seqs", "needs a value"),
        ("--max-model-len 1.5K", "not a valid value"),
        ("--enforce-eager maybe", "takes no value or true/false"),
        ("stray --max-num-seqs 8", "'stray' is not a flag"),
    ],
)
def test_what_cannot_be_a_server_flag_is_refused_in_one_line(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_server_args(text, v1=True)


@pytest.mark.parametrize(
    "flag",
    [
        "--max-num-partial-prefills 2",
        "--max-logprobs 5",
        "--max-seq-len-to-capture 8192",
        "--enable-prompt-embeds",
        "--kv-cache-memory 8G",
        "--max-cudagraph-capture-size 256",
        "--enable-expert-parallel",
        "--tokenizer-mode auto",
    ],
)
def test_real_vllm_flags_near_an_applied_one_are_not_taken_for_typos(flag):
    assert parse_server_args(flag, v1=True).not_modelled == (flag,)


def test_the_scheduler_follows_the_release_and_says_why():
    named = describe_server(model="llama-2-7b", gpu="H100", vllm_version="0.19.0")
    assert named.scheduler == "vllm-v1" and named.gpu == "h100-sxm"
    assert named.settings["server.vllm_version"] == "0.19.0"
    assert "`vllm-v1` (vLLM's V1 engine) with vLLM 0.19.0's defaults, because `--vllm-version" in (
        named.scheduler_line()
    )
    from_result = describe_server(model="llama-2-7b", gpu="h100", raw={"vllm_version": "0.23.0"})
    assert from_result.version == "0.23.0"
    assert "the result's `vllm_version` (0.23.0)" in from_result.scheduler_line()
    plain = describe_server(model="llama-2-7b", gpu="a100-80gb")
    assert plain.scheduler == "vllm" and "pagesim's default" in plain.scheduler_line()
    assert "--vllm-version X" in plain.scheduler_line()
    with pytest.raises(ConfigError, match="--scheduler vllm: `--vllm-version 0.19.0` names"):
        describe_server(model="llama-2-7b", gpu="h100", scheduler="vllm", vllm_version="0.19.0")
    with pytest.raises(ConfigError, match="older than 0.8.0"):
        describe_server(model="llama-2-7b", gpu="h100", vllm_version="0.4.2")


def test_enforce_eager_is_the_releases_rule_and_changes_nothing_without_one():
    with_release = describe_server(
        model="llama-2-7b", gpu="h100", vllm_version="0.19.0", server_args="--enforce-eager"
    )
    assert with_release.settings["server.enforce_eager"] is True
    without = describe_server(model="llama-2-7b", gpu="h100", server_args="--enforce-eager")
    assert "server.enforce_eager" not in without.settings
    assert any("no CUDA graphs to turn off" in line for line in without.page_lines())


def test_the_model_named_on_the_command_line_or_in_the_result_is_used_or_refused():
    assert describe_server(model=None, gpu="h100", server_args="vllm serve llama-2-7b").model == (
        "llama-2-7b"
    )
    assert describe_server(model=None, gpu="h100", raw={"model_id": "opt-13b"}).model == "opt-13b"
    # a Hugging Face id pagesim ships is resolved; an unknown one is refused naming it
    hf = describe_server(model=None, gpu="h100", raw={"model_id": "meta-llama/Llama-2-7b-hf"})
    assert hf.model == "llama-2-7b"
    with pytest.raises(ConfigError, match="the result's model_id: .*unknown model.*pass --model"):
        describe_server(model=None, gpu="h100", raw={"model_id": "acme/Unheard-Of-9B"})


def _result(tmp_path):
    n = 24
    doc = {
        "backend": "vllm",
        "model_id": "meta-llama/Llama-2-7b-hf",
        "request_rate": 2.0,
        "input_lens": [100 + 17 * i for i in range(n)],
        "output_lens": [20 + i for i in range(n)],
        "ttfts": [0.05] * n,
        "itls": [[0.025] * (19 + i) for i in range(n)],
        "start_times": [0.5 * i for i in range(n)],
        "errors": [""] * n,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


def test_replay_vllm_takes_the_command_line_and_a_gpu_as_nvidia_smi_prints_it(tmp_path):
    out = tmp_path / "out"
    code = main(
        ["replay-vllm", str(_result(tmp_path)), "--model", "llama-2-7b",
         "--gpu", "NVIDIA H100 80GB HBM3", "--vllm-version", "0.19.0",
         "--server-args", "vllm serve meta-llama/Llama-2-7b-hf --dtype half "
         "--kv-cache-dtype fp8 --max-num-seqs 64 --trust-remote-code --port 8000",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    page = (out / "replay.md").read_text()
    assert "replayed by pagesim as `llama-2-7b` on `h100-sxm`, scheduler `vllm-v1`" in page
    assert "`hardware.kv_cache_dtype: fp8`" in page and "`server.vllm_version: 0.19.0`" in page
    assert "Scheduler: `vllm-v1` (vLLM's V1 engine) with vLLM 0.19.0's defaults" in page
    assert (
        page.count("Not modelled (given, ignored by pagesim): `--trust-remote-code`, `--port 8000`")
        == 1
    )
    assert "Async scheduling: off" not in page  # the release's default, said by the line above


def test_the_page_names_the_model_simulated_not_the_flag(tmp_path):
    """Issue 50 item 4: --model one thing, --set hardware.model another: the page names the
    model that ran."""
    out = tmp_path / "out"
    code = main(
        ["replay-vllm", str(_result(tmp_path)), "--model", "llama-2-7b", "--gpu", "a100-80gb",
         "--set", "hardware.model=opt-13b", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    page = (out / "replay.md").read_text()
    assert "replayed by pagesim as `opt-13b`" in page and "pagesim's default" in page


@pytest.mark.parametrize(
    "flags", ["--max-model-len 10", "--num-gpu-blocks-override 1", "--max-num-batched-tokens 1"]
)
def test_flags_that_leave_recorded_requests_unserved_are_refused_before_writing(tmp_path, flags):
    """Issue 50 item 2: these raised a TypeError and left a partial folder."""
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="recorded requests were not served in the replay"):
        from pagesim.experiments.validation.bench import replay_vllm

        replay_vllm(_result(tmp_path), out, model="llama-2-7b", gpu="a100-80gb", server_args=flags)
    assert not out.exists()
