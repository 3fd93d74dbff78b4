"""``vllm bench serve --save-result --save-detailed``'s JSON, into a :class:`~.run.MeasuredRun`.

The keys are vLLM's (``vllm/benchmarks/serve.py``): per request ``input_lens``,
``output_lens``, ``ttfts`` (s), ``itls`` (s: the gaps between a request's output tokens,
one per token after the first), ``errors`` and, where the version writes them,
``start_times`` (s: the send times). Without send times the requests are taken to be
sent at the run's ``request_rate`` evenly spaced (said in the run's ``meta``).

Every array is checked element by element, and an error names the file, the key and
the request's index (``ttfts[3]``): an array that is not a list of one entry per
request; an entry that is not a JSON number (a string, ``true``, a nested list);
a token count that is not an integer from 1 to ``MAX_TOKENS``; a TTFT or a gap that is
negative or beyond :data:`~.cells.MAX_CLOCK_S`; a send time beyond a clock's range
(``1e300``); a request whose ``itls`` does not hold ``output_len - 1`` gaps (a file whose
gaps and counts disagree has the wrong token times: 740 gaps for a 75-token output is
not a measurement to sum); a stated rate that is not in (0, 1e6] req/s. A rate of
``"inf"`` (vLLM's "send everything at once") is read only beside send times.

Failed requests (``errors`` not empty) are refused, one line naming the first: this
format keeps for a failed request its prompt length and the error text only, and does
not say whether it reached the engine (a prompt too long is answered at once, a client
timeout loaded the server), so no one rule for its load is right; keeping the refusal
asks the user to decide (``pagesim.records.run``: the rule for failed requests).
``meta["token_times_s"]`` holds every output token's time on the table's clock (the
step ends that ``replay-vllm --scheduler-alone`` reads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.columns import integer_column, shown
from pagesim.errors import DataError
from pagesim.records.cells import MAX_CLOCK_S, check_rate, load_json, read_text
from pagesim.records.run import MeasuredRun, check_records, sha256_of
from pagesim.workloads.lengthtable import MAX_TOKENS

#: ``vllm bench serve --save-detailed``'s per-request arrays this reader needs
BENCH_ARRAYS = ("input_lens", "output_lens", "ttfts")
META_KEYS = ("model_id", "backend", "request_rate", "burstiness", "max_concurrency", "date")


def recognises(path: Path) -> bool:
    """A ``.json`` file (vllm bench serve's result)."""
    return path.is_file() and path.suffix == ".json"


def _numbers(values: list, key: str, path: Path, low: float, high: float) -> np.ndarray:
    """Each entry a JSON number (not a bool, a string or a list) from ``low`` to ``high``."""
    out = np.empty(len(values))
    for i, v in enumerate(values):
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        try:
            out[i] = float(v) if ok else np.nan
        except OverflowError:
            out[i] = np.inf
        if not (ok and np.isfinite(out[i]) and low <= out[i] <= high):
            rule = "a number" if not ok else f"a finite number from {low:g} to {high:g}"
            raise DataError(f"{path}: {key}[{i}] must be {rule}, got {shown(v)}")
    return out


def _arrays(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    missing = [k for k in BENCH_ARRAYS if k not in doc]
    if missing:
        raise DataError(
            f"{path}: no key {missing[0]!r}: save the result with `vllm bench serve "
            "--save-result --save-detailed`"
        )
    num = len(doc["input_lens"]) if isinstance(doc["input_lens"], list) else -1
    arrays = {k: doc[k] for k in (*BENCH_ARRAYS, "itls", "start_times", "errors") if k in doc}
    for key, values in arrays.items():
        if not isinstance(values, list) or len(values) != num or num == 0:
            raise DataError(
                f"{path}: {key!r} must be a list of {max(num, 1)} entries (one per request)"
            )
    return arrays


def _token_counts(values: list, key: str, path: Path) -> np.ndarray:
    floats = _numbers(values, key, path, -np.inf, np.inf)
    return integer_column(
        pd.Series(floats), key, lambda i: f"{path}: {key}[{i}]", low=1, high=MAX_TOKENS
    )


def _gaps(itls: list, output_len: np.ndarray, path: Path) -> list[np.ndarray]:
    """Each request's token gaps, checked: numbers, ``output_len - 1`` of them."""
    out = []
    for i, (gaps, n) in enumerate(zip(itls, output_len.tolist(), strict=True)):
        if not isinstance(gaps, list):
            raise DataError(f"{path}: itls[{i}] must be a list of token gaps, got {shown(gaps)}")
        if len(gaps) != n - 1:
            raise DataError(
                f"{path}: itls[{i}] holds {len(gaps)} token gaps, output_lens[{i}] = {n} "
                f"needs {n - 1}: the gaps and the token count disagree"
            )
        out.append(_numbers(gaps, f"itls[{i}]", path, 0.0, MAX_CLOCK_S))
    return out


def _arrivals(arrays: dict, doc: dict, num: int, path: Path, meta: dict) -> np.ndarray:
    rate = doc.get("request_rate")
    if "start_times" in arrays:
        return _numbers(arrays["start_times"], "start_times", path, -MAX_CLOCK_S, MAX_CLOCK_S)
    if _all_at_once(rate):
        raise DataError(
            f"{path}: no 'start_times' and request_rate {rate!r} (all at once): the requests' "
            "send times are unknown"
        )
    if rate is None:
        raise DataError(f"{path}: no 'start_times' and no 'request_rate': send times unknown")
    rate = check_rate(rate, f"{path}: request_rate")
    meta["arrivals"] = f"not in the file: taken evenly spaced at request_rate {rate:g} req/s"
    return np.arange(num) / rate


def _all_at_once(rate: Any) -> bool:
    """vLLM's infinite rate: the string ``"inf"`` or a float infinity."""
    return rate == "inf" or (isinstance(rate, float) and rate == float("inf"))


def read_vllm_bench_json(path: str | Path, dataset: str = "vllm-bench-serve") -> MeasuredRun:
    """A ``vllm bench serve --save-result --save-detailed`` result (module docstring)."""
    path = Path(path)
    doc = load_json(read_text(path, "a vllm bench serve result"), path, "a bench result")
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a JSON object (vllm bench serve's result)")
    arrays = _arrays(doc, path)
    num = len(arrays["input_lens"])
    for i, err in enumerate(arrays.get("errors", [""] * num)):
        if err:
            raise DataError(
                f"{path}: errors[{i}]: request {i} failed ({str(err)[:80]!r}); this format does "
                "not say whether it loaded the server, so it cannot be replayed"
            )
    meta = {k: doc[k] for k in META_KEYS if k in doc}
    rate = doc.get("request_rate")
    if rate is not None and not _all_at_once(rate):
        check_rate(rate, f"{path}: request_rate")
    prompt = _token_counts(arrays["input_lens"], "input_lens", path)
    output = _token_counts(arrays["output_lens"], "output_lens", path)
    ttft = _numbers(arrays["ttfts"], "ttfts", path, 0.0, MAX_CLOCK_S)
    if "itls" not in arrays:
        duration = doc.get("duration")
        raise DataError(
            f"{path}: no 'itls' per request: the finish times are unknown (duration {duration!r})"
        )
    gaps = _gaps(arrays["itls"], output, path)
    arrival = _arrivals(arrays, doc, num, path, meta)
    decode = np.array([float(np.sum(g)) for g in gaps])
    df = pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_len": prompt,
            "output_len": output,
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + decode,
        }
    )
    fields = {"arrival_s": "start_times", "first_token_s": "ttfts", "finish_s": "itls"}
    table = check_records(df, str(path), rows=np.arange(num), fields=fields)
    # every output token's time, on the table's clock (the first send at 0): the step ends
    # a V1 server's replay reads (calibrate/step_times.py, from_token_times)
    meta["token_times_s"] = np.concatenate(
        [
            a + t + np.concatenate([[0.0], np.cumsum(g)])
            for a, t, g in zip(arrival - arrival.min(), ttft, gaps, strict=True)
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
