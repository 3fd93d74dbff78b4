"""DistServe's vLLM runs, one CSV per run, into a :class:`~.run.MeasuredRun`.

DistServe (GitHub ``LLMServe/DistServe``, ``simdistserve/benchmarks/alignment/
data-ground-truth/``) published its vLLM baseline's per-request records as
``vllm-N-RATE.exp``; the copies read here are CSVs named ``vllm-N-RATE.csv`` (N requests
at RATE req/s) with the columns ``issue_time``, ``first_token_time``, ``complete_time``
(s, one clock), ``prompt_len``, ``output_len`` (``ttft_ms``, ``tpot_ms``, ``latency_ms``
beside them are derived and not read). The client (DistServe's
``2-benchmark-serving.py``) records only the requests that completed, so a run has no
failed request to report. Each cell is checked (:func:`.run.check_records`); an error
names the file, the row as a spreadsheet shows it (the header is row 1) and the column
as the file names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pagesim.errors import DataError
from pagesim.records.cells import csv_cells, read_text
from pagesim.records.run import MeasuredRun, check_records, sha256_of

DISTSERVE_RUN_FILE = re.compile(r"^vllm-(\d+)-(\d+(?:\.\d+)?)\.csv$")
DISTSERVE_COLUMNS = ("issue_time", "first_token_time", "complete_time", "prompt_len", "output_len")
#: the canonical column of each file column
RENAMED = {
    "issue_time": "arrival_s",
    "first_token_time": "first_token_s",
    "complete_time": "finish_s",
}


def recognises(path: Path) -> bool:
    """A file named ``vllm-N-RATE.csv``."""
    return path.is_file() and DISTSERVE_RUN_FILE.match(path.name) is not None


def read_distserve_csv(path: str | Path, dataset: str = "distserve_vllm_opt13b") -> MeasuredRun:
    """One DistServe run (module docstring); its name is the file's stem."""
    path = Path(path)
    match = DISTSERVE_RUN_FILE.match(path.name)
    if match is None:
        raise DataError(f"{path}: a DistServe run file is named vllm-N-RATE.csv")
    df = csv_cells(read_text(path, "a DistServe run"), path, DISTSERVE_COLUMNS, "DistServe runs")
    if int(match.group(1)) != len(df):
        raise DataError(f"{path}: the name says {match.group(1)} requests, the file has {len(df)}")
    # a row's number as a spreadsheet shows it: the header is row 1
    table = check_records(
        df.rename(columns=RENAMED),
        str(path),
        rows=np.arange(2, len(df) + 2),
        fields={new: old for old, new in RENAMED.items()},
    )
    return MeasuredRun(
        name=path.stem,
        dataset=dataset,
        table=table,
        rate_req_s=float(match.group(2)),
        sources=((str(path), sha256_of(path)),),
    )
