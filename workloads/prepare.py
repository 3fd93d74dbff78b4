"""Build a workload's length table from its raw source (``pagesim workload prepare``).

The table is written where runs read it: into the user's data folder
(``pagesim.datapaths``), for external data (Azure traces, Alpaca) and for the
ShareGPT table alike (a prepared ShareGPT table there takes precedence over the one
shipped in ``workloads/data/``; the installed package is never written); ``--out``
writes elsewhere.

ShareGPT and Alpaca sources are tokenized (``tokenizer.py``; GPT-2 BPE unless a
tokenizer is given); timestamped CSVs and the paper artifact's length pairs
(``artifact.py``: its ``.pkl``, read with an unpickler that refuses every global, or
a CSV ``input_len,output_len``) already carry token counts. The table is
written atomically (``lengthtable.save_table``): on any error nothing is written.
A table with no rows, or with no row that passes the default workload filters, or
from a ShareGPT file cut off before ``MIN_RECOVERED_SHARE`` of its text, is refused
(a DataError): it could only give empty or unrepresentative runs. Replacing an
existing file is always said (:class:`Prepared` carries the replaced file's row count).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pagesim.errors import ConfigError, DataError
from pagesim.workloads.filters import apply_filters
from pagesim.workloads.lengthtable import LengthTable, load_table, save_table
from pagesim.workloads.registry import WORKLOADS, get_source
from pagesim.workloads.spec import WorkloadSpec

#: A truncated ShareGPT file must keep at least this share of its text in whole records.
MIN_RECOVERED_SHARE = 0.5
#: The filter limits a run uses by default (WorkloadSpec and RunSpec defaults).
DEFAULT_MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class Prepared:
    """A written table: where, what, how many rows pass the default filters, and
    the row count of the file it replaced (None: nothing was there)."""

    path: Path
    table: LengthTable
    num_usable: int
    replaced_rows: int | None


def build_table(name: str, source_path: str, tokenizer_path: str | None = None) -> LengthTable:
    """The length table of workload ``name`` built from ``source_path``."""
    source = get_source(name)
    if source.kind != "table":
        preparable = sorted(n for n, s in WORKLOADS.items() if s.kind == "table")
        raise ConfigError(
            f"workload {name!r} has no length table to prepare; preparable: {', '.join(preparable)}"
        )
    if source.raw_format == "length-pairs":
        if tokenizer_path is not None:
            raise ConfigError(
                f"workload {name!r} reads token counts from the file; drop --tokenizer"
            )
        from pagesim.workloads.artifact import read_length_pairs

        table = read_length_pairs(source_path)
    elif source.raw_format == "csv":
        if tokenizer_path is not None:
            raise ConfigError(
                f"workload {name!r} reads token counts from the CSV; drop --tokenizer"
            )
        from pagesim.workloads.csvtrace import read_timestamped_csv

        table = read_timestamped_csv(source_path)
    else:
        from pagesim.workloads.tokenizer import load_token_counter

        counter = load_token_counter(tokenizer_path)
        if source.raw_format == "sharegpt":
            from pagesim.workloads.sharegpt import sharegpt_table

            table, report = sharegpt_table(source_path, counter)
            if report.is_truncated and report.recovered_share < MIN_RECOVERED_SHARE:
                raise DataError(
                    f"{source_path}: cut off after {report.recovered_share:.0%} of its text "
                    f"({report.num_records} whole records); a table from it would not "
                    "represent the dataset: give the complete file; nothing written"
                )
        else:
            from pagesim.workloads.alpaca import alpaca_table

            table = alpaca_table(source_path, counter)
    return table


def num_usable_rows(table: LengthTable) -> int:
    """Rows that pass the default workload filters (see ``filters.py``)."""
    defaults = WorkloadSpec()
    keep, _ = apply_filters(
        table.prompt_len, table.output_len, min_len=defaults.min_len,
        max_prompt_len=defaults.max_prompt_len, max_model_len=DEFAULT_MAX_MODEL_LEN,
    )  # fmt: skip
    return int(keep.sum())


def default_target(name: str) -> Path:
    """Where ``prepare`` writes without ``--out``: the data folder."""
    target = get_source(name).prepare_target
    assert target is not None
    return target


def prepare(name: str, source_path: str, *, tokenizer_path: str | None = None,
            out_path: str | None = None) -> Prepared:  # fmt: skip
    """Build, check and atomically write the table (see the module docstring)."""
    table = build_table(name, source_path, tokenizer_path)
    if len(table) == 0:
        raise DataError(f"{source_path}: no requests in this source; nothing written")
    num_usable = num_usable_rows(table)
    if num_usable == 0:
        raise DataError(
            f"{source_path}: none of its {len(table)} requests passes the default workload "
            f"filters (min_len 4, max_prompt_len 1024, prompt + output <= "
            f"{DEFAULT_MAX_MODEL_LEN}); nothing written"
        )
    target = Path(out_path) if out_path is not None else default_target(name)
    if target.is_dir():
        raise ConfigError(f"--out {target}: is a folder; give a .npz file path")
    replaced = None
    if target.exists():
        try:
            replaced = len(load_table(target))
        except DataError:
            replaced = -1
    return Prepared(save_table(table, target), table, num_usable, replaced)
