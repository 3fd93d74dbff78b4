"""Statistics of a workload for ``pagesim workload stats``: the raw table, and the filters.

For table and csv workloads the numbers describe the raw table, unfiltered (e.g.
azure-conv: 19,366 requests, mean prompt 1,154.7, mean output 211.1), and, as a
separate part, what the default filters of a run (``WorkloadSpec`` defaults and the
given ``max_model_len``) would drop from it. For the ``chat`` view the prompt is the
turn's truncated history + message. Synthetic workloads have no table: their
numbers describe a sample drawn with a fixed seed.
"""

from __future__ import annotations

import numpy as np

from pagesim.workloads.build import build_trace
from pagesim.workloads.chat import chat_prompt_len
from pagesim.workloads.filters import apply_filters
from pagesim.workloads.registry import get_source, load_rows
from pagesim.workloads.spec import ArrivalSpec, WorkloadSpec

SYNTHETIC_SAMPLE_SIZE = 10_000


def _describe_lengths(label: str, v: np.ndarray) -> str:
    if len(v) == 0:
        return f"{label}: (none)"
    return (
        f"{label}: mean {v.mean():,.1f}  median {np.median(v):,.1f}  "
        f"p99 {np.percentile(v, 99):,.1f}  max {int(v.max()):,}"
    )


def workload_stats_lines(name: str, *, path: str | None, max_model_len: int) -> list[str]:
    """Human-readable lines (see the module docstring)."""
    source = get_source(name)
    spec = WorkloadSpec(name=name, path=path)
    if source.kind == "synthetic":
        trace = build_trace(
            spec.model_copy(update={"num_requests": SYNTHETIC_SAMPLE_SIZE}), ArrivalSpec(process="burst"),
            max_model_len=max_model_len, rng=np.random.default_rng(0),
        )  # fmt: skip
        lines = [
            f"workload: {name} ({source.description})",
            f"sample: {len(trace):,} requests drawn with seed 0, after the default filters",
            _describe_lengths("prompt_len", trace.table["prompt_len"].to_numpy()),
            _describe_lengths("output_len", trace.table["output_len"].to_numpy()),
        ]
        return lines + [
            f"dropped while drawing: {reason}: {n:,}" for reason, n in trace.dropped.items()
        ]
    table = load_rows(name, path)
    prompt = chat_prompt_len(table) if source.view == "chat" else table.prompt_len
    lines = [
        f"workload: {name} ({source.description})",
        f"source: {table.source_note}",
        f"requests: {len(table):,} (raw table, no filters)",
        _describe_lengths("prompt_len", prompt),
        _describe_lengths("output_len", table.output_len),
    ]
    if table.arrival_s is not None and len(table) > 1:
        span = float(table.arrival_s[-1] - table.arrival_s[0])
        rate = (len(table) - 1) / span if span > 0 else float("nan")
        lines.append(f"arrivals: span {span:,.1f} s, mean rate {rate:,.2f} req/s")
    keep, dropped = apply_filters(
        prompt, table.output_len, min_len=spec.min_len,
        max_prompt_len=spec.max_prompt_len, max_model_len=max_model_len,
    )  # fmt: skip
    lines.append(
        f"default filters (min_len {spec.min_len}, max_prompt_len {spec.max_prompt_len}, "
        f"max_model_len {max_model_len}) would keep {int(keep.sum()):,} of {len(table):,}:"
    )
    lines += [f"  dropped {reason}: {n:,}" for reason, n in dropped.items()] or ["  dropped: none"]
    return lines
