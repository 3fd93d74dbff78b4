"""DistServe's ``.exp`` files: a run's per-request records (into a
:class:`~.run.MeasuredRun`) and a run's arrival schedule (into a Trace).

DistServe (GitHub ``LLMServe/DistServe``, ``simdistserve/benchmarks/alignment/
data-ground-truth/``, commit 33c3d3b) publishes, per run:

- **ground truth** ``distserve-[SETUP-]N-RATE.exp``: line 1 a Python literal, a list of
  one dict per request with ``prompt_len``, ``output_len``, ``issue_time``,
  ``first_token_time``, ``complete_time`` (s, one clock) and the derived ``ttft_ms``,
  ``tpot_ms``, ``latency_ms``; then a summary block (``{``, ``key: value`` lines,
  ``}``). Read with :func:`ast.literal_eval`, never ``eval``: a call, a name or any
  expression that is not a literal is refused; so is a first line over
  :data:`MAX_LITERAL_CHARS` (the parser's tree of a literal takes tens of times its
  text) or nested beyond what Python's parser takes. Every request must have exactly
  these keys, each a number (not a bool); the derived fields must agree with the times
  within :data:`DERIVED_TOLERANCE_MS` (the published files agree to 1e-12 ms), and the
  summary's ``num_requests`` with the list.
- **workload** ``*.exp`` (the vLLM baseline's ``vllm-N-RATE.exp`` included): JSON, a list
  of ``{prompt_len, output_len, start_time}`` (s from the first), the requests the
  client sent: :func:`read_distserve_workload`.

Names: ``distserve-c21d11-300-3.exp`` is setup ``c21d11`` (context TP 2 PP 1, decoding
TP 1 PP 1 in DistServe's alignment script), 300 requests at 3 req/s; runs named
``distserve-N-RATE`` record no setup (``meta["setup"]`` None). The client records only
the requests that completed: a run has no failed request to report.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import shown
from pagesim.errors import DataError
from pagesim.records.cells import (
    MAX_CLOCK_S,
    check_rate,
    clock_column,
    first_line,
    load_json,
    read_text,
)
from pagesim.records.run import MeasuredRun, check_records, sha256_of
from pagesim.workloads.assemble import assemble_trace
from pagesim.workloads.lengthtable import MAX_TOKENS
from pagesim.workloads.trace import Trace

RUN_NAME = re.compile(r"^(?:distserve|vllm)-(?:(c\d+d\d+)-)?(\d+)-(\d+(?:\.\d+)?)\.exp$")
REQUEST_KEYS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time",
                "ttft_ms", "tpot_ms", "latency_ms")  # fmt: skip
WORKLOAD_KEYS = ("prompt_len", "output_len", "start_time")
#: the largest first line read: 16 MiB, 40 times DistServe's largest run (1,600 requests
#: in 385 KB); ast's tree of a literal takes tens of times its text in memory
MAX_LITERAL_CHARS = 16 << 20
#: how far a derived field (``ttft_ms``, ``tpot_ms``, ``latency_ms``) may be from the one
#: the times give
DERIVED_TOLERANCE_MS = 1e-3
SUMMARY_LINE = re.compile(r"^\s*(\w+)\s*:\s*(\S+)\s*$")


def recognises(path: Path) -> bool:
    """A ``.exp`` file whose first line is a Python literal list of dicts (``[{'``)."""
    if not (path.is_file() and path.suffix == ".exp"):
        return False
    return first_line(path, limit=16).lstrip().startswith("[{'")


def _name(path: Path) -> tuple[str | None, int, float]:
    match = RUN_NAME.match(path.name)
    if match is None:
        raise DataError(f"{path}: a DistServe run is named distserve-[SETUP-]N-RATE.exp")
    rate = check_rate(float(match.group(3)), f"{path}: the name's rate")
    return match.group(1), int(match.group(2)), rate


def _literal(line: str, path: Path) -> list:
    if len(line) > MAX_LITERAL_CHARS:
        raise DataError(
            f"{path}: line 1 holds {len(line):,} characters, more than the "
            f"{MAX_LITERAL_CHARS:,} this reader parses"
        )
    if not line.lstrip().startswith("["):
        raise DataError(
            f"{path}: line 1 must be a Python literal list of requests ([{{...}}, ...])"
        )
    try:
        value = ast.literal_eval(line)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        why = " ".join(str(exc).split())[:80] or type(exc).__name__
        raise DataError(
            f"{path}: line 1 is not a Python literal list of requests (literals only: "
            f"no names, calls or expressions; {why})"
        ) from None
    if not isinstance(value, list) or not value:
        raise DataError(f"{path}: line 1 must be a non-empty list of requests")
    return value


def _requests(items: list, path: Path) -> pd.DataFrame:
    """The list's dicts as a frame of floats, each key and value checked."""
    rows = []
    for i, item in enumerate(items, start=1):
        where = f"{path}: line 1, request {i}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected a dict, got {shown(item)}")
        extra = [k for k in item if k not in REQUEST_KEYS]
        missing = [k for k in REQUEST_KEYS if k not in item]
        if extra or missing:
            which = f"unknown key {extra[0]!r}" if extra else f"no key {missing[0]!r}"
            raise DataError(f"{where}: {which}; the keys are {list(REQUEST_KEYS)}")
        for key in REQUEST_KEYS:
            v = item[key]
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise DataError(f"{where}, {key}: must be a number, got {shown(v)}")
        rows.append([float(min(max(item[k], -1e300), 1e300)) for k in REQUEST_KEYS])
    return pd.DataFrame(rows, columns=list(REQUEST_KEYS))


def _check_derived(df: pd.DataFrame, path: Path) -> None:
    out = df["output_len"].to_numpy()
    first, issue = df["first_token_time"].to_numpy(), df["issue_time"].to_numpy()
    complete = df["complete_time"].to_numpy()
    tpot = np.where(out > 1, (complete - first) / np.maximum(out - 1, 1), 0.0)
    for key, value in (("ttft_ms", first - issue), ("latency_ms", complete - issue),
                       ("tpot_ms", tpot)):  # fmt: skip
        off = np.abs(df[key].to_numpy() - value * 1e3) > DERIVED_TOLERANCE_MS
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise DataError(
                f"{path}: line 1, request {i + 1}, {key}: {shown(df[key].iloc[i])} disagrees "
                f"with the request's times ({value[i] * 1e3:.6g} ms)"
            )


def _summary(lines: list[str], path: Path) -> dict[str, float]:
    summary: dict[str, float] = {}
    for number, line in enumerate(lines, start=2):
        if line.strip() in ("", "{", "}"):
            continue
        match = SUMMARY_LINE.match(line)
        try:
            value = float(match.group(2)) if match else float("nan")
        except ValueError:
            value = float("nan")
        if not np.isfinite(value):
            raise DataError(f"{path}: line {number}: expected `key: number`, got {shown(line)}")
        summary[match.group(1)] = value
    return summary


def read_distserve_exp(path: str | Path, dataset: str = "distserve_pd_opt13b") -> MeasuredRun:
    """A DistServe ground-truth run (module docstring); its name is the file's stem."""
    path = Path(path)
    setup, declared, rate = _name(path)
    first, *rest = read_text(path, "a DistServe run").split("\n")
    df = _requests(_literal(first, path), path)
    where = lambda i: f"{path}: line 1, request {i + 1}"  # noqa: E731
    for key in ("issue_time", "first_token_time", "complete_time"):
        clock_column(df[key], key, where)
    summary = _summary(rest, path)
    if len(df) != declared or summary.get("num_requests", len(df)) != len(df):
        raise DataError(
            f"{path}: {len(df)} requests; the name says {declared}, the summary "
            f"{summary.get('num_requests')!r}"
        )
    renamed = {"issue_time": "arrival_s", "first_token_time": "first_token_s",
               "complete_time": "finish_s"}  # fmt: skip
    table = check_records(
        df[list(REQUEST_KEYS[:5])].rename(columns=renamed),
        f"{path}: line 1 (a row is a request)",
        fields={new: old for old, new in renamed.items()},
    )
    _check_derived(df, path)
    meta: dict[str, Any] = {
        "setup": setup,
        "num_requests_named": declared,
        "rate": f"nominal: the file name says {rate:g} req/s",
        "summary": summary,
    }
    return MeasuredRun(
        name=path.stem,
        dataset=dataset,
        table=table,
        rate_req_s=rate,
        sources=((str(path), sha256_of(path)),),
        meta=meta,
    )


def read_distserve_workload(path: str | Path) -> Trace:
    """A DistServe workload ``.exp`` (JSON: module docstring) as a Trace, arrivals at
    ``start_time``; the name's request count is checked."""
    path = Path(path)
    setup, declared, rate = _name(path)
    doc = load_json(read_text(path, "a DistServe workload"), path, "a workload", constants=False)
    if not isinstance(doc, list) or not doc:
        raise DataError(f"{path}: expected a JSON list of {{prompt_len, output_len, start_time}}")
    for i, item in enumerate(doc, start=1):
        keys = sorted(item) if isinstance(item, dict) else None
        if keys != sorted(WORKLOAD_KEYS):
            raise DataError(f"{path}: request {i}: expected the keys {list(WORKLOAD_KEYS)}, "
                            f"got {shown(keys if keys is not None else item)}")  # fmt: skip
        for key in WORKLOAD_KEYS:
            v = item[key]
            bad_len = key != "start_time" and not (isinstance(v, int) and 1 <= v <= MAX_TOKENS)
            bad_time = key == "start_time" and not (
                isinstance(v, int | float) and 0 <= v <= MAX_CLOCK_S
            )
            if isinstance(v, bool) or bad_len or bad_time:
                rule = f"an integer from 1 to {MAX_TOKENS:,}" if key != "start_time" else (
                    f"a time from 0 to {MAX_CLOCK_S:.0e} s")  # fmt: skip
                raise DataError(f"{path}: request {i}, {key}: must be {rule}, got {shown(v)}")
    if len(doc) != declared:
        raise DataError(f"{path}: {len(doc)} requests; the name says {declared}")
    start = np.array([r["start_time"] for r in doc], dtype=float)
    if (np.diff(start) < 0).any():
        i = int(np.flatnonzero(np.diff(start) < 0)[0]) + 2
        raise DataError(f"{path}: request {i}, start_time: before the request above it")
    return assemble_trace(
        prompt_len=np.array([r["prompt_len"] for r in doc], dtype=np.int64),
        output_len=np.array([r["output_len"] for r in doc], dtype=np.int64),
        arrival_s=start - start[0],
        name=path.stem,
        source_note=f"DistServe workload {path.name} ({setup or 'no setup named'}, {rate:g} req/s)",
    )
