"""LMBench's per-request CSVs (as llm-d's benchmark published them), into a
:class:`~.run.MeasuredRun`.

LMBench (GitHub ``LMCache/LMBenchmark``; the copies read here are llm-d's, GitHub
``llm-d/llm-d-benchmark``, ``data/``, May 2025) writes one row per request it saw
finish: ``prompt_tokens``, ``generation_tokens`` (the server's usage counts),
``ttft`` (s), ``generation_time`` (s: first token to last), ``launch_time`` and
``finish_time`` (Unix s), and for its multi-round QA workloads ``user_id`` and
``question_id`` (the round, from 1). The client's code (``synthetic-multi-round-qa/
multi-round-qa.py``, commit e2da444, April 2025; ``sharegpt/sharegpt-qa.py`` alike):
``launch_time`` is taken just before the request is sent, ``ttft`` when the first
non-empty chunk arrives, ``generation_time`` and ``finish_time`` after the last. So
arrival = ``launch_time``, first token = launch + ``ttft``, finish = ``finish_time``.
``finish_time`` is a second clock reading just after ``generation_time``'s: it must
equal launch + ttft + generation_time within :data:`FINISH_TOLERANCE_S` (in llm-d's
61,459 rows the two differ by 0 to 74 µs, never more), or the row is refused.

What the files cannot show: the client writes only requests that finished while it
ran (``UserSessionManager.summary``); a request that raised, or was still running when
the client stopped, is not in the file, though it loaded the server (said in
``meta``). A row whose ``ttft`` and ``generation_time`` are both 0 is what the client
writes when no token came back: it is a failed request (the rule of :mod:`.run`),
replayed with ``max(1, generation_tokens)`` output tokens.

Multi-round QA runs (``user_id``, ``question_id``): each user's conversation is rebuilt
as the trace's segments (:mod:`.conversations`), so prefix caching sees each round's
shared history, and the trace's ``user_id`` column is the file's. The system prompt all
users start with is ``system_prompt_tokens`` long: by default the LMBench script's
setting for the file's workload (:data:`SYSTEM_PROMPT_TOKENS`); the chat template's
preamble and the prompt's few words around it, shared too, are not counted. The
``sharegpt`` runs share nothing. The rate is the file name's (``..._qps1.5.csv``,
``..._output_0.5.csv``), else measured from the launch times (``meta["rate"]``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import integer_column
from pagesim.errors import DataError
from pagesim.records.cells import (
    check_rate,
    clock_column,
    csv_cells,
    csv_header,
    duration_column,
    first_line,
    read_text,
    row_of,
)
from pagesim.records.conversations import rebuild
from pagesim.records.run import MeasuredRun, check_records, sha256_of
from pagesim.workloads.lengthtable import MAX_TOKENS

COLUMNS = ("prompt_tokens", "generation_tokens", "ttft", "generation_time", "launch_time",
           "finish_time")  # fmt: skip
ROUND_COLUMNS = ("user_id", "question_id")
#: finish_time against launch + ttft + generation_time (module docstring): two reads of
#: the clock microseconds apart; 10 ms is far beyond that and far below any latency
FINISH_TOLERANCE_S = 0.01
#: the workload in LMBench's file names (``LMBench_short_input_qps1.csv``)
WORKLOAD = re.compile(r"^LMBench_(sharegpt|short_input|long_input)_")
RATE = re.compile(r"(?:_|qps)(\d+(?:\.\d+)?)\.csv(?:\.gz)?$")
#: LMBench's system prompt per workload (``synthetic-multi-round-qa/*.sh`` at e2da444):
#: ``long_input_short_output_run.sh`` SYSTEM_PROMPT=1000; ``short_input_short_output.sh``
#: SYSTEM_PROMPT=0, which reaches the client through ``wc -w`` as 1 word: about 0
SYSTEM_PROMPT_TOKENS = {"long_input": 1000, "short_input": 0}


def recognises(path: Path) -> bool:
    """A CSV (or ``.csv.gz``) whose header has LMBench's columns."""
    if not (path.is_file() and path.name.endswith((".csv", ".csv.gz"))):
        return False
    try:
        names = csv_header(first_line(path), path)
    except DataError:
        return False
    return all(c in names for c in COLUMNS)


def _cells(path: Path) -> tuple[pd.DataFrame, bool]:
    cells = csv_cells(read_text(path, "LMBench records"), path, COLUMNS, "LMBench records")
    rounds = [c in cells.columns for c in ROUND_COLUMNS]
    if any(rounds) and not all(rounds):
        missing = ROUND_COLUMNS[rounds.index(False)]
        raise DataError(f"{path}: row 1: a multi-round file needs both {list(ROUND_COLUMNS)}, "
                        f"{missing!r} is missing")  # fmt: skip
    return cells, all(rounds)


