"""``pagesim calibrate``: time the kernels on this GPU and fit a profile; ``report`` rebuilds.

pagesim calibrate --model opt-13b --out DIR [--quick] [--seed N]
pagesim calibrate report DIR
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="time paged-attention kernels on this GPU and fit a cost-model profile",
        description=(
            "Time the KV-cache kernels (paged and contiguous decode attention, prefill, GEMMs, "
            "KV write, block copy, swap) on the current GPU with CuPy, fit the cost model and "
            "write profile.yaml, report.md, plots and measurements.csv. "
            "`pagesim calibrate report DIR` rebuilds the report from DIR's measurements (no GPU)."
        ),
    )
    parser.add_argument(
        "--model", default="opt-13b", help="model whose layer shapes are timed (default opt-13b)"
    )
    parser.add_argument(
        "--out", default=None, help="output folder (default: calibrate/profiles/<gpu>/)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small grid and fewer repeats (minutes)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the grid, inputs and hold-out split"
    )
    parser.set_defaults(func=_run)
    sub = parser.add_subparsers(dest="calibrate_command", metavar="{report}")
    report = sub.add_parser("report", help="rebuild report.md and plots from a calibration folder")
    report.add_argument("dir", help="a folder written by `pagesim calibrate`")
    report.set_defaults(func=_report)


def _run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    import numpy as np

    from pagesim.calibrate.cupy_backend import CupyBackend
    from pagesim.calibrate.models import model_dims
    from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR, calibrate, gpu_dir_name

    dims = model_dims(args.model)
    rng = np.random.default_rng(args.seed)
    backend = CupyBackend(rng)
    name = backend.device_info().name
    out = Path(args.out) if args.out else DEFAULT_PROFILES_DIR / gpu_dir_name(name)
    command = f"pagesim calibrate --model {args.model} --out {out}{' --quick' if args.quick else ''} --seed {args.seed}"

    def progress(done: int, total: int) -> None:
        if done == total or done % max(total // 20, 1) == 0:
            print(f"calibrate: {done}/{total} shapes timed", file=sys.stderr, flush=True)

    print(f"calibrate: {name}, model {args.model}, writing to {out}", file=sys.stderr)
    outputs = calibrate(
        dims, backend, out, rng, quick=args.quick, command=command, on_progress=progress
    )
    for label, path in (
        ("profile", outputs.profile),
        ("report", outputs.report),
        ("plots", outputs.plot),
        ("measurements", outputs.measurements),
        ("metadata", outputs.meta),
    ):
        print(f"{label}: {path}")
    print(f"use it with `hardware.profile: {outputs.profile}` in an experiment YAML")
    return 0


def _report(args: argparse.Namespace) -> int:
    from pagesim.calibrate.pipeline import rebuild_report

    report, plot = rebuild_report(args.dir)
    print(f"report: {report}")
    print(f"plots: {plot}")
    return 0
