"""``pagesim calibrate fit-serving``: fit a profile's serving path on your server's records.

    pagesim calibrate fit-serving --records RUN.csv|RESULT.json [...] --model opt-13b
        --gpu a100-80gb --base a100-80gb-vidur [--padding] [--origin FILE=OWNER/REPO@COMMIT]
        --out DIR

Reads each run's per-request records (DistServe's ``vllm-N-RATE.csv``, or the JSON of
``vllm bench serve --save-result --save-detailed``), fits every serving form on them
(``calibrate/serving.py``), and writes ``DIR/profile.yaml`` (the base profile plus the
serving section, with the records' file names and sha256) and ``DIR/report.md``.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from pagesim.simulator.costmodel.serving import SERVING_FORMS

    fs = sub.add_parser(
        "fit-serving",
        help="fit the serving path (per step, per sequence, per request) on real per-request records",
        description=(
            "Fit a profile's serving path on a real vLLM v0-style server's per-request records, "
            "without simulating: each request's decode time given the concurrency the records "
            "show, and its TTFT given the state at its arrival, against the kernels' time from "
            "--base. Every form is fitted and reported; the one with the lowest two-fold "
            "cross-validated decode-time error is written into DIR/profile.yaml (the base "
            "profile plus a serving section); DIR/report.md lists every form. For a vLLM V1 "
            "server (chunked prefill: steps mix prompt chunks and decodes) fit with `pagesim "
            "replay-vllm RESULT.json --scheduler vllm-v1 --scheduler-alone --fit-serving DIR` "
            "instead."
        ),
        epilog=(
            "example:\n  pagesim calibrate fit-serving --records runs/vllm-150-1.5.csv "
            "--model opt-13b --gpu a100-80gb --base a100-80gb-vidur --padding --out my-server\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fs.add_argument(
        "--records",
        nargs="+",
        required=True,
        metavar="FILE",
        help="per-request records: vllm-N-RATE.csv (DistServe) or a vllm bench serve JSON",
    )
    fs.add_argument("--model", required=True, help="the model served (a pagesim model name)")
    fs.add_argument("--gpu", required=True, help="the GPU it ran on (a pagesim GPU name)")
    fs.add_argument("--tensor-parallel", type=int, default=1, help="TP degree (default 1)")
    fs.add_argument(
        "--base",
        default=None,
        help="kernel profile: a shipped name or a profile.yaml (default: analytic)",
    )
    fs.add_argument("--block-size", type=int, default=16, help="KV block size (default 16)")
    fs.add_argument(
        "--padding",
        action="store_true",
        help="the server padded prefill batches to their longest prompt (vLLM v0.2)",
    )
    fs.add_argument(
        "--forms",
        nargs="+",
        default=list(SERVING_FORMS),
        choices=list(SERVING_FORMS),
        help="forms to fit (default: all)",
    )
    fs.add_argument(
        "--margin",
        type=float,
        default=0.005,
        help="how much lower a form with more coefficients must be (default 0.005)",
    )
    fs.add_argument(
        "--server",
        default="a vLLM server",
        help="what to call the server in the profile (e.g. 'vLLM 0.4.2 on my A100')",
    )
    fs.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="FILE=OWNER/REPO@COMMIT",
        help="where a records file came from, recorded in the profile",
    )
    fs.add_argument("--out", required=True, help="output folder (profile.yaml, report.md)")
    fs.set_defaults(func=_fit_serving)


def read_records(path):
    """A records file by its format: ``.csv`` DistServe's, ``.json`` vllm bench serve's."""
    from pathlib import Path

    from pagesim.errors import DataError
    from pagesim.records.bench_json import read_vllm_bench_json
    from pagesim.records.distserve_csv import read_distserve_csv

    path = Path(path)
    if not path.is_file():
        raise DataError(f"--records {path}: no such file")
    if path.suffix == ".json":
        return read_vllm_bench_json(path)
    if path.suffix == ".csv":
        return read_distserve_csv(path, "records")
    raise DataError(
        f"--records {path}: expected a .csv (vllm-N-RATE.csv) or a .json (vllm bench serve)"
    )


def command_line(
    records: list[str],
    *,
    model: str,
    gpu: str,
    base: str | None,
    tensor_parallel: int = 1,
    padding: bool = False,
    origins: list[str] = (),
    server: str = "a vLLM server",
) -> str:
    """The command a profile records (file names, not paths)."""
    import shlex
    from pathlib import PurePath

    argv = ["--records", *records, "--model", model, "--gpu", gpu]
    if tensor_parallel != 1:
        argv += ["--tensor-parallel", str(tensor_parallel)]
    if base:
        argv += ["--base", PurePath(base).name if base.endswith((".yaml", ".yml")) else base]
    if padding:
        argv.append("--padding")
    argv += [f"--origin={o}" for o in origins]
    if server != "a vLLM server":
        argv += ["--server", server]
    return "pagesim calibrate fit-serving " + shlex.join(argv) + " --out OUT"


def _zero_fit(fit, runs, kernels, args: argparse.Namespace) -> list[str]:
    """The report's paragraph when every coefficient came out 0 (calibrate/serving_checks.py)."""
    import numpy as np
    import pandas as pd

    from pagesim.calibrate.serving import Coefficients, decode_time_errors
    from pagesim.calibrate.serving_checks import all_zero, zero_fit_lines

    c = fit.chosen.coefs
    if not all_zero({**c.step, "prefill": c.s_per_prefill_token, "delay": c.frontend_delay_s}):
        return []
    d = pd.concat(
        [decode_time_errors(r, kernels, Coefficients({}), padding=fit.padding) for r in runs]
    )
    err = {
        k: np.nanmean(d[f"{k}_predicted_s"]) / np.nanmean(d[f"{k}_measured_s"]) - 1
        for k in ("decode", "ttft")
    }
    return zero_fit_lines(
        decode_error=err["decode"], ttft_error=err["ttft"], gpu=args.gpu, model=args.model
    )


