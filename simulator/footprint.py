"""How much memory a run needs, estimated from its spec before anything is built.

A run holds every request it simulates (the trace's row, the request's state while it
lives, its row of the request log and of the per-request table) and one time-series row
per sample window (``metrics.sample_interval_s``), or per engine step with
``metrics.every_step``; both grow without bound with the spec, and a run too large for
the machine would otherwise grow until the kernel kills it, with no message and nothing
written. :func:`memory_problem` says, in one line, which key makes the run too large, the
estimate, the machine's memory, and the setting that would fit; the experiments'
preflight asks it, so ``pagesim validate``, ``pagesim run`` and ``pagesim simulate``
refuse such a run before it starts.

The estimate is ``BASE_BYTES + REQUEST_BYTES x requests + ROW_BYTES x rows``, with the
requests known from the spec (``workload.num_requests``; ``rate_req_s x duration_s``
for a duration; the trace's rows for a replay) and the rows estimated low: the fewest
steps the run can take (a decode step advances at most ``scheduler.max_num_seqs``
sequences by one token, a prefill step at most ``scheduler.max_num_batched_tokens``
prompt tokens; a table workload's outputs are counted at ``workload.min_len``, the
shortest its filters keep), and, with windows, no more windows than the time the
arrivals span. The aim is to refuse what cannot fit (a billion requests), never a run
that would: every term is what the run certainly holds.

The constants were measured (``ru_maxrss`` of a fresh process around ``simulate``; a
synthetic workload of uniform 10-500 prompt and 10-400 output tokens at 50 req/s on
200,000 KV slots; compiled engine): 10,000 requests peaked at 95 MiB and 200,000 at
248 MiB (about 850 bytes a request, 27,383 time-series rows included); the same 200,000
with ``every_step`` (273,534 rows) peaked at 441 MiB (about 800 bytes a row); the
interpreter with pagesim, numpy, pandas and SimPy imported held 81 MiB. They are
rounded up (1 KiB a request, 1 KiB a row, 256 MiB to start): a rough guide, not a
predictor.

The machine's memory is the smallest of the physical memory (``/proc/meminfo``'s
``MemTotal``, else ``os.sysconf``) and the limit of the control group the process runs
in (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``); where none can be read,
nothing is refused. Each run is checked alone: ``--jobs N`` runs N at once.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.spec import RunSpec

BASE_BYTES = 256 * 2**20
REQUEST_BYTES = 1024
ROW_BYTES = 1024
GIB = 2**30
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@dataclass(frozen=True)
class Footprint:
    """A run's estimated memory (module docstring), and the spec keys that drive it."""

    num_requests: int
    #: the key that sets the number of requests, as a message names it
    requests_key: str
    #: time-series rows, at least (one per step with ``every_step``, else per window)
    num_rows: int
    #: the rows the run would keep without ``every_step`` (its windows)
    num_window_rows: int
    #: the simulated seconds the arrivals span (None: unknown, or all at once)
    span_s: float | None = None

    @property
    def num_bytes(self) -> int:
        return BASE_BYTES + REQUEST_BYTES * self.num_requests + ROW_BYTES * self.num_rows


def machine_memory_bytes() -> int | None:
    """The memory this process may use (module docstring), or None where unknown."""
    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    if not limits:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max", or v1's "no limit" figure
            limits.append(int(text))
    return min(limits) if limits else None


def _mean_len(dist) -> float:
    """The mean a synthetic length distribution draws (before filters)."""
    if dist.dist == "uniform":
        return (dist.low + max(dist.low, dist.high)) / 2
    return min(max(dist.mean, dist.low), max(dist.low, dist.high))


def _table_rows(spec: RunSpec) -> int | None:
    """The rows of the table or CSV a replay takes its requests from (None: unknown)."""
    from pagesim.workloads.registry import WORKLOADS, table_rows

    source = WORKLOADS.get(spec.workload.name)
    path = Path(spec.workload.path) if spec.workload.path else None
    if path is None and source is not None:
        path = source.table_path
    return None if path is None else table_rows(path)


