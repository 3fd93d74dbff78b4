"""``pagesim calibrate``: time the kernels on this GPU and fit a profile; ``report`` rebuilds.

pagesim calibrate --model opt-13b --out DIR [--quick] [--seed N]
pagesim calibrate report DIR
pagesim calibrate import --gpu a100-80gb --attention F --mlp F [F ...] --cpu-overheads F
                         --origin FILE=OWNER/REPO@COMMIT ... --out DIR
pagesim calibrate import --gpu a100-80gb --splitwise perf_model.csv
                         --origin perf_model.csv=OWNER/REPO@COMMIT --out DIR
pagesim calibrate fit-serving --records RUN.csv|RESULT.json ... --model M --gpu G
                         --base PROFILE [--padding] --out DIR     (serving_cli.py)
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
    sub = parser.add_subparsers(dest="calibrate_command", metavar="{report,import,fit-serving}")
    report = sub.add_parser("report", help="rebuild report.md and plots from a calibration folder")
    report.add_argument("dir", help="a folder written by `pagesim calibrate`")
    report.set_defaults(func=_report)
    _register_import(sub)
    from pagesim.calibrate.serving_cli import register as register_fit_serving

    register_fit_serving(sub)


def _register_import(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser(
        "import",
        help="fit a profile on timings measured by others (Vidur's operators, Splitwise's iterations)",
        description=(
            "Read Vidur's operator tables (attention, the GEMMs of a layer, per-step CPU "
            "overheads), turn them into calibrate's measurement schema and run the same fit "
            "and report as a measured run (20%% of each term's points held out). The profile "
            "is labelled kind 'external' with every table's file, repository, commit and "
            "sha256; no table is copied into DIR. Attention tables from another GPU "
            "(--attention-gpu) are fitted there and projected, and the profile says so. "
            "--splitwise instead reads Splitwise's whole-iteration times (perf_model.csv) and "
            "fits an iteration-level profile (terms prefill_iteration and decode_iteration over "
            "a whole step's features), labelled the same way."
        ),
    )
    imp.add_argument("--gpu", required=True, help="GPU spec the GEMM and CPU tables describe")
    imp.add_argument("--attention", nargs="+", default=[], metavar="CSV", help="attention tables")
    imp.add_argument("--mlp", nargs="+", default=[], metavar="CSV", help="MLP (GEMM) tables")
    imp.add_argument(
        "--cpu-overheads", nargs="+", default=[], metavar="CSV", help="CPU-overhead tables"
    )
    imp.add_argument(
        "--splitwise",
        default=None,
        metavar="CSV",
        help="Splitwise's perf_model.csv: whole-iteration times (not with the Vidur tables)",
    )
    imp.add_argument(
        "--attention-gpu",
        default=None,
        help="GPU spec the attention tables were measured on, if not --gpu (then projected)",
    )
    imp.add_argument(
        "--tensor-parallel",
        type=int,
        default=1,
        help="which rows of the CPU-overhead table to fit (its tensor_parallel_degree; default 1)",
    )
    imp.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="FILE=OWNER/REPO@COMMIT",
        help="where a table came from (once per table), recorded in the profile",
    )
    imp.add_argument("--out", required=True, help="output folder (profile.yaml, report.md, plot)")
    imp.add_argument("--seed", type=int, default=0, help="seed of the hold-out split")
    imp.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    import shlex
    import sys
    from pathlib import Path

    from pagesim.calibrate.external import Source, VidurTables, import_vidur, parse_origins

    groups = {k: [Path(p) for p in getattr(args, k)] for k in ("attention", "mlp", "cpu_overheads")}
    if args.splitwise is not None:
        return _import_splitwise(args, groups)
    origins = parse_origins(args.origin, [p for paths in groups.values() for p in paths])

    def sources(paths: list[Path]) -> tuple[Source, ...]:
        return tuple(Source(p, *origins[p.name]) for p in paths)

    tables = VidurTables(
        gpu=args.gpu,
        attention=sources(groups["attention"]),
        mlp=sources(groups["mlp"]),
        cpu_overheads=sources(groups["cpu_overheads"]),
        attention_gpu=args.attention_gpu,
        tensor_parallel=args.tensor_parallel,
    )
    argv = ["--gpu", args.gpu]
    for flag, key in (
        ("--attention", "attention"),
        ("--mlp", "mlp"),
        ("--cpu-overheads", "cpu_overheads"),
    ):
        if groups[key]:
            argv += [flag, *(p.name for p in groups[key])]
    if args.attention_gpu:
        argv += ["--attention-gpu", args.attention_gpu]
    argv += [f"--origin={o}" for o in args.origin]
    command = "pagesim calibrate import " + shlex.join(argv) + f" --seed {args.seed} --out OUT"
    print(f"calibrate import: {len(tables.sources)} tables, writing to {args.out}", file=sys.stderr)
    profile, report = import_vidur(tables, Path(args.out), seed=args.seed, command=command)
    print(f"profile: {profile}")
    print(f"report: {report}")
    return 0


def _import_splitwise(args: argparse.Namespace, groups: dict) -> int:
    import shlex
    import sys
    from pathlib import Path

    from pagesim.calibrate.external import Source, import_splitwise, parse_origins
    from pagesim.errors import ConfigError

    others = [flag for flag, paths in groups.items() if paths]
    if others or args.attention_gpu:
        raise ConfigError(
            "calibrate import: --splitwise fits whole iterations and takes no operator tables; "
            f"drop --{(others or ['attention_gpu'])[0].replace('_', '-')}"
        )
    path = Path(args.splitwise)
    origin = parse_origins(args.origin, [path])[path.name]
    argv = ["--gpu", args.gpu, "--splitwise", path.name, *(f"--origin={o}" for o in args.origin)]
    command = "pagesim calibrate import " + shlex.join(argv) + f" --seed {args.seed} --out OUT"
    print(f"calibrate import: Splitwise iterations, writing to {args.out}", file=sys.stderr)
    profile, report = import_splitwise(
        Source(path, *origin), args.gpu, Path(args.out), seed=args.seed, command=command
    )
    print(f"profile: {profile}")
    print(f"report: {report}")
    return 0


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
