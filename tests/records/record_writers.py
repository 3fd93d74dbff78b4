"""Writers of tiny made-up runs in each real format (the content is invented; the layouts
are the formats' own), for the readers' tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BLIS_HEADER = """trace_version: 3
time_unit: us
created_at: "2030-01-01T00:00:00Z"
mode: real
warm_up_requests: 0
workload_seed: 7
workload_spec: workload.yaml
server:
    type: vllm
    model: Org/Model-1B
network: {}
"""
BLIS_COLUMNS = (
    "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,"
    "streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,"
    "reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,"
    "first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason,"
    "x_request_id"
)
T0_US = 1_900_000_000_000_000  # a Unix time in µs


def blis_row(i, send_us, first_us, last_us, *, server_in=100, out=8, chunks=10, status="ok",
             input_tokens=96, prefix=0, error=""):  # fmt: skip
    return (
        f"{i},c,t,,,0,,{prefix},true,{input_tokens},{out},0,0,0,0,0,,0,{server_in},"
        f"{i * 1000},{send_us},{first_us},{last_us},{chunks},{status},{error},length,id{i}"
    )


def default_blis_rows():
    """Three served requests, sent 0.5 s apart, out of file order."""
    return [
        blis_row(1, T0_US + 500_000, T0_US + 560_000, T0_US + 700_000, server_in=120, out=5),
        blis_row(0, T0_US, T0_US + 40_000, T0_US + 240_000, server_in=100, out=8),
        blis_row(2, T0_US + 1_000_000, T0_US + 1_050_000, T0_US + 1_250_000, server_in=80, out=3),
    ]


def write_blis(folder: Path, rows=None, *, header=BLIS_HEADER, gz=False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.yaml").write_text(header)
    text = "\n".join([BLIS_COLUMNS, *(rows if rows is not None else default_blis_rows())]) + "\n"
    if gz:
        (folder / "trace.csv.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / "trace.csv").write_text(text)
    return folder


LMBENCH_COLUMNS = "prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,launch_time,finish_time"
L0 = 1_800_000_000.0  # a Unix time in s


def lmbench_row(prompt, gen, ttft, gen_time, user, question, launch, *, finish=None):
    finish = L0 + launch + ttft + gen_time if finish is None else finish
    return f"{prompt},{gen},{ttft},{gen_time},{user},{question},{L0 + launch},{finish}"


def default_lmbench_rows():
    """Two users: user 5 asks three rounds (each prompt = history + a 29-token question),
    user 6 one; rows out of order."""
    return [
        lmbench_row(1100, 20, 0.1, 0.5, 5, 1, 0.0),
        lmbench_row(1100, 20, 0.1, 0.5, 6, 1, 0.3),
        lmbench_row(1178, 20, 0.1, 0.5, 5, 3, 2.0),  # 1149 + 20 + 9
        lmbench_row(1149, 20, 0.1, 0.5, 5, 2, 1.0),  # 1100 + 20 + 29
    ]


def write_lmbench(path: Path, rows=None, *, columns=LMBENCH_COLUMNS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join([columns, *(rows if rows is not None else default_lmbench_rows())]) + "\n"
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def exp_request(prompt, output, issue, first, complete):
    tpot = (complete - first) * 1e3 / (output - 1) if output > 1 else 0
    return {
        "prompt_len": prompt, "output_len": output, "issue_time": issue,
        "first_token_time": first, "complete_time": complete,
        "ttft_ms": (first - issue) * 1e3, "tpot_ms": tpot, "latency_ms": (complete - issue) * 1e3,
    }  # fmt: skip


def write_exp(path: Path, requests=None, *, summary=None, first_line=None) -> Path:
    requests = requests if requests is not None else [
        exp_request(50, 4, 1000.9, 1001.0, 1001.3),
        exp_request(20, 1, 1000.0, 1000.05, 1000.05),
        exp_request(30, 3, 1000.5, 1000.6, 1000.8),
    ]  # fmt: skip
    summary = summary if summary is not None else {"num_requests": len(requests)}
    block = "{\n" + "".join(f"\t{k}: {v}\n" for k, v in summary.items()) + "}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((first_line if first_line is not None else repr(requests)) + "\n" + block)
    return path


def bench_doc(**over):
    doc = {
        "backend": "vllm", "model_id": "org/model", "request_rate": 4.0,
        "input_lens": [12, 30, 7], "output_lens": [3, 1, 4], "ttfts": [0.05, 0.08, 0.06],
        "itls": [[0.02, 0.03], [], [0.02, 0.02, 0.025]],
        "start_times": [1000.0, 1000.25, 1000.5], "errors": ["", "", ""],
    }  # fmt: skip
    doc.update(over)
    return doc


def write_bench(path: Path, **over) -> Path:
    path.write_text(json.dumps(bench_doc(**over)))
    return path
