"""Readers of real servers' per-request records, each into a :class:`.records.MeasuredRun`.

- :func:`read_distserve_csv`: DistServe's vLLM runs (GitHub ``LLMServe/DistServe``,
  ``simdistserve/benchmarks/alignment/data-ground-truth/``), one CSV per run named
  ``vllm-N-RATE.csv`` (N requests at RATE req/s) with ``issue_time``,
  ``first_token_time``, ``complete_time`` (s), ``prompt_len``, ``output_len``.
- :func:`read_vllm_bench_json`: the JSON that ``vllm bench serve --save-result
  --save-detailed`` writes (``vllm/benchmarks/serve.py``), with its per-request arrays.

Every reader ends in :func:`.records.check_records`, so what they return is checked the
same way; a file that cannot be read is one line naming it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.workloads.records import MeasuredRun, check_records, sha256_of

DISTSERVE_RUN_FILE = re.compile(r"^vllm-(\d+)-(\d+(?:\.\d+)?)\.csv$")
DISTSERVE_COLUMNS = ("issue_time", "first_token_time", "complete_time", "prompt_len", "output_len")


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable CSV table ({exc})") from None


def read_distserve_csv(path: str | Path, dataset: str = "distserve_vllm_opt13b") -> MeasuredRun:
    """One DistServe run (module docstring); its name is the file's stem."""
    path = Path(path)
    match = DISTSERVE_RUN_FILE.match(path.name)
    if match is None:
        raise DataError(f"{path}: a DistServe run file is named vllm-N-RATE.csv")
    df = _read_csv(path)
    missing = [c for c in DISTSERVE_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(
            f"{path}: missing column {missing[0]!r}; required: {list(DISTSERVE_COLUMNS)}"
        )
    if int(match.group(1)) != len(df):
        raise DataError(f"{path}: the name says {match.group(1)} requests, the file has {len(df)}")
    renamed = df.rename(
        columns={
            "issue_time": "arrival_s",
            "first_token_time": "first_token_s",
            "complete_time": "finish_s",
        }
    )
    # a row's number as a spreadsheet shows it: the header is line 1
    table = check_records(renamed, str(path), rows=np.arange(2, len(df) + 2))
    return MeasuredRun(
        name=path.stem,
        dataset=dataset,
        table=table,
        rate_req_s=float(match.group(2)),
        sources=((str(path), sha256_of(path)),),
    )


#: ``vllm bench serve --save-detailed``'s per-request arrays this reader needs
BENCH_ARRAYS = ("input_lens", "output_lens", "ttfts")


def read_vllm_bench_json(path: str | Path, dataset: str = "vllm-bench-serve") -> MeasuredRun:
    """A ``vllm bench serve --save-result --save-detailed`` result (its keys: vLLM's
    ``vllm/benchmarks/serve.py``). Per request: ``input_lens``, ``output_lens``,
    ``ttfts`` (s), ``itls`` (s, the gaps between output tokens) and, where the version
    writes them, ``start_times`` (s; the send times). Without send times the requests are
    taken to be sent at the run's ``request_rate`` evenly spaced (said in the run's
    ``meta``). A failed request (``errors`` not empty, or no TTFT) is refused: a replay
    cannot leave it out without changing the load. ``meta["token_times_s"]`` holds every
    output token's time on the table's clock (the step ends that ``replay-vllm
    --scheduler-alone`` reads)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a JSON object (vllm bench serve's result)")
    missing = [k for k in BENCH_ARRAYS if k not in doc]
    if missing:
        raise DataError(
            f"{path}: no key {missing[0]!r}: save the result with `vllm bench serve "
            "--save-result --save-detailed`"
        )
    num = len(doc["input_lens"])
    arrays = {k: doc[k] for k in (*BENCH_ARRAYS, "itls", "start_times", "errors") if k in doc}
    for key, values in arrays.items():
        if not isinstance(values, list) or len(values) != num:
            raise DataError(f"{path}: {key!r} must be a list of {num} entries (one per request)")
    errors = arrays.get("errors", [""] * num)
    for i, err in enumerate(errors):
        if err:
            raise DataError(
                f"{path}: request {i} failed ({str(err)[:80]!r}); replay needs every request served"
            )
    meta = {
        k: doc[k]
        for k in ("model_id", "backend", "request_rate", "burstiness", "max_concurrency", "date")
        if k in doc
    }
    rate = doc.get("request_rate")
    if "start_times" in arrays:
        arrival = np.asarray(arrays["start_times"], dtype=float)
    elif isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < float("inf"):
        arrival = np.arange(num) / float(rate)
        meta["arrivals"] = f"not in the file: taken evenly spaced at request_rate {rate:g} req/s"
    else:
        raise DataError(
            f"{path}: no 'start_times' and no finite 'request_rate': the requests' send times are unknown"
        )
    ttft = np.asarray(arrays["ttfts"], dtype=float)
    itls = arrays.get("itls")
    if itls is not None:
        decode = np.array([float(np.sum(x)) if isinstance(x, list) else np.nan for x in itls])
    else:
        duration = doc.get("duration")
        raise DataError(
            f"{path}: no 'itls' per request: the finish times are unknown (duration {duration!r})"
        )
    df = pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_len": arrays["input_lens"],
            "output_len": arrays["output_lens"],
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + decode,
        }
    )
    table = check_records(df, str(path), rows=np.arange(num))
    # every output token's time, on the table's clock (the first send at 0): the step ends
    # a V1 server's replay reads (calibrate/step_times.py, from_token_times)
    meta["token_times_s"] = np.concatenate(
        [
            a + t + np.concatenate([[0.0], np.cumsum(np.asarray(g, dtype=float))])
            for a, t, g in zip(arrival - arrival.min(), ttft, itls, strict=True)
        ]
    )
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not np.isfinite(rate):
        span = float(table["arrival_s"].iloc[-1])
        rate = (num - 1) / span if span > 0 else float("inf")
    return MeasuredRun(
        name=path.stem,
        dataset=dataset,
        table=table,
        rate_req_s=float(rate),
        sources=((str(path), sha256_of(path)),),
        meta=meta,
    )
