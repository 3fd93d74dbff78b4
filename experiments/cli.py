"""`pagesim run`, `pagesim validate`, `pagesim list`: the experiments layer's commands.

Only argparse is imported here at module level; each handler imports what it
needs, so ``pagesim --help`` stays fast.
"""

from __future__ import annotations

import argparse

RUN_EXAMPLES = """examples:
  pagesim run memory_waste --quick --out out/memory_waste
  pagesim run paper --out out/paper            # every paper_* experiment, one report.md
  pagesim run paper --out out/paper --docs docs/fidelity.md
  pagesim run experiments/latency_vs_rate.yaml --jobs 2 --out out/latency
  pagesim run block_size_sweep --set workload.num_requests=200 --set arrivals.rate_req_s=1.5
  pagesim run memory_waste --executor ray      # needs: pip install 'pagesim[cluster]'
  pagesim run memory_waste --executor ray --ray-address 10.0.0.5:6379   # an existing cluster
"""


def _parse_set(items: list[str]) -> dict:
    """``--set key=value`` pairs; values parsed as YAML (``16``, ``true``, ``[1, 2]``)."""
    from pagesim import yamlio
    from pagesim.errors import ConfigError

    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--set {item!r}: expected key=value, e.g. --set allocator.block_size=32"
            )
        if key.strip() in overrides:
            raise ConfigError(f"--set {key.strip()}: given twice; give each path once")
        overrides[key.strip()] = yamlio.load(text, f"--set {item!r}")
    return overrides


def _interval_spec(args: argparse.Namespace):
    """``--intervals P [--replicates N] [--spread A,B]`` as the experiment's IntervalSpec."""
    from pydantic import ValidationError

    from pagesim.errors import ConfigError
    from pagesim.experiments.spec import IntervalSpec
    from pagesim.specbase import format_validation_error

    doc: dict = {"nominal": args.intervals / 100.0}
    if args.replicates is not None:
        doc["replicates"] = args.replicates
    if args.spread:
        doc["sources"] = [x.strip() for x in args.spread.split(",") if x.strip()]
    try:
        return IntervalSpec.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(
            format_validation_error(exc, "--intervals/--replicates/--spread")
        ) from None


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def _check_executor(args: argparse.Namespace) -> None:
    from pagesim.errors import ConfigError

    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs {args.jobs}: must be at least 1")
    if args.ray_address is not None and args.executor != "ray":
        raise ConfigError("--ray-address: only with --executor ray")


def _cmd_run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from pagesim.errors import ConfigError
    from pagesim.experiments.runner import run_experiment
    from pagesim.experiments.shipped import resolve_experiment
    from pagesim.experiments.summary import workload_tables
    from pagesim.experiments.validate import load_experiment_points, set_flags

    _check_executor(args)
    if args.experiment == "paper" and not Path(args.experiment).is_file():
        return _run_paper_suite(args)
    if args.docs is not None:
        raise ConfigError("--docs: only the paper suite writes a docs page (pagesim run paper)")
    path = resolve_experiment(args.experiment)
    overrides = _parse_set(args.set)
    spec, points = load_experiment_points(path, quick=args.quick, overrides=overrides)
    if args.intervals is not None:
        spec = spec.model_copy(update={"intervals": _interval_spec(args)})
    default_out = Path("out") / (f"{spec.name}-quick" if args.quick else spec.name)
    out_dir = Path(args.out) if args.out else default_out
    output = run_experiment(
        spec,
        out_dir,
        executor=args.executor,
        jobs=args.jobs,
        # a point that fails its preflight says which flags it was run with
        source=f"{path} (with {set_flags(overrides)})" if overrides else str(path),
        progress=True if args.progress else None,
        variant="quick" if args.quick else "full",
        points=points,
        vllm_json=args.vllm_json,
        ray_address=args.ray_address,
        say=_say,
    )
    print(
        f"{spec.name}: {output.num_runs} runs ({output.num_computed} computed, "
        f"{output.num_runs - output.num_computed} from cache) -> {out_dir}"
    )
    for table in workload_tables(output.results):
        print(f"note: not the shipped table: {table}", file=sys.stderr)
    for problem in output.chart_problems:
        print(f"warning: {problem}", file=sys.stderr)
    for warning in output.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"results: {out_dir / 'results.csv'}; summary: {out_dir / 'summary.md'}")
    return 0


