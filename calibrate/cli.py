"""``pagesim calibrate``: time the kernels on this GPU and fit a profile; ``report`` rebuilds.

pagesim calibrate --model opt-13b --out DIR [--quick] [--seed N] [--budget-s S] [--dry-run]
pagesim calibrate report DIR
pagesim calibrate import --gpu a100-80gb --attention F --mlp F [F ...] --cpu-overheads F
                         --origin FILE=OWNER/REPO@COMMIT ... --out DIR
pagesim calibrate import --gpu a100-80gb --splitwise perf_model.csv
                         --origin perf_model.csv=OWNER/REPO@COMMIT --out DIR
pagesim calibrate fit-serving --records RUN.csv|RESULT.json ... --model M --gpu G
                         --base PROFILE [--padding] --out DIR     (serving_cli.py)
pagesim calibrate import --gpu rtx-4090 --llmservingsim BUNDLE [--tensor-parallel N]
                         --origin OWNER/REPO@COMMIT --out DIR
"""

from __future__ import annotations

import argparse
import sys


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
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        metavar="S",
        help="time the shapes most useful first and stop after S seconds of timing; "
        "still fit and write everything (default: time every shape)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="every step but the timing, without a GPU: the kernel check on the CPU (host "
        "shim, needs g++) and times from a synthetic profile (a clock that only the "
        "synthetic device advances, so a budget is spent as on a GPU); labelled synthetic",
    )
    parser.add_argument(
        "--host-build-dir",
        default=None,
        metavar="DIR",
        help="--dry-run: where the kernels are compiled for the CPU (default: a folder in "
        "the system's temporary directory, reused while the sources are unchanged)",
    )
    parser.set_defaults(func=_run)
    sub = parser.add_subparsers(dest="calibrate_command", metavar="{report,import,fit-serving}")
    report = sub.add_parser("report", help="rebuild report.md and plots from a calibration folder")
    report.add_argument("dir", help="a folder written by `pagesim calibrate`")
    report.add_argument(
        "--against",
        metavar="DIR2",
        help="also print how DIR's profile predicts DIR2's measurements (another run, "
        "another seed: every point of it held out), term by term, and write "
        "DIR/against_<DIR2 name>.md; on another GPU, also projected onto DIR2's GPU spec",
    )
    report.set_defaults(func=_report)
    _register_import(sub)
    _register_link(sub)
    _register_iterations(sub)
    _register_steps(sub)
    from pagesim.calibrate.serving_cli import register as register_fit_serving

    register_fit_serving(sub)


def _register_link(sub: argparse._SubParsersAction) -> None:
    link = sub.add_parser(
        "link",
        help="fit hardware.link (the TP all-reduce's bus bandwidth and latency) on an "
        "nccl-tests all_reduce_perf log",
        description=(
            "Read the output of nccl-tests' all_reduce_perf run on your server's GPUs (e.g. "
            "`all_reduce_perf -b 8K -e 256M -f 2 -g 2 > ar.log`), fit pagesim's all-reduce "
            "(latency + ring factor x bytes / bus bandwidth) on its out-of-place times and "
            "print the hardware.link block to paste, with each size's error. No GPU needed."
        ),
    )
    link.add_argument("log", help="the saved output of all_reduce_perf")
    # the defaults live in calibrate/nccl_link.py, which --help must not import (numpy)
    link.add_argument(
        "--min-bytes", type=int, default=None, help="smallest size fitted (default 8 KiB)"
    )
    link.add_argument(
        "--max-bytes", type=int, default=None, help="largest size fitted (default 256 MiB)"
    )
    link.add_argument("--source", default=None, help="what the block's source says")
    link.set_defaults(func=_link)


def _link(args: argparse.Namespace) -> int:
    from pagesim.calibrate.nccl_link import fit_link

    sizes = {"min_bytes": args.min_bytes, "max_bytes": args.max_bytes}
    fit = fit_link(
        args.log, source=args.source, **{k: v for k, v in sizes.items() if v is not None}
    )
    print(fit.yaml_block())
    print("\n".join(fit.report_lines()))
    return 0