def _fit_serving(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from pagesim.calibrate.external import parse_origins
    from pagesim.calibrate.serving import (
        fit_serving,
        report_lines,
        serving_profile,
    )
    from pagesim.calibrate.serving_checks import check_fit_records
    from pagesim.files import atomic_write_text
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    runs = [read_records(p) for p in args.records]
    for run in runs:
        check_fit_records(run.name, run.table["prompt_len"], run.table["output_len"])
    paths = [Path(p) for p in args.records]
    origins = parse_origins(args.origin, paths) if args.origin else {}
    kernels = cost_model_for(
        args.base,
        get_model(args.model),
        get_gpu(args.gpu),
        tensor_parallel=args.tensor_parallel,
        with_serving=False,
    )
    print(
        f"calibrate fit-serving: {len(runs)} runs, {sum(r.num_requests for r in runs)} requests",
        file=sys.stderr,
    )
    fit = fit_serving(
        runs,
        kernels,
        forms=args.forms,
        block_size=args.block_size,
        padding=args.padding,
        selection_margin=args.margin,
    )
    fit.sources = tuple(
        {
            **s,
            "repository": origins.get(s["file"], ("", ""))[0],
            "commit": origins.get(s["file"], ("", ""))[1],
        }
        for s in fit.sources
    )
    command = command_line(
        [p.name for p in paths],
        model=args.model,
        gpu=args.gpu,
        base=args.base,
        tensor_parallel=args.tensor_parallel,
        padding=args.padding,
        origins=args.origin,
        server=args.server,
    )
    profile = serving_profile(fit, args.base, args.gpu, command=command, server=args.server)
    out = Path(args.out)
    path = profile.save(out / "profile.yaml")
    lines = report_lines(fit, runs, kernels) + _zero_fit(fit, runs, kernels, args)
    report = atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    s = profile.serving
    print(f"chosen form: {s.form} ({s.describe()})")
    print(f"profile: {path}")
    print(f"report: {report}")
    print(f"use it with `hardware.profile: {path}` in an experiment YAML")
    return 0