def _run_paper_suite(args: argparse.Namespace) -> int:
    import sys
    import time
    from pathlib import Path

    from pagesim.errors import ConfigError
    from pagesim.experiments.paper_suite import run_paper_suite

    if args.set:
        raise ConfigError("--set: not with the paper suite; run one paper_* experiment instead")
    out_dir = (
        Path(args.out) if args.out else Path("out") / ("paper-quick" if args.quick else "paper")
    )
    started = time.monotonic()
    with _ray_for_suite(args):
        entries = run_paper_suite(
            out_dir, quick=args.quick, jobs=args.jobs, executor=args.executor,
            progress=True if args.progress else None,
            docs=Path(args.docs) if args.docs is not None else None,
        )  # fmt: skip
    for entry in entries:
        print(
            f"{entry.name}: {entry.num_runs} runs ({entry.num_computed} computed, "
            f"{entry.num_runs - entry.num_computed} from cache)"
        )
    print(
        f"paper suite: {len(entries)} experiments in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    print(f"report: {out_dir / 'report.md'}" + (f"; docs page: {args.docs}" if args.docs else ""))
    return 0


def _ray_for_suite(args: argparse.Namespace):
    """With ``--executor ray``: one Ray session for every experiment of the suite."""
    from contextlib import nullcontext

    if args.executor != "ray":
        return nullcontext()
    from pagesim.experiments.executors import ray_session
    from pagesim.experiments.runner import default_jobs

    return ray_session(args.ray_address, args.jobs or default_jobs(), _say)


def _cmd_validate(args: argparse.Namespace) -> int:
    from pagesim.experiments.points import expand_runs
    from pagesim.experiments.shipped import resolve_experiment
    from pagesim.experiments.validate import dry_draw, load_experiment_points, preflight_points

    path = resolve_experiment(args.experiment)
    spec, points = load_experiment_points(path, quick=args.quick)
    preflight_points(points, str(path))  # everything run would reject before simulating
    dry_draw(spec, str(path))  # and every chart drawn on a stand-in of its results
    runs = expand_runs(spec)
    print(
        f"{path}: ok ({len(runs) // len(spec.seeds)} points × {len(spec.seeds)} seeds, {len(spec.charts)} charts)"
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from pagesim.experiments.charts import CHART_KINDS
    from pagesim.experiments.registries import REGISTRIES
    from pagesim.experiments.shipped import shipped_experiments
    from pagesim.experiments.validate import parse_experiment, read_yaml

    print("experiments:")
    for name, path in shipped_experiments().items():
        description = parse_experiment(read_yaml(path), str(path)).description.strip().splitlines()
        print(f"  {name:20s} {description[0] if description else ''}")
    for registry in REGISTRIES:
        names = registry.names()
        shown = (
            ", ".join(names)
            if names is not None
            else f"(not available: {registry.module}.{registry.attribute} is missing)"
        )
        print(f"{registry.title} ({registry.dotted_path}): {shown}")
    print(f"chart kinds: {', '.join(CHART_KINDS)}")
    return 0


def _cmd_validate_vllm(args: argparse.Namespace) -> int:
    from pagesim.experiments.validation.pipeline import write_validation

    written = write_validation(args.data, args.out, args.docs, progress=True)
    for label, path in written.items():
        print(f"{label}: {path}")
    return 0


def _cmd_replay_vllm(args: argparse.Namespace) -> int:
    from pagesim.experiments.validation.bench import replay_vllm

    overrides = _parse_set(args.set)
    written = replay_vllm(
        args.result,
        args.out,
        model=args.model,
        gpu=args.gpu,
        profile=args.profile,
        scheduler=args.scheduler,
        server_args=args.server_args,
        overrides=overrides,
        scheduler_alone=args.scheduler_alone,
        fit_serving=args.fit_serving,
        server=args.server,
        fit_fraction=args.fit_fraction,
        vllm_version=args.vllm_version,
    )
    for label, path in written.items():
        print(f"{label}: {path}")
    return 0


def _cmd_crosscheck_splitwise(args: argparse.Namespace) -> int:
    from pagesim.experiments.splitwise_crosscheck import write_crosscheck

    for label, path in write_crosscheck(args.data, args.out, args.docs).items():
        print(f"{label}: {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run``, ``validate``, ``validate-vllm``, ``replay-vllm``,
    ``crosscheck-splitwise``, ``list`` and ``capacity``."""
    fmt = argparse.RawDescriptionHelpFormatter
    _register_run(subparsers, fmt)
    _register_validate(subparsers, fmt)
    _register_validate_vllm(subparsers, fmt)
    _register_replay_vllm(subparsers, fmt)
    _register_crosscheck_splitwise(subparsers, fmt)
    _register_list(subparsers, fmt)
    from pagesim.experiments.capacity.cli import register as register_capacity

    register_capacity(subparsers)


def _register_run(subparsers: argparse._SubParsersAction, fmt) -> None:
    run = subparsers.add_parser(
        "run",
        help="run an experiment YAML: sweep, results.csv, charts, summary.md",
        description="Run an experiment file (or a shipped experiment by name). Finished runs "
        "are cached in OUT/runs, so re-running skips them and an interrupted sweep resumes. "
        "`pagesim run paper` runs every paper_* experiment into OUT/<name> and writes "
        "OUT/report.md: the paper's numbers beside pagesim's, the differences and their causes.",
        epilog=RUN_EXAMPLES,
        formatter_class=fmt,
    )
    run.add_argument(
        "experiment",
        help="an experiment YAML file, a shipped name (see `pagesim list`), or `paper`: "
        "every shipped paper_* experiment and one report.md beside the paper's numbers",
    )
    run.add_argument(
        "--out",
        help="output folder (default: out/<experiment name>, or out/<name>-quick with --quick)",
    )
    run.add_argument("--jobs", type=int, default=None, help="parallel runs (default: all cores)")
    run.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where runs execute (default: local processes); ray: on a Ray cluster, input "
        "files sent by content (docs/guide.md#running-on-a-ray-cluster)",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="with --executor ray: join the Ray cluster at ADDRESS (host:port, or auto) "
        "instead of starting a local one (default: $RAY_ADDRESS if set); --jobs then does "
        "not apply",
    )
    run.add_argument(
        "--quick",
        action="store_true",
        help="apply the file's `quick` overrides (a fast, small version)",
    )
    run.add_argument(
        "--progress",
        action="store_true",
        help="show progress bars even when output is not a terminal (CI, logs)",
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a base field by dotted path, value as YAML (repeatable)",
    )
    run.add_argument(
        "--docs",
        default=None,
        metavar="PATH",
        help="with `paper`: also write the report, without its chart images, to PATH "
        "(docs/fidelity.md)",
    )
    _add_run_output_flags(run)
    run.set_defaults(func=_cmd_run)


def _add_run_output_flags(run: argparse.ArgumentParser) -> None:
    """``pagesim run``'s flags for what it writes beside results.csv: the vLLM-shaped
    results and the intervals."""
    run.add_argument(
        "--vllm-json",
        action="store_true",
        help="also write each run as a `vllm bench serve --save-detailed` result "
        "(vllm_bench/<run>.json: its keys and definitions, per-request arrays)",
    )
    run.add_argument(
        "--intervals",
        type=float,
        default=None,
        metavar="PERCENT",
        help="an interval of this coverage around every latency and throughput "
        "(e.g. 90): <metric>_lo and _hi in results.csv, bands on the charts (docs/intervals.md)",
    )
    run.add_argument(
        "--replicates", type=int, default=None, help="with --intervals: runs per point (default 20)"
    )
    run.add_argument(
        "--spread",
        default=None,
        metavar="SOURCES",
        help="with --intervals: what varies, among seeds,cost,serving (default all three)",
    )


def _register_validate(subparsers: argparse._SubParsersAction, fmt) -> None:
    validate = subparsers.add_parser(
        "validate",
        help="check an experiment file without running it",
        description="Validate an experiment: schema, every sweep point as a full run spec, names, "
        "charts, and everything `run` checks before simulating (input files, pool sizes, and "
        "that each run fits in this machine's memory).",
        epilog="examples:\n  pagesim validate experiments/memory_waste.yaml\n  pagesim validate swap_vs_recompute --quick\n",
        formatter_class=fmt,
    )
    validate.add_argument("experiment", help="an experiment YAML file, or a shipped name")
    validate.add_argument("--quick", action="store_true", help="validate the --quick variant too")
    validate.set_defaults(func=_cmd_validate)


def _register_validate_vllm(subparsers: argparse._SubParsersAction, fmt) -> None:
    vv = subparsers.add_parser(
        "validate-vllm",
        help="replay real vLLM runs and compare latencies (validation.csv, a page, a chart)",
        description=(
            "Recognise the dataset in DIR by its files (DistServe's vllm-N-RATE.csv: per-request "
            "records of vLLM v0.2.3 serving OPT-13B on one A100-80GB; LLMServingSim's vLLM 0.19 "
            "runs; inference-sim's H100 stages; or your own vllm bench serve results beside a "
            "pagesim-runs.yaml, docs/your_server.md), replay each run's exact "
            "requests with the settings its server ran with (the dataset's manifest: launch, "
            "role, evidence), under each cost model (the headline one with a serving path fitted "
            "on the manifest's fit runs only), and write validation.csv (one row per run x cost "
            "model x metric x statistic, with the run's role), a chart and a page: TTFT, TPOT and "
            "E2E against the records, the decode time given the measured concurrency, the "
            "saturation rate, the KV pool, and every serving form tried."
        ),
        epilog="examples:\n  pagesim validate-vllm --data ../shared/data/distserve_vllm_opt13b "
        "--out out/validation --docs docs/validation.md\n  pagesim validate-vllm --data my-runs "
        "--out out/my-server   # my-runs/: results + pagesim-runs.yaml\n",
        formatter_class=fmt,
    )
    vv.add_argument("--data", required=True, help="the dataset's folder (e.g. DistServe's runs)")
    vv.add_argument(
        "--out", required=True, help="output folder (validation.csv, chart, page, fitted profile)"
    )
    vv.add_argument(
        "--docs", default=None, help="also write the page here (and its chart beside it)"
    )
    vv.set_defaults(func=_cmd_validate_vllm)


def _register_replay_vllm(subparsers: argparse._SubParsersAction, fmt) -> None:
    rv = subparsers.add_parser(
        "replay-vllm",
        help="replay your own `vllm bench serve` result and compare every metric",
        description=(
            "Read RESULT.json (written by `vllm bench serve --save-result --save-detailed`), "
            "replay exactly its requests (send times, prompt and output lengths) through "
            "pagesim with your server's settings (--server-args: vLLM's own flags; --set for "
            "any other RunSpec key), and write validation.csv, replay.md (every vllm bench "
            "serve metric measured beside pagesim's, with the error), replay.png and "
            "pagesim's run as a vllm bench serve result (pagesim_vllm_bench.json)."
        ),
        epilog=(
            "example:\n  pagesim replay-vllm result.json --model llama-2-7b --gpu a100-80gb "
            "--profile a100-80gb-vidur \\\n      --server-args '--max-num-seqs 256 "
            "--max-num-batched-tokens 8192 --gpu-memory-utilization 0.9' --out out/replay\n"
        ),
        formatter_class=fmt,
    )
    rv.add_argument("result", help="a vllm bench serve result saved with --save-detailed")
    _add_server_flags(rv)
    rv.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other RunSpec key; arrivals.time_scale or arrivals.rate_req_s re-space the "
        "recorded send times; what a replay cannot follow (workload.*, other arrivals.*) is "
        "refused naming what to use instead",
    )
    rv.add_argument(
        "--scheduler-alone",
        action="store_true",
        help="a V1 server (--scheduler vllm-v1): replay again with the step times read off "
        "the result's token times, to separate the scheduler's error from the cost model's",
    )
    rv.add_argument(
        "--fit-serving",
        default=None,
        metavar="DIR",
        help="with --scheduler-alone: fit your server's serving path on that replay's batches "
        "and write DIR/profile.yaml (--profile plus the serving section) and DIR/report.md",
    )
    rv.add_argument(
        "--fit-fraction",
        type=float,
        default=1.0,
        metavar="F",
        help="with --fit-serving: fit on the first F of the requests by send time and report "
        "the rest as held out (default 1: every request)",
    )
    rv.add_argument(
        "--server",
        default="a vLLM V1 server",
        help="what to call the server in a fitted profile (e.g. 'vLLM 0.19 on my H100')",
    )
    rv.add_argument("--out", required=True, help="output folder")
    rv.set_defaults(func=_cmd_replay_vllm)


def _add_server_flags(parser: argparse.ArgumentParser, *, gpu_required: bool = True) -> None:
    """The flags that describe a vLLM server (replay-vllm, capacity)."""
    parser.add_argument(
        "--model",
        default=None,
        help="the model served: a pagesim model name, a Hugging Face id or a config.json path "
        "(default: the one --server-args or the result's model_id names)",
    )
    parser.add_argument(
        "--gpu",
        required=gpu_required,
        help="the GPU it ran on: a pagesim GPU name or as nvidia-smi prints it (H100, "
        "'NVIDIA H100 80GB HBM3', A100-SXM4-80GB)",
    )
    parser.add_argument("--profile", default=None, help="cost-model profile (default: analytic)")
    parser.add_argument(
        "--vllm-version",
        default=None,
        metavar="X.Y.Z",
        help="the vLLM release served (default: the result's vllm_version field, if any): "
        "its V1 scheduler and defaults run",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="scheduler kind without a release (default vllm, vLLM v0; vllm-v1 for V1)",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help="the server's command line (`vllm serve` flags, quoted as one string): the flags "
        "pagesim models are applied, the others listed as not modelled",
    )


def _register_crosscheck_splitwise(subparsers: argparse._SubParsersAction, fmt) -> None:
    cs = subparsers.add_parser(
        "crosscheck-splitwise",
        help="predict Splitwise's measured iteration times from the Vidur-fitted profiles",
        description=(
            "Predict every measured prefill and decode iteration time of FILE (Splitwise's "
            "perf_model.csv: Llama-2-70B on A100/H100 at TP 2-8) with the profiles fitted on "
            "Vidur's operator tables and with the analytic profile; write the errors per "
            "model, GPU and TP. Nothing is fitted on FILE."
        ),
        epilog="examples:\n  pagesim crosscheck-splitwise --data ../shared/data/splitwise/perf_model.csv "
        "--out out/crosscheck --docs docs/crosscheck_splitwise.md\n",
        formatter_class=fmt,
    )
    cs.add_argument("--data", required=True, help="Splitwise's perf_model.csv")
    cs.add_argument("--out", required=True, help="output folder (CSV and page)")
    cs.add_argument("--docs", default=None, help="also write the page here")
    cs.set_defaults(func=_cmd_crosscheck_splitwise)


def _register_list(subparsers: argparse._SubParsersAction, fmt) -> None:
    listing = subparsers.add_parser(
        "list",
        help="list shipped experiments and the registered names (models, allocators, ...)",
        description="List what an experiment file may name.",
        epilog="examples:\n  pagesim list\n",
        formatter_class=fmt,
    )
    listing.set_defaults(func=_cmd_list)