def _columns(cells: pd.DataFrame, path: Path) -> dict[str, np.ndarray]:
    where = row_of(path)
    out = {
        col: integer_column(cells[col], col, where, low=0, high=MAX_TOKENS)
        for col in ("prompt_tokens", "generation_tokens")
    }
    for col in ("ttft", "generation_time"):
        out[col] = duration_column(cells[col], col, where)
    for col in ("launch_time", "finish_time"):
        out[col] = clock_column(cells[col], col, where)
    out["failed"] = (out["ttft"] == 0) & (out["generation_time"] == 0)
    for col, bad in (
        ("prompt_tokens", out["prompt_tokens"] < 1),
        ("generation_tokens", ~out["failed"] & (out["generation_tokens"] < 1)),
    ):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"{where(i)}: {col} is 0: the server's token count is missing")
    expected = out["launch_time"] + out["ttft"] + out["generation_time"]
    off = ~out["failed"] & (np.abs(out["finish_time"] - expected) > FINISH_TOLERANCE_S)
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise DataError(
            f"{where(i)}: finish_time {cells['finish_time'].iloc[i]} is "
            f"{out['finish_time'][i] - expected[i]:+.3f} s from launch_time + ttft + "
            f"generation_time: not the client's clock readings this reader takes them for"
        )
    return out


def _rounds(cells: pd.DataFrame, cols: dict, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``user_id`` and ``question_id``, checked: one row per round, each round launched
    after the previous one of its user finished (its prompt holds that answer)."""
    where = row_of(path)
    user = integer_column(cells["user_id"], "user_id", where, low=0, high=2**53)
    question = integer_column(cells["question_id"], "question_id", where, low=1, high=2**31)
    order = np.lexsort((question, user))
    u, q = user[order], question[order]
    same = u[1:] == u[:-1]
    repeated = same & (q[1:] == q[:-1])
    if repeated.any():
        i = int(order[1:][repeated][0])
        raise DataError(f"{where(i)}: user_id {user[i]} has question_id {question[i]} twice")
    early = same & (cols["launch_time"][order[1:]] < cols["finish_time"][order[:-1]])
    if early.any():
        i = int(order[1:][early][0])
        raise DataError(
            f"{where(i)}: launch_time: user {user[i]}'s question {question[i]} was launched "
            "before its previous round finished, so its prompt cannot hold that answer"
        )
    return user, question


def _rate(path: Path, launch: np.ndarray, meta: dict) -> float:
    match = RATE.search(path.name)
    if match:
        meta["rate"] = f"nominal: the file name says {match.group(1)} req/s"
        return check_rate(float(match.group(1)), f"{path}: the name's rate")
    span = float(launch.max() - launch.min())
    meta["rate"] = "measured from the launch times (the file name states none)"
    return (len(launch) - 1) / span if span > 0 else float("inf")


def read_lmbench_csv(
    path: str | Path, system_prompt_tokens: int | None = None, dataset: str = "lmbench"
) -> MeasuredRun:
    """One LMBench run (module docstring); its name is the file's name without
    ``.csv``/``.csv.gz``."""
    path = Path(path)
    cells, multi_round = _cells(path)
    cols = _columns(cells, path)
    kind = WORKLOAD.match(path.name)
    meta: dict[str, Any] = {
        "workload": kind.group(1) if kind else None,
        "num_failed": int(cols["failed"].sum()),
        "not_recorded": "requests that raised, or were running when the client stopped, "
        "are not in LMBench's files",
        "finish_check": f"finish_time = launch_time + ttft + generation_time within "
        f"{FINISH_TOLERANCE_S * 1e3:g} ms in every served row",
    }
    output = np.maximum(cols["generation_tokens"], 1)
    df = pd.DataFrame(
        {
            "arrival_s": cols["launch_time"],
            "prompt_len": cols["prompt_tokens"],
            "output_len": output,
            "first_token_s": cols["launch_time"] + cols["ttft"],
            "finish_s": cols["finish_time"],
            "failed": cols["failed"],
        }
    )
    if multi_round:
        user, question = _rounds(cells, cols, path)
        system = system_prompt_tokens
        if system is None:
            system = SYSTEM_PROMPT_TOKENS.get(meta["workload"], 0)
        if isinstance(system, bool) or not isinstance(system, int) or system < 0:
            raise DataError(f"system_prompt_tokens must be an integer >= 0, got {system!r}")
        built = rebuild(user, question, cols["prompt_tokens"], cols["generation_tokens"], system)
        df["user_id"] = user
        df["segments"] = built.segments
        meta |= {
            "system_prompt_tokens": system,
            "num_users": built.num_users,
            "num_later_rounds": built.num_later_rounds,
            "num_short_rounds": built.num_short_rounds,
            "history_share": built.history_share,
        }
    fields = {"arrival_s": "launch_time", "first_token_s": "ttft", "finish_s": "finish_time",
              "prompt_len": "prompt_tokens", "output_len": "generation_tokens"}  # fmt: skip
    table = check_records(df, str(path), rows=np.arange(2, len(df) + 2), fields=fields)
    rate = _rate(path, cols["launch_time"], meta)
    return MeasuredRun(
        name=re.sub(r"\.csv(\.gz)?$", "", path.name),
        dataset=dataset,
        table=table,
        rate_req_s=float(rate),
        sources=((str(path), sha256_of(path)),),
        meta=meta,
    )
