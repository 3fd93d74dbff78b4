"""LLMServingSim's real vLLM runs and workload files, read into pagesim's types.

LLMServingSim 2.0 (GitHub ``casys-kaist/LLMServingSim``, commit 5daddb2, MIT) published,
beside its simulator, real runs of vLLM 0.19.0 (the V1 engine) and the exact requests it
sent them. Two formats are read here:

- **A run** (``bench/examples/<GPU>/<model>/vllm/``, written by its ``bench/core/runner.py``):
  ``requests.jsonl``, one line per request with ``request_id`` (``bench-I``: line I of the
  workload file), ``input_toks``, ``output_toks``, ``arrival_time`` (the client's wall
  clock) and the engine's own ``RequestStateStats`` on its monotonic clock: ``queued_ts``,
  ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``; ``meta.json`` (the engine
  arguments, vLLM's version, the dataset's sha256; on the RTX 4090 run also the resolved
  configuration, ``num_gpu_blocks`` and the device); ``timeseries.csv`` (1 s ticks of
  ``running``, ``waiting``, ``kv_cache_pct`` and throughputs). :func:`read_llmservingsim_run` gives a
  :class:`~.run.MeasuredRun` whose arrival is the engine's ``queued_ts``, so TTFT =
  first_token − queued, as LLMServingSim's validation (``bench/core/validate.py``)
  computes it: the client's wall clock and the engine's monotonic clock cannot be
  subtracted from each other.
- **A flat workload** (``workloads/*.jsonl``): one request a line, ``input_toks``,
  ``output_toks``, ``arrival_time_ns`` (the client's send offset) and the prompt's token ids
  ``input_tok_ids``. :func:`read_workload` gives a pagesim Trace whose prompt segments
  make prefix-cache hits come out exactly as the token ids say (below);
  :func:`replay_trace` the same prompts at a measured run's engine arrival times. Agentic
  sessions (lines with ``sub_requests``: each call waits for the previous one) are a
  closed loop that a trace of fixed arrivals cannot express, and are refused.

Segments from token ids (:func:`prompt_segments`). A prompt's segments are the edges of a
compressed trie (radix tree) over all the prompts of the file: a prompt is cut wherever
some other prompt's longest common prefix with it ends, and the piece ending at depth b
is identified by the token prefix ``[0, b)``. Two prompts then carry the same segment ids
exactly as far as their token ids agree, and differ from the first token where they do
not (a prefix shorter than another prompt gets a cut where it ends). Prefix caching
hashes each full block from the segment pieces covering it (``allocators.prefix_cache``),
so two prompts share block i exactly when their token ids agree on tokens
``[0, (i + 1) B)``, for every block size B: the hits are the ones vLLM's chained block
hashes would find among these prompts. A segment per 16-token block, chained to its
parent, would give the same hits at B = 16 only, with a segment for every block; the trie
gives one segment per branch (the 300-prompt ShareGPT files: 32 prompts share at least a
block with an earlier one). Output tokens are not segments: vLLM also caches the blocks
a request generates, which a later prompt could hit; in LLMServingSim's ShareGPT files
no prompt extends an earlier request's output (later turns carry the original
conversation's replies, not the model's), so nothing is lost there.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import number_column
from pagesim.errors import DataError
from pagesim.records.cells import MAX_CLOCK_S, csv_header, load_json, read_text
from pagesim.records.run import MeasuredRun, check_records, sha256_of
from pagesim.workloads.assemble import assemble_trace
from pagesim.workloads.trace import Segments, Trace

DATASET = "llmservingsim_vllm019"
REQUEST_KEYS = (
    "request_id",
    "input_toks",
    "output_toks",
    "arrival_time",
    "queued_ts",
    "scheduled_ts",
    "first_token_ts",
    "last_token_ts",
)
TIMESERIES_COLUMNS = ("t", "running", "waiting", "kv_cache_pct")
WORKLOAD_KEYS = ("input_toks", "output_toks", "arrival_time_ns", "input_tok_ids")
#: the rate in LLMServingSim's workload names: ``...-300-sps10.jsonl`` is 10 sessions/s
SESSIONS_PER_S = re.compile(r"-sps(\d+(?:\.\d+)?)\.jsonl$")
REQUEST_ID = re.compile(r"^bench-(\d+)$")


def recognises(path: Path) -> bool:
    """A run folder: ``requests.jsonl`` in it or in its ``vllm/``."""
    return path.is_dir() and any((d / "requests.jsonl").is_file() for d in (path, path / "vllm"))


def _read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(read_text(path, what).splitlines(), start=1):
        if not line.strip():
            continue
        row = load_json(line, f"{path}: line {number}", "a request")
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number}: expected a JSON object")
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no requests")
    return rows


def _run_files(run_dir: Path) -> Path:
    """The folder holding requests.jsonl: ``run_dir`` itself or its ``vllm/``."""
    for folder in (run_dir / "vllm", run_dir):
        if (folder / "requests.jsonl").is_file():
            return folder
    raise DataError(
        f"{run_dir}: no requests.jsonl here or in {run_dir / 'vllm'} "
        "(an LLMServingSim run folder, bench/examples/<GPU>/<model>/)"
    )


def read_timeseries(path: Path) -> pd.DataFrame:
    """``timeseries.csv``: one row a tick (``t`` in s), ``running``, ``waiting``,
    ``kv_cache_pct`` (percent of the KV pool in use) and the throughputs."""
    text = read_text(path, "LLMServingSim's time series")
    names = csv_header(text, path)
    missing = [c for c in TIMESERIES_COLUMNS if c not in names]
    if missing:
        raise DataError(
            f"{path}: missing column {missing[0]!r}; required: {list(TIMESERIES_COLUMNS)}"
        )
    try:
        df = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(
            f"{path}: not a readable CSV table ({' '.join(str(exc).split())})"
        ) from None
    for col in TIMESERIES_COLUMNS:
        number_column(df[col], col, lambda i: f"{path}: row {i + 2}")
    return df


def _request_rows(requests: Path) -> list[dict[str, Any]]:
    """The per-request records, each with every key and served (no null time)."""
    rows = _read_jsonl(requests, "LLMServingSim's per-request records")
    for i, row in enumerate(rows, start=1):
        missing = [k for k in REQUEST_KEYS if k not in row]
        if missing:
            raise DataError(
                f"{requests}: line {i}: no key {missing[0]!r}; required: {list(REQUEST_KEYS)}"
            )
        unserved = [k for k in REQUEST_KEYS[3:] if row[k] is None]
        if unserved:
            raise DataError(
                f"{requests}: line {i} ({row['request_id']}): {unserved[0]} is null: the "
                "request was not served, and without its engine times its arrival is unknown"
            )
        for key in REQUEST_KEYS[3:]:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise DataError(f"{requests}: line {i}: {key} must be a number, got {value!r}")
            if not abs(value) <= MAX_CLOCK_S:
                raise DataError(
                    f"{requests}: line {i}: {key} must be a clock reading of at most "
                    f"{MAX_CLOCK_S:.0e} s in magnitude, got {value!r}"
                )
    return rows


def _meta_doc(meta_path: Path, num_rows: int, requests_name: str, sources: list) -> dict[str, Any]:
    """``meta.json`` (empty when absent; its sha256 appended to ``sources``)."""
    if not meta_path.is_file():
        return {}
    meta_doc = load_json(read_text(meta_path, "a run's meta.json"), meta_path, "meta.json")
    if not isinstance(meta_doc, dict):
        raise DataError(f"{meta_path}: expected a JSON object")
    sources.append((str(meta_path), sha256_of(meta_path)))
    declared = meta_doc.get("num_requests")
    if declared is not None and declared != num_rows:
        raise DataError(f"{meta_path}: num_requests is {declared}, {requests_name} has {num_rows}")
    return meta_doc


def read_llmservingsim_run(run_dir: str | Path, dataset: str = DATASET) -> MeasuredRun:
    """One LLMServingSim vLLM run (module docstring) as a :class:`MeasuredRun`.

    ``run_dir`` is ``<GPU>/<model>`` (or its ``vllm/`` folder). The table's arrival is the
    engine's ``queued_ts``; ``meta`` holds what ``meta.json`` says (``model``,
    ``vllm_version``, ``engine_kwargs``, and where recorded ``kv_cache``, ``hardware``,
    ``scheduler_config``, ``cache_config``), the dataset's name and sha256, and, in the
    table's row order, ``request_ids``, ``client_arrival_s`` (the client's wall clock,
    from its first request) and ``scheduled_s`` (the engine's first scheduling, on the
    table's clock), plus ``timeseries`` (:func:`read_timeseries`) when the file exists.
    The rate is the workload name's sessions per second (``-sps10``), else measured from
    the client's send times.
    """
    run_dir = Path(run_dir)
    folder = _run_files(run_dir)
    requests = folder / "requests.jsonl"
    rows = _request_rows(requests)
    sources = [(str(requests), sha256_of(requests))]
    meta_doc = _meta_doc(folder / "meta.json", len(rows), requests.name, sources)
    raw = pd.DataFrame(rows)
    # sort by the engine's arrival first, so the meta arrays below share the table's order
    # (check_records sorts stably, which then keeps this order)
    order = np.argsort(raw["queued_ts"].to_numpy(dtype=float), kind="stable")
    raw = raw.iloc[order].reset_index(drop=True)
    renamed = {
        "queued_ts": "arrival_s",
        "input_toks": "prompt_len",
        "output_toks": "output_len",
        "first_token_ts": "first_token_s",
        "last_token_ts": "finish_s",
    }
    table = check_records(
        raw.rename(columns=renamed),
        str(requests),
        rows=order + 1,
        fields={new: old for old, new in renamed.items()},
    )
    queued = raw["queued_ts"].to_numpy(dtype=float)
    client = raw["arrival_time"].to_numpy(dtype=float)
    meta: dict[str, Any] = {
        key: meta_doc[key]
        for key in ("model", "vllm_version", "engine_kwargs", "kv_cache", "hardware")
        if key in meta_doc
    }
    resolved = meta_doc.get("resolved_config") or {}
    for key in ("scheduler_config", "cache_config"):
        if isinstance(resolved.get(key), dict):
            meta[key] = resolved[key]
    dataset_path = str(meta_doc.get("dataset_path", ""))
    meta |= {
        "dataset_path": dataset_path,
        "dataset_sha256": meta_doc.get("dataset_hash"),
        "arrival_clock": "the engine's queued_ts (its monotonic clock, as the token times)",
        "request_ids": raw["request_id"].astype(str).tolist(),
        "client_arrival_s": client - client.min(),
        "scheduled_s": raw["scheduled_ts"].to_numpy(dtype=float) - queued.min(),
    }
    timeseries = folder / "timeseries.csv"
    if timeseries.is_file():
        meta["timeseries"] = read_timeseries(timeseries)
        sources.append((str(timeseries), sha256_of(timeseries)))
    match = SESSIONS_PER_S.search(dataset_path)
    if match:
        rate = float(match.group(1))
    else:
        span = float(client.max() - client.min())
        rate = (len(rows) - 1) / span if span > 0 else float("inf")
        meta["rate"] = "measured from the client's send times (the workload name gives none)"
    return MeasuredRun(
        name=f"{folder.parent.parent.name}-{folder.parent.name}"
        if folder.name == "vllm"
        else folder.name,
        dataset=dataset,
        table=table,
        rate_req_s=rate,
        sources=tuple(sources),
        meta=meta,
    )


# ---- workloads with token ids -----------------------------------------------------------


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prompt_segments(prompts: Sequence[Sequence[int]]) -> list[Segments]:
    """Each prompt's segments, ``(segment id, length)``, from its token ids (module docstring).

    Ids are numbered from 0 in order of first appearance (prompt order, then position), so
    the result depends on the prompts alone. Empty prompts are an error.
    """
    keys = [tuple(int(t) for t in p) for p in prompts]
    for i, key in enumerate(keys):
        if not key:
            raise DataError(f"prompt {i}: no tokens")
    n = len(keys)
    order = sorted(range(n), key=keys.__getitem__)
    # in lexicographic order, a prompt's longest common prefix with any other prompt is a
    # running minimum of the adjacent prefixes towards it: every cut is one of those
    adjacent = [_common_prefix(keys[order[i]], keys[order[i + 1]]) for i in range(n - 1)]
    cuts: list[set[int]] = [set() for _ in range(n)]
    for pos, i in enumerate(order):
        for step in (-1, 1):
            least = len(keys[i])
            j = pos if step > 0 else pos - 1
            while 0 <= j < n - 1 and least > 0:
                least = min(least, adjacent[j])
                if 0 < least < len(keys[i]):
                    cuts[i].add(least)
                j += step
    ids: dict[tuple[int, ...], int] = {}
    out: list[Segments] = []
    for i, key in enumerate(keys):
        ends = [*sorted(cuts[i]), len(key)]
        segments = []
        start = 0
        for end in ends:
            seg_id = ids.setdefault(key[:end], len(ids))
            segments.append((seg_id, end - start))
            start = end
        out.append(tuple(segments))
    return out


def _workload_rows(path: Path) -> list[dict[str, Any]]:
    rows = _read_jsonl(path, "an LLMServingSim workload file")
    for i, row in enumerate(rows, start=1):
        if "sub_requests" in row:
            raise DataError(
                f"{path}: line {i} is an agentic session (sub_requests): each call waits for "
                "the previous one's completion, a closed loop that a trace of fixed arrivals "
                "cannot express"
            )
        missing = [k for k in WORKLOAD_KEYS if k not in row]
        if missing:
            raise DataError(
                f"{path}: line {i}: no key {missing[0]!r}; required: {list(WORKLOAD_KEYS)}"
            )
        ids = row["input_tok_ids"]
        if not isinstance(ids, list) or len(ids) != row["input_toks"]:
            raise DataError(
                f"{path}: line {i}: input_tok_ids has {len(ids) if isinstance(ids, list) else ids!r} "
                f"tokens, input_toks says {row['input_toks']}"
            )
        for key in ("input_toks", "output_toks"):
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(f"{path}: line {i}: {key} {value!r} is not a token count >= 1")
    return rows


def read_workload(path: str | Path, name: str | None = None) -> Trace:
    """A flat LLMServingSim workload (module docstring) as a Trace: arrivals at the
    client's send offsets (``arrival_time_ns``, in seconds), prompt segments from the
    token ids (:func:`prompt_segments`), the requested output lengths."""
    path = Path(path)
    rows = _workload_rows(path)
    arrival = np.array([r["arrival_time_ns"] for r in rows], dtype=np.float64) / 1e9
    if not np.isfinite(arrival).all() or (arrival < 0).any():
        raise DataError(f"{path}: arrival_time_ns must be finite and >= 0")
    order = np.argsort(arrival, kind="stable")
    return _trace(
        [rows[i] for i in order],
        arrival[order],
        name or path.stem,
        f"LLMServingSim workload {path.name} (exact prompts: segments from token ids)",
    )


def replay_trace(run: MeasuredRun, workload: str | Path) -> Trace:
    """The run's exact requests: its engine arrival times (``run.table``) with the prompts'
    segments from the workload file it was sent (matched by ``request_id`` = ``bench-I``,
    line I of the file, and checked: the file's sha256 against the run's ``dataset_hash``
    where recorded, and every request's token counts)."""
    path = Path(workload)
    declared = run.meta.get("dataset_sha256")
    if declared and declared != sha256_of(path):
        raise DataError(
            f"{path}: sha256 differs from the dataset_hash of run {run.name} ({declared[:12]}...): "
            "not the workload this run was sent"
        )
    rows = _workload_rows(path)
    picked = []
    for rid, prompt, output in zip(
        run.meta["request_ids"], run.table["prompt_len"], run.table["output_len"], strict=True
    ):
        match = REQUEST_ID.match(rid)
        if match is None or int(match.group(1)) >= len(rows):
            raise DataError(f"run {run.name}: request id {rid!r} names no line of {path.name}")
        row = rows[int(match.group(1))]
        if (row["input_toks"], row["output_toks"]) != (prompt, output):
            raise DataError(
                f"run {run.name}: {rid} has {prompt} / {output} tokens, line "
                f"{int(match.group(1)) + 1} of {path.name} has {row['input_toks']} / {row['output_toks']}"
            )
        picked.append(row)
    return _trace(
        picked,
        run.table["arrival_s"].to_numpy(dtype=float),
        run.name,
        f"{run.dataset} run {run.name}: engine arrivals, prompts of {path.name}",
    )


def _trace(rows: list[dict[str, Any]], arrival_s: np.ndarray, name: str, note: str) -> Trace:
    segments = prompt_segments([r["input_tok_ids"] for r in rows])
    return assemble_trace(
        prompt_len=np.array([r["input_toks"] for r in rows], dtype=np.int64),
        output_len=np.array([r["output_toks"] for r in rows], dtype=np.int64),
        arrival_s=arrival_s,
        segments=segments,
        name=name,
        source_note=note,
    )
