"""The registered workloads: a plain dict from name to where its requests come from.

Adding a workload is one entry in :data:`WORKLOADS` (plus, for a new data format,
one loader file). Kinds:

- ``table``: a prepared length table, viewed as ``rows`` (every row a request),
  ``first-turn`` (the first row of each conversation) or ``chat`` (multi-turn
  prompts, ``chat.py``). ``pagesim workload prepare NAME --source RAW`` writes it to
  the user data folder (:func:`user_tables_dir`), which takes precedence over the
  table shipped in ``workloads/data/``; the installed package is never written to;
- ``synthetic``: lengths drawn from distributions (``synthetic.py``);
- ``csv``: a user's timestamped CSV at ``workload.path`` (``csvtrace.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from pagesim.errors import ConfigError, DataError
from pagesim.workloads.lengthtable import LengthTable, load_table

DATA_DIR = Path(__file__).parent / "data"
#: Environment variable naming the user data folder (default: $XDG_DATA_HOME/pagesim).
USER_DIR_ENV = "PAGESIM_USER_DIR"


def user_tables_dir() -> Path:
    """Where ``pagesim workload prepare`` writes tables: ``$PAGESIM_USER_DIR/workloads``,
    else ``$XDG_DATA_HOME/pagesim/workloads`` (``~/.local/share/pagesim/workloads``)."""
    root = os.environ.get(USER_DIR_ENV)
    if not root:
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        root = str(Path(xdg) / "pagesim")
    return Path(root) / "workloads"


@dataclass(frozen=True)
class WorkloadSource:
    """Where a workload's requests come from (see the module docstring)."""

    description: str
    kind: Literal["table", "synthetic", "csv"]
    table_file: str | None = None
    view: Literal["rows", "first-turn", "chat"] = "rows"
    raw_format: Literal["sharegpt", "alpaca", "csv"] | None = None
    is_timestamped: bool = False

    @property
    def table_path(self) -> Path | None:
        """The table a run reads: the user's prepared one if present, else the shipped one."""
        if self.table_file is None:
            return None
        user = user_tables_dir() / self.table_file
        return user if user.is_file() else DATA_DIR / self.table_file

    @property
    def is_prepared(self) -> bool:
        return self.kind != "table" or (self.table_path is not None and self.table_path.is_file())


WORKLOADS: dict[str, WorkloadSource] = {
    "sharegpt": WorkloadSource(
        "ShareGPT, every human->gpt pair as a request (GPT-2 BPE lengths)",
        "table", "sharegpt.npz", "rows", "sharegpt"),
    "sharegpt-first-turn": WorkloadSource(
        "ShareGPT, the first human->gpt pair of each conversation",
        "table", "sharegpt.npz", "first-turn", "sharegpt"),
    "sharegpt-chat": WorkloadSource(
        "ShareGPT multi-turn chat: history + new message, last 1024 tokens",
        "table", "sharegpt.npz", "chat", "sharegpt"),
    "alpaca": WorkloadSource(
        "Alpaca instructions (needs: pagesim workload prepare alpaca --source alpaca_data.json)",
        "table", "alpaca.npz", "rows", "alpaca"),
    "alpaca-like": WorkloadSource(
        "SYNTHETIC lognormal lengths at the paper's Alpaca means (19.31 in / 58.45 out)",
        "synthetic"),
    "azure-conv": WorkloadSource(
        "Azure LLM inference trace 2023, conversation service (timestamped)",
        "table", "azure_conv.npz", "rows", "csv", is_timestamped=True),
    "azure-code": WorkloadSource(
        "Azure LLM inference trace 2023, code service (timestamped)",
        "table", "azure_code.npz", "rows", "csv", is_timestamped=True),
    "synthetic": WorkloadSource(
        "lengths from workload.prompt / workload.output (fixed, uniform, lognormal, zipf)",
        "synthetic"),
    "csv": WorkloadSource(
        "a timestamped CSV at workload.path (Azure 2023 processed or original layout)",
        "csv", is_timestamped=True),
}  # fmt: skip


def get_source(name: str) -> WorkloadSource:
    """The registered workload ``name``; ConfigError listing the known names otherwise."""
    if name not in WORKLOADS:
        raise ConfigError(f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}")
    return WORKLOADS[name]


def load_rows(name: str, path: str | None = None) -> LengthTable:
    """The table of candidate requests of a table or csv workload, in its view.

    ``rows`` and ``first-turn`` views drop ``conv_ids`` (rows are independent
    requests); the ``chat`` view keeps them.
    """
    source = get_source(name)
    if source.kind == "csv":
        if path is None:
            raise ConfigError("workload 'csv' needs workload.path: a timestamped CSV file")
        from pagesim.workloads.csvtrace import read_timestamped_csv

        return read_timestamped_csv(path)
    if source.kind != "table" or source.table_path is None:
        raise ConfigError(f"workload {name!r} is {source.kind}: it has no length table")
    if not source.table_path.is_file():
        raise DataError(
            f"{source.table_path.name}: the length table of workload {name!r} is not prepared; "
            f"run: pagesim workload prepare {name} --source RAW_FILE"
        )
    table = load_table(source.table_path)
    if source.view == "chat":
        if table.conv_ids is None:
            raise DataError(f"{source.table_path.name}: chat view needs conv_ids in the table")
        return table
    keep = np.ones(len(table), dtype=bool)
    if source.view == "first-turn":
        if table.conv_ids is None:
            raise DataError(
                f"{source.table_path.name}: first-turn view needs conv_ids in the table"
            )
        keep = np.r_[True, table.conv_ids[1:] != table.conv_ids[:-1]]
    return LengthTable(
        prompt_len=table.prompt_len[keep],
        output_len=table.output_len[keep],
        arrival_s=None if table.arrival_s is None else table.arrival_s[keep],
        source_note=table.source_note,
    )
