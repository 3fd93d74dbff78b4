"""The metrics of ``vllm bench serve``, under its names, computed from a run's requests.

Definitions follow vLLM's ``calculate_metrics`` (``vllm/benchmarks/serve.py``), with
the benchmark's client replaced by the simulated one: a request is sent at its
``arrival_s`` and streamed back token by token. Over the *completed* requests
(status ``finished``; rejected and unfinished ones are vLLM's failed requests):

- ``duration`` (``dur_s``): from the first arrival to the end of the run
  (``RunResult.extra["makespan_s"]``);
- ``completed``; ``request_throughput`` = completed / duration;
  ``output_throughput`` = returned output tokens / duration (``output_len`` per
  request, times ``n`` for parallel sampling, as pagesim's ``throughput_tok_s``);
  ``total_token_throughput`` = (prompt tokens + output tokens) / duration;
- TTFT = first token - arrival; E2EL = finish - arrival;
- TPOT (excludes the first token) = (E2EL - TTFT) / (output_len - 1), only for
  requests with more than one output token;
- ITL: every gap between consecutive output tokens of a request, pooled over all
  requests (:class:`~pagesim.simulator.token_gaps.TokenGaps`, recorded by the engine);
- for each of ttft, tpot, itl, e2el: ``mean_*_ms``, ``median_*_ms``, ``std_*_ms``
  (population std, as ``np.std``) and ``p<q>_*_ms`` for each chosen percentile ``q``
  (numpy's linear percentile; ``q`` printed as vLLM does: ``p99``, ``p99.9``);
- ``request_goodput`` (only when SLOs are given): completed requests whose TTFT,
  TPOT and E2EL are each <= its SLO, per second of duration; TPOT counts as 0 for a
  one-token output, as vLLM does;
- ``max_concurrent_requests``: the peak number of requests in flight, the intervals
  ``[arrival, finish)`` of completed requests swept with departures before arrivals
  at equal times.

One deliberate difference: where vLLM reports 0 for a statistic of an empty list
(no completed request, no TPOT sample, or no gap recorded), pagesim reports NaN, so
that "no data" never reads as a latency of 0 (ITL too when ``token_gaps`` is None:
both engines record gaps, so only a caller without them passes None).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pagesim.simulator.request import FINISHED
from pagesim.simulator.spec import MetricsSpec
from pagesim.simulator.token_gaps import TokenGaps

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
LEADING = (
    "completed",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
)


def percentile_label(q: float) -> str:
    """``99.0 -> "99"``, ``99.9 -> "99.9"`` (vLLM's ``p_word``)."""
    return str(int(q)) if int(q) == q else str(q)


def vllm_metric_columns(spec: MetricsSpec) -> tuple[str, ...]:
    """The vLLM-named columns a run with ``spec`` reports, in vLLM's order."""
    leading = [c for c in LEADING if c != "request_goodput" or spec.slo is not None]
    stats = ["mean", "median", "std"] + [f"p{percentile_label(q)}" for q in spec.percentiles]
    per_metric = [f"{s}_{m}_ms" for m in LATENCY_METRICS for s in stats]
    return (*leading, *per_metric, "max_concurrent_requests")


def is_vllm_column(name: str) -> bool:
    """Whether ``name`` is one of the vLLM-named columns (for any percentile choice)."""
    if name in LEADING or name == "max_concurrent_requests":
        return True
    head, _, tail = name.partition("_")
    return tail in {f"{m}_ms" for m in LATENCY_METRICS} and (
        head in ("mean", "median", "std") or _is_percentile_word(head)
    )


def _is_percentile_word(word: str) -> bool:
    try:
        return word.startswith("p") and 0 <= float(word[1:]) <= 100
    except ValueError:
        return False


def vllm_column_order(name: str) -> tuple:
    """Sort key putting vLLM-named columns in vLLM's order, whatever the percentiles."""
    if name in LEADING:
        return (0, LEADING.index(name))
    if name == "max_concurrent_requests":
        return (2,)
    head, _, tail = name.partition("_")
    stat = ("mean", "median", "std").index(head) if head in ("mean", "median", "std") else 3
    q = float(head[1:]) if stat == 3 else 0.0
    return (1, LATENCY_METRICS.index(tail.removesuffix("_ms")), stat, q)


def latency_stats(out: dict[str, float], name: str, values_ms: np.ndarray, qs) -> None:
    """``mean_/median_/std_/p<q>_<name>_ms`` of ``values_ms`` into ``out`` (NaN if empty)."""
    empty = len(values_ms) == 0
    out[f"mean_{name}_ms"] = math.nan if empty else float(np.mean(values_ms))
    out[f"median_{name}_ms"] = math.nan if empty else float(np.median(values_ms))
    out[f"std_{name}_ms"] = math.nan if empty else float(np.std(values_ms))
    for q in qs:
        key = f"p{percentile_label(q)}_{name}_ms"
        out[key] = math.nan if empty else float(np.percentile(values_ms, q))


def _itl_stats(out: dict[str, float], gaps: TokenGaps | None, qs) -> None:
    recorded = gaps is not None and gaps.num_gaps > 0
    out["mean_itl_ms"] = 1000 * gaps.mean() if recorded else math.nan
    out["median_itl_ms"] = 1000 * gaps.percentile(50) if recorded else math.nan
    out["std_itl_ms"] = 1000 * gaps.std() if recorded else math.nan
    for q in qs:
        out[f"p{percentile_label(q)}_itl_ms"] = 1000 * gaps.percentile(q) if recorded else math.nan


def max_concurrency(arrival_s: np.ndarray, finish_s: np.ndarray) -> int:
    """Peak overlap of the intervals ``[arrival, finish)`` (departures first at ties)."""
    if len(arrival_s) == 0:
        return 0
    times = np.concatenate([arrival_s, finish_s])
    deltas = np.concatenate([np.ones(len(arrival_s)), -np.ones(len(finish_s))])
    order = np.lexsort((deltas, times))
    return int(np.cumsum(deltas[order]).max())


def vllm_summary(
    requests: pd.DataFrame,
    *,
    duration_s: float,
    spec: MetricsSpec,
    token_gaps: TokenGaps | None,
) -> dict[str, float]:
    """The vLLM-named metrics of a run (module docstring), keyed as :func:`vllm_metric_columns`."""
    is_done = requests["status"] == FINISHED
    num_done = int(is_done.sum())

    def done(col: str) -> pd.Series:
        """One column of the completed requests (not a copy of the whole table)."""
        return requests.loc[is_done, col]

    output_len = done("output_len").to_numpy(dtype=np.int64)
    returned = np.where(done("beam_width").to_numpy() > 1, 1, done("n").to_numpy()) * output_len
    total_input = float(done("prompt_len").sum())
    total_output = float(returned.sum())
    ttft_ms = 1000 * done("ttft_s").to_numpy(dtype=np.float64)
    e2el_ms = 1000 * done("e2e_s").to_numpy(dtype=np.float64)
    multi = output_len > 1
    tpot_all_ms = np.where(multi, 1000 * done("tpot_s").to_numpy(dtype=np.float64), 0.0)

    def per_s(x: float) -> float:
        return x / duration_s if duration_s > 0 else math.nan

    out: dict[str, float] = {"completed": float(num_done), "request_throughput": per_s(num_done)}
    if spec.slo is not None:
        good = np.ones(num_done, dtype=bool)
        for values, bound in (
            (ttft_ms, spec.slo.ttft_ms),
            (tpot_all_ms, spec.slo.tpot_ms),
            (e2el_ms, spec.slo.e2el_ms),
        ):
            if bound is not None:
                good &= values <= bound
        out["request_goodput"] = per_s(float(good.sum()))
    out["output_throughput"] = per_s(total_output)
    out["total_token_throughput"] = per_s(total_input + total_output)
    latency_stats(out, "ttft", ttft_ms, spec.percentiles)
    latency_stats(out, "tpot", tpot_all_ms[multi], spec.percentiles)
    _itl_stats(out, token_gaps, spec.percentiles)
    latency_stats(out, "e2el", e2el_ms, spec.percentiles)
    out["max_concurrent_requests"] = float(
        max_concurrency(
            done("arrival_s").to_numpy(dtype=np.float64),
            done("finish_s").to_numpy(dtype=np.float64),
        )
    )
    assert tuple(out) == vllm_metric_columns(spec), "vLLM columns drifted"
    return out


def vllm_bench_result(result, spec: MetricsSpec, *, label: str = "pagesim") -> dict:
    """A run in the format of ``vllm bench serve --save-result --save-detailed``'s JSON.

    The keys and definitions are vLLM's (``vllm/benchmarks/serve.py``): ``duration``,
    ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``, the
    throughputs, ``max_concurrent_requests``, ``mean/median/std/p<q>_{ttft,tpot,itl,e2el}_ms``
    and, per request in arrival order, ``input_lens``, ``output_lens``, ``ttfts`` (s),
    ``start_times`` (the send times, s) and ``errors`` ("" for a completed request, else
    why not). ``itls`` (each request's token gaps) is not written: the engine keeps the
    gaps pooled for the ITL statistics, not per request (``pagesim_notes`` says so).
    No date (a run is a pure function of its spec). Values that are NaN (no data)
    are written as null.
    """
    req = result.requests.sort_values("arrival_s", kind="stable")
    done = req["status"] == FINISHED
    summary = result.summary

    def num(key: str):
        v = summary.get(key, math.nan)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    doc: dict = {
        "backend": "pagesim",
        "label": label,
        "num_prompts": int(len(req)),
        "duration": float(result.extra.get("makespan_s", math.nan)),
        "completed": int(done.sum()),
        "failed": int((~done).sum()),
        "total_input_tokens": int(req.loc[done, "prompt_len"].sum()),
        "total_output_tokens": int((req.loc[done, "output_len"] * req.loc[done, "n"]).sum()),
    }
    for key in sorted((k for k in summary if is_vllm_column(k)), key=vllm_column_order):
        doc[key] = num(key)
    for key in ("completed", "max_concurrent_requests"):  # counts, as vLLM writes them
        if doc.get(key) is not None:
            doc[key] = int(doc[key])
    ttft = req["ttft_s"].to_numpy(dtype=np.float64)
    doc |= {
        "input_lens": [int(x) for x in req["prompt_len"]],
        "output_lens": [int(x) if ok else 0 for x, ok in zip(req["output_len"], done, strict=True)],
        "ttfts": [
            float(x) if ok and np.isfinite(x) else 0.0 for x, ok in zip(ttft, done, strict=True)
        ],
        "start_times": [float(x) for x in req["arrival_s"]],
        "errors": [
            "" if ok else str(r or "not finished")
            for ok, r in zip(done, req["reason"], strict=True)
        ],
        "pagesim_notes": (
            "simulated by pagesim; 'itls' (per-request token gaps) is not written: the ITL "
            "statistics above pool every gap of the run"
        ),
    }
    return doc
