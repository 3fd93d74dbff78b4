"""A toy record format, one file: a tab-separated log, one request a line,
``arrival<TAB>prompt<TAB>output<TAB>first_token<TAB>finish`` (s), in a file named
``*.toylog``. It shows what a format's file holds: ``recognises`` and a reader that
validates each cell through ``pagesim.records`` and returns a ``MeasuredRun``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.records.cells import read_text
from pagesim.records.run import RECORD_COLUMNS, MeasuredRun, check_records, sha256_of


def recognises(path: Path) -> bool:
    return path.is_file() and path.suffix == ".toylog"


def read_toy_log(path: str | Path) -> MeasuredRun:
    path = Path(path)
    lines = [line.split("\t") for line in read_text(path, "a toy log").splitlines() if line]
    bad = [i for i, cells in enumerate(lines, start=1) if len(cells) != len(RECORD_COLUMNS)]
    if bad:
        raise DataError(
            f"{path}: line {bad[0]}: expected {len(RECORD_COLUMNS)} tab-separated cells"
        )
    table = check_records(
        pd.DataFrame(lines, columns=list(RECORD_COLUMNS)),
        str(path),
        rows=np.arange(1, len(lines) + 1),
    )
    span = float(table["arrival_s"].iloc[-1])
    return MeasuredRun(
        name=path.stem,
        dataset="toy",
        table=table,
        rate_req_s=(len(table) - 1) / span if span > 0 else float("inf"),
        sources=((str(path), sha256_of(path)),),
    )