def _register_steps(sub: argparse._SubParsersAction) -> None:
    steps = sub.add_parser(
        "steps",
        help="time whole model steps on this GPU with PyTorch (CUDA graphs), for `iterations`",
        description=(
            "Build one GPU's shard of each model (random fp16 weights) and time whole forward "
            "passes at decode and prefill step shapes, each captured as a CUDA graph and "
            "replayed between CUDA events (FlashAttention through SDPA; no host time). Writes "
            "the table `pagesim calibrate iterations` fits. Needs PyTorch and a CUDA GPU "
            "(--device cpu checks the code without one)."
        ),
    )
    steps_arguments(steps)
    steps.set_defaults(func=_steps)


def steps_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pagesim calibrate steps`` (and of benchmarks/gpu_iterations.py);
    declared here, without importing the timing code, so that ``pagesim --help`` stays quick."""
    from pathlib import Path

    parser.add_argument("--out", type=Path, default=Path("iterations.csv"), help="the CSV to write")
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        help="NAME or NAME@tpN (one GPU's shard of a TP-N group), Llama architecture; default: "
        "calibrate.iterations.DEFAULT_MODELS, the H100 validation's dense models",
    )
    parser.add_argument("--budget-s", type=float, default=300.0, help="seconds over all models")
    parser.add_argument("--repeats", type=int, default=20, help="timed replays per shape, at most")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="a diagnostic: a few shapes, each timed with the layer as written and again "
        "with it through torch.compile (fused element-wise kernels, as vLLM V1 compiles "
        "its models); rows 'eager' and 'compiled' in the attention column",
    )
    parser.add_argument(
        "--full-grid", action="store_true", help="with --compile: every planned shape"
    )


def _steps(args: argparse.Namespace) -> int:
    from pagesim.calibrate.torch_steps import run

    return run(args)


def _register_iterations(sub: argparse._SubParsersAction) -> None:
    it = sub.add_parser(
        "iterations",
        help="fit an iteration-level profile on whole steps timed by benchmarks/gpu_iterations.py",
        description=(
            "Read the step table benchmarks/gpu_iterations.py wrote on a GPU (whole forward "
            "passes of a model, CUDA-graph replays) and fit the iteration-level terms "
            "prefill_iteration and decode_iteration on its TP-1 rows (20%% held out, seeded), "
            "as for Splitwise's iterations; with --model, on that model's rows at whatever TP "
            "they were timed (a shard's steps hold no all-reduce: the profile says so and the "
            "simulator adds them). The report sets every row beside the shipped H100 profiles' "
            "price. "
            "The profile is labelled kind 'measured'."
        ),
    )
    it.add_argument(
        "table",
        nargs="+",
        help="the CSV(s) benchmarks/gpu_iterations.py wrote (several: --per-layer)",
    )
    it.add_argument("--gpu", required=True, help="GPU spec the table was timed on, e.g. h100-sxm")
    it.add_argument("--gpu-name", default=None, help="the device's own name, for the profile")
    it.add_argument("--out", required=True, help="folder for profile.yaml and report.md")
    it.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    it.add_argument(
        "--model",
        default=None,
        help="fit this model's steps at whatever TP they were timed (a shard's: the simulator "
        "adds the all-reduces); default: every TP-1 step",
    )
    it.add_argument(
        "--forward",
        choices=["eager", "compiled"],
        default=None,
        help="of a table `calibrate steps --compile` wrote (each shape timed both ways): "
        "which forward's rows to fit",
    )
    it.add_argument(
        "--per-layer",
        action="store_true",
        help="pool every model's steps of the tables (each at its TP) and fit them per layer: "
        "one profile for any dense model on this GPU (calibrate/per_layer_steps.py)",
    )
    it.set_defaults(func=_iterations)


def _iterations(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from pagesim.calibrate.iterations import fit_iterations

    if args.per_layer:
        return _per_layer(args)
    if len(args.table) > 1:
        print(
            "calibrate iterations: several tables are pooled with --per-layer only; "
            f"got {len(args.table)}",
            file=sys.stderr,
        )
        return 2
    path = Path(args.table[0])
    argv = ["iterations", path.name, "--gpu", args.gpu]
    if args.gpu_name:
        argv += ["--gpu-name", args.gpu_name]
    if args.model:
        argv += ["--model", args.model]
    if args.forward:
        argv += ["--forward", args.forward]
    command = "pagesim calibrate " + shlex.join(argv) + f" --seed {args.seed} --out OUT"
    profile, report = fit_iterations(
        path, args.gpu, Path(args.out), seed=args.seed, command=command, gpu_name=args.gpu_name,
        model=args.model, forward=args.forward,
    )  # fmt: skip
    print(f"profile: {profile}")
    print(f"report: {report}")
    return 0


def _per_layer(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from pagesim.calibrate.per_layer_steps import fit_per_layer

    if args.model:
        print("calibrate iterations: --per-layer pools every model; drop --model", file=sys.stderr)
        return 2
    paths = [Path(t) for t in args.table]
    argv = ["iterations", *(f"{p.parent.name}/{p.name}" for p in paths), "--per-layer"]
    argv += ["--gpu", args.gpu] + (["--gpu-name", args.gpu_name] if args.gpu_name else [])
    argv += ["--forward", args.forward] if args.forward else []
    command = "pagesim calibrate " + shlex.join(argv) + f" --seed {args.seed} --out OUT"
    profile, report = fit_per_layer(
        paths, args.gpu, Path(args.out), seed=args.seed, command=command,
        gpu_name=args.gpu_name, forward=args.forward,
    )  # fmt: skip
    print(f"profile: {profile}")
    print(f"report: {report}")
    return 0


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
            "a whole step's features), labelled the same way. --llmservingsim reads one of "
            "LLMServingSim's layer-profile bundles (vLLM's own kernels: attention, the dense "
            "layers, LM head and sampler of one layer at --tensor-parallel) and fits the "
            "operator terms on them."
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
        "--llmservingsim",
        default=None,
        metavar="BUNDLE",
        help="an LLMServingSim profile folder, profiler/perf/<HARDWARE>/<org>/<model>/<variant>/ "
        "(meta.yaml, tp<N>/); not with the other tables",
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
        help="which rows of the CPU-overhead table to fit (its tensor_parallel_degree), or "
        "which tp<N>/ folder of an LLMServingSim bundle (default 1)",
    )
    imp.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="FILE=OWNER/REPO@COMMIT",
        help="where a table came from (once per table), recorded in the profile; with "
        "--llmservingsim once, OWNER/REPO@COMMIT, for the whole bundle",
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
    if args.splitwise is not None and args.llmservingsim is not None:
        from pagesim.errors import ConfigError

        raise ConfigError("calibrate import: give one of --splitwise and --llmservingsim")
    if args.splitwise is not None:
        return _import_splitwise(args, groups)
    if args.llmservingsim is not None:
        return _import_llmservingsim(args, groups)
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


def _import_llmservingsim(args: argparse.Namespace, groups: dict) -> int:
    import shlex
    import sys
    from pathlib import Path

    from pagesim.calibrate.import_llmservingsim import import_llmservingsim
    from pagesim.calibrate.llmservingsim import read_bundle
    from pagesim.errors import ConfigError

    others = [flag for flag, paths in groups.items() if paths]
    if others or args.attention_gpu:
        raise ConfigError(
            "calibrate import: --llmservingsim reads its own bundle and takes no other tables; "
            f"drop --{(others or ['attention_gpu'])[0].replace('_', '-')}"
        )
    if len(args.origin) != 1:
        raise ConfigError(
            "--origin: give it once with --llmservingsim, OWNER/REPO@COMMIT for the whole bundle, "
            "e.g. casys-kaist/LLMServingSim@5daddb2"
        )
    repo, at, commit = args.origin[0].rpartition("@")
    if not at or not repo or not commit or "=" in repo:
        raise ConfigError(f"--origin {args.origin[0]!r}: expected OWNER/REPO@COMMIT")
    bundle = read_bundle(Path(args.llmservingsim), args.tensor_parallel, gpu=args.gpu)
    argv = [
        "--gpu",
        args.gpu,
        "--llmservingsim",
        bundle.prefix,
        "--tensor-parallel",
        str(args.tensor_parallel),
        f"--origin={args.origin[0]}",
    ]
    command = "pagesim calibrate import " + shlex.join(argv) + f" --seed {args.seed} --out OUT"
    print(
        f"calibrate import: LLMServingSim {bundle.prefix} TP {bundle.tensor_parallel}, writing to {args.out}",
        file=sys.stderr,
    )
    profile, report = import_llmservingsim(
        bundle, repo, commit, Path(args.out), seed=args.seed, command=command
    )
    print(f"profile: {profile}")
    print(f"report: {report}")
    return 0


def _run(args: argparse.Namespace) -> int:
    import sys
    import time
    from pathlib import Path

    import numpy as np

    from pagesim.calibrate.models import model_dims
    from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR, calibrate, gpu_dir_name
    from pagesim.calibrate.selfcheck import KernelCheckError, summary_line

    dims = model_dims(args.model)
    rng = np.random.default_rng(args.seed)
    backend, clock, checks, checked_on = (_dry_run if args.dry_run else _on_gpu)(args, rng)
    print(summary_line(checks) if checks else "kernel check: skipped (no g++ for the host shim)")
    for c in checks:
        if not c.passed:
            print(f"  {c.name}: {c.error or f'max abs error {c.max_abs_err:.3g}'}", flush=True)
    if any(c.error for c in checks):
        raise KernelCheckError(
            "calibrate: a kernel failed to run in the check, so nothing was timed: "
            + next(f"{c.name}: {c.error}" for c in checks if c.error)
        )
    name = backend.device_info().name
    out = Path(args.out) if args.out else DEFAULT_PROFILES_DIR / gpu_dir_name(name)
    flags = "".join(
        flag
        for flag, on in (
            (" --quick", args.quick),
            (f" --budget-s {args.budget_s:g}", args.budget_s is not None),
            (" --dry-run", args.dry_run),
        )
        if on
    )
    command = f"pagesim calibrate --model {args.model} --out {out}{flags} --seed {args.seed}"
    start = clock()

    def progress(done: int, total: int) -> None:
        if done == total or done % max(total // 20, 1) == 0:
            elapsed = f", {clock() - start:.0f} s" if args.budget_s is not None else ""
            print(f"calibrate: {done}/{total} shapes{elapsed}", file=sys.stderr, flush=True)

    print(f"calibrate: {name}, model {args.model}, writing to {out}", file=sys.stderr)
    started = time.perf_counter()
    outputs = calibrate(
        dims,
        backend,
        out,
        rng,
        quick=args.quick,
        command=command,
        on_progress=progress,
        budget_s=args.budget_s,
        clock=clock,
        checks=checks,
        checked_on=checked_on,
    )
    print(f"calibrate: done in {time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)
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


def _on_gpu(args: argparse.Namespace, rng):
    """CuPy on the current GPU, the wall clock, and the kernel check on the device."""
    import time

    from pagesim.calibrate.cupy_backend import CupyBackend
    from pagesim.calibrate.selfcheck import check_kernels

    backend = CupyBackend(rng)
    cp = backend.cp
    checks = check_kernels(backend.kernels, cp, cp.asnumpy, seed=args.seed)
    return backend, time.perf_counter, checks, "device"


def _dry_run(args: argparse.Namespace, rng):
    """The synthetic device on a simulated clock, and the kernel check on the host shim."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    import numpy as np

    from pagesim.calibrate.budget import SimulatedClock
    from pagesim.calibrate.cupy_ops import Kernels
    from pagesim.calibrate.host_kernels import HostLauncher, build_harness, find_cxx
    from pagesim.calibrate.selfcheck import check_kernels
    from pagesim.calibrate.sources import SOURCE_TO_KERNELS
    from pagesim.calibrate.synthetic import SyntheticBackend, reference_profile

    clock = SimulatedClock()
    backend = SyntheticBackend(reference_profile(), rng, clock=clock)
    checks = []
    if find_cxx() is not None:
        tmp = Path(tempfile.gettempdir())
        build_dir = (
            Path(args.host_build_dir) if args.host_build_dir else tmp / "pagesim-host-kernels"
        )
        with ThreadPoolExecutor() as pool:  # one g++ per source, side by side
            builds = {f: pool.submit(build_harness, f, build_dir) for f in SOURCE_TO_KERNELS}
            harnesses = {f: b.result() for f, b in builds.items()}
        with tempfile.TemporaryDirectory(prefix="pagesim-launches-") as work:
            kernels = Kernels(np, launch=HostLauncher(harnesses, Path(work)))
            checks = check_kernels(kernels, np, np.asarray, seed=args.seed)
    return backend, clock, checks, "host"


def _report(args: argparse.Namespace) -> int:
    from pagesim.calibrate.pipeline import rebuild_report

    report, plot = rebuild_report(args.dir)
    print(f"report: {report}")
    print(f"plots: {plot}")
    if args.against:
        from pathlib import Path

        from pagesim.calibrate.compare import cross_run_section

        text = "\n".join(cross_run_section(Path(args.dir), Path(args.against))) + "\n"
        print(text, end="")
        out = Path(args.dir) / f"against_{Path(args.against).resolve().name}.md"
        out.write_text(text)
        print(f"cross-run table: {out}")
    return 0