def _requests(spec: RunSpec) -> tuple[int, str, float | None]:
    """(requests, the key that sets them, the seconds their arrivals span or None)."""
    workload, arrivals = spec.workload, spec.arrivals
    rate = arrivals.rate_req_s
    if arrivals.process == "replay":  # the trace's rows: all, those in the duration, or N
        rows = _table_rows(spec)
        if workload.num_requests is not None and workload.duration_s is None:
            num = workload.num_requests if rows is None else min(rows, workload.num_requests)
            return num, "workload.num_requests", None
        return rows or 0, "workload.path", workload.duration_s
    if workload.duration_s is not None and rate is not None:  # the duration decides
        return math.ceil(rate * workload.duration_s), "workload.duration_s", workload.duration_s
    num = workload.num_requests or 0
    span = None if rate is None or arrivals.process == "burst" else num / rate
    return num, "workload.num_requests", span


def estimate(spec: RunSpec) -> Footprint:
    """The run's :class:`Footprint` (module docstring)."""
    from pagesim.workloads.registry import WORKLOADS

    num, key, span_s = _requests(spec)
    workload = spec.workload
    source = WORKLOADS.get(workload.name)
    if source is not None and source.kind == "synthetic":
        from pagesim.workloads.synthetic import ALPACA_LIKE_OUTPUT, ALPACA_LIKE_PROMPT

        alpaca = workload.name == "alpaca-like"
        prompt = _mean_len(ALPACA_LIKE_PROMPT if alpaca else workload.prompt)
        output = _mean_len(ALPACA_LIKE_OUTPUT if alpaca else workload.output)
    else:
        prompt = output = float(workload.min_len)
    seqs = max(workload.n, workload.beam_width)
    sched = spec.scheduler
    num_steps = math.ceil(num * seqs * output / sched.max_num_seqs) + math.ceil(
        num * prompt / sched.max_num_batched_tokens
    )
    num_windows = num_steps
    if span_s is not None:
        num_windows = min(num_steps, math.ceil(span_s / spec.metrics.sample_interval_s) + 1)
    rows = num_steps if spec.metrics.every_step else num_windows
    return Footprint(num, key, rows, num_windows, span_s)


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.1f} GiB"


def memory_problem(spec: RunSpec, memory_bytes: int | None = None) -> str | None:
    """Why ``spec`` cannot fit in the machine's memory (one line: the key, the estimate,
    the memory, the setting that would fit), or None. ``memory_bytes``: the machine's
    (default :func:`machine_memory_bytes`)."""
    memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
    if memory is None:
        return None
    need = estimate(spec)
    if need.num_bytes <= memory:
        return None
    requests_bytes = BASE_BYTES + REQUEST_BYTES * need.num_requests
    estimated = (
        f"about {_gib(need.num_bytes)} of memory (estimated from the spec: "
        f"{need.num_requests:,} requests, at least {need.num_rows:,} time-series rows), more "
        f"than this machine's {_gib(memory)}"
    )
    if spec.metrics.every_step and requests_bytes + ROW_BYTES * need.num_window_rows <= memory:
        return (
            f"metrics.every_step: a time-series row per engine step needs {estimated}; set "
            "metrics.every_step: false (a row per metrics.sample_interval_s of simulated "
            "time) or run fewer requests"
        )
    rows_fit = (memory - requests_bytes) // ROW_BYTES
    if rows_fit > 1 and not spec.metrics.every_step and need.span_s:
        interval = 1.1 * need.span_s / (rows_fit - 1)
        return (
            f"metrics.sample_interval_s: a time-series row per {spec.metrics.sample_interval_s:g} "
            f"s of simulated time needs {estimated}; set metrics.sample_interval_s to at least "
            f"{interval:.3g}"
        )
    per_request = REQUEST_BYTES + ROW_BYTES * need.num_rows / max(1, need.num_requests)
    fit = max(0, int((memory - BASE_BYTES) / per_request))
    remedy = {
        "workload.path": "set workload.num_requests to replay fewer of its rows",
        "workload.duration_s": "shorten workload.duration_s (or lower arrivals.rate_req_s)",
    }.get(need.requests_key, f"lower {need.requests_key}")
    return (
        f"{need.requests_key}: {need.num_requests:,} requests need {estimated}; at most "
        f"about {fit:,} requests fit: {remedy}"
    )
