"""build_trace: the one entry point from a workload spec to a seeded, replayable Trace.

Steps, all randomness from the one ``rng`` (same spec + same seed -> identical trace):

1. look up the workload (``registry.py``); load its length table (``workload.path``
   when given, else the shipped table or the one prepared in the data folder) or,
   for synthetic workloads, draw lengths;
2. filter (``filters.py``) with the shared prefix counted in the prompt; every drop
   is reported in ``Trace.dropped`` under its reason (for table workloads the
   counts are rows of the source table removed before sampling; for synthetic ones,
   draws rejected while filling ``num_requests``);
3. choose requests: ``num_requests`` rows sampled with or without replacement
   (``workload.replace``; without replacement, asking for more rows than remain is a
   ConfigError), or as many as arrive before ``duration_s``; replay takes the
   table's rows in time order instead of sampling; ``selection: artifact`` (the
   PagedAttention artifact's generator) filters by prompt + output < max_model_len
   only (and drops rows with an empty output or prompt, which cannot be requests), repeats the kept rows in file order to the number of requests, cuts, and
   shuffles them (one ``rng.permutation``, drawn after the arrival times, as the
   artifact shuffles after drawing its timestamps);
4. apply the sharing shape (``n``, ``beam_width``, ``shared_prefix_len`` as segment
   0 of every prompt) and the arrival times (``arrivals.py``).

Synthetic workloads whose draws break a filter are topped up with fresh draws until
``num_requests`` remain, up to ``MAX_SYNTHETIC_ROUNDS`` rounds. The drawn
distribution is then truncated by the filters, so the redrawn draws are counted in
``Trace.dropped`` under ``"<rule> (redrawn)"`` and reported with every run.
"""

from __future__ import annotations

import numpy as np

from pagesim.errors import ConfigError
from pagesim.workloads.arrivals import arrival_times, arrivals_until
from pagesim.workloads.assemble import assemble_trace
from pagesim.workloads.chat import chat_prompt_len, chat_requests
from pagesim.workloads.filters import apply_filters
from pagesim.workloads.lengthtable import LengthTable
from pagesim.workloads.registry import WORKLOADS, get_source, load_rows
from pagesim.workloads.spec import ArrivalSpec, WorkloadSpec
from pagesim.workloads.synthetic import ALPACA_LIKE_OUTPUT, ALPACA_LIKE_PROMPT, sample_lengths
from pagesim.workloads.trace import Trace

MAX_SYNTHETIC_ROUNDS = 50


def build_trace(
    workload: WorkloadSpec,
    arrivals: ArrivalSpec,
    *,
    max_model_len: int,
    rng: np.random.Generator,
) -> Trace:
    """A Trace for ``workload`` arriving per ``arrivals`` (see the module docstring)."""
    source = get_source(workload.name)
    if workload.path is not None and source.kind == "synthetic":
        raise ConfigError(
            f"workload.path is read by table and csv workloads, not by the synthetic {workload.name!r}"
        )
    if (
        workload.num_requests is None
        and workload.duration_s is None
        and arrivals.process != "replay"
    ):
        raise ConfigError("give workload.num_requests or workload.duration_s")
    if workload.selection == "artifact" and (source.kind != "table" or source.view == "chat"):
        tables = sorted(n for n, s in WORKLOADS.items() if s.kind == "table" and s.view != "chat")
        raise ConfigError(
            f"workload.selection 'artifact' needs a table workload of independent rows "
            f"({', '.join(tables)}), got {workload.name!r}"
        )
    if source.kind == "synthetic":
        return _build_synthetic(workload, arrivals, max_model_len, rng)
    table = load_rows(workload.name, workload.path)
    if workload.selection == "artifact":
        return _build_artifact(workload, arrivals, table, max_model_len, rng)
    is_chat = source.view == "chat"
    prompt_for_filter = chat_prompt_len(table) if is_chat else table.prompt_len
    keep, dropped = apply_filters(
        prompt_for_filter + workload.shared_prefix_len,
        table.output_len,
        min_len=workload.min_len,
        max_prompt_len=workload.max_prompt_len,
        max_model_len=max_model_len,
    )
    common = {
        "n": workload.n,
        "beam_width": workload.beam_width,
        "shared_prefix_len": workload.shared_prefix_len,
        "name": workload.name,
        "source_note": table.source_note,
        "dropped": dropped,
        "num_candidates": len(keep),
    }
    if arrivals.process == "replay":
        rows, arrival_s = _replay_rows(workload, arrivals, table, keep)
        return assemble_trace(
            prompt_len=table.prompt_len[rows], output_len=table.output_len[rows],
            arrival_s=arrival_s, **common,
        )  # fmt: skip
    times = _times(workload, arrivals, rng)
    num = len(times) if times is not None else int(workload.num_requests or 0)
    if is_chat:
        prompt_len, output_len, segments = chat_requests(
            table, keep, num=num, replace=workload.replace, rng=rng,
            shared_prefix_len=workload.shared_prefix_len,
        )  # fmt: skip
    else:
        rows = _sample_rows(np.flatnonzero(keep), num, workload.replace, rng)
        prompt_len, output_len, segments = table.prompt_len[rows], table.output_len[rows], None
    if times is None:
        times = arrival_times(arrivals, num, rng)
    return assemble_trace(
        prompt_len=prompt_len, output_len=output_len, arrival_s=times, segments=segments, **common
    )


def _times(
    workload: WorkloadSpec, arrivals: ArrivalSpec, rng: np.random.Generator
) -> np.ndarray | None:
    """Arrival times drawn up front when the run is bounded by duration, else None."""
    if workload.duration_s is None:
        return None
    return arrivals_until(arrivals, workload.duration_s, rng)


def _sample_rows(
    kept_rows: np.ndarray, num: int, replace: bool, rng: np.random.Generator
) -> np.ndarray:
    if num > 0 and len(kept_rows) == 0:
        raise ConfigError("no requests remain after the workload filters")
    if replace:
        return kept_rows[rng.integers(0, len(kept_rows), size=num)]
    if num > len(kept_rows):
        raise ConfigError(
            f"workload.num_requests = {num} but only {len(kept_rows)} requests remain after "
            "filters; set workload.replace: true or ask for fewer"
        )
    return kept_rows[rng.permutation(len(kept_rows))[:num]]


def _replay_rows(
    workload: WorkloadSpec, arrivals: ArrivalSpec, table: LengthTable, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows in time order and their arrival times (from the first kept row, / time_scale)."""
    if table.arrival_s is None:
        raise ConfigError(
            f"arrivals.process 'replay' needs a timestamped workload; {workload.name!r} has no "
            "timestamps (timestamped: azure-conv, azure-code, csv)"
        )
    rows = np.flatnonzero(keep)
    t0 = table.arrival_s[rows[0]] if len(rows) else 0.0
    arrival_s = (table.arrival_s[rows] - t0) / arrivals.time_scale
    if workload.duration_s is not None:
        within = arrival_s < workload.duration_s
        return rows[within], arrival_s[within]
    if workload.num_requests is not None:
        if workload.num_requests > len(rows):
            raise ConfigError(
                f"workload.num_requests = {workload.num_requests} but the replayed trace "
                f"{workload.name!r} has {len(rows)} requests after filters"
            )
        return rows[: workload.num_requests], arrival_s[: workload.num_requests]
    return rows, arrival_s


def _build_artifact(
    workload: WorkloadSpec,
    arrivals: ArrivalSpec,
    table: LengthTable,
    max_model_len: int,
    rng: np.random.Generator,
) -> Trace:
    """``selection: artifact`` (see the module docstring)."""
    if arrivals.process == "replay":
        raise ConfigError(
            "workload.selection 'artifact' draws its own arrivals; arrivals.process 'replay' "
            "keeps the trace's rows and times instead"
        )
    prompt_len = table.prompt_len + workload.shared_prefix_len
    too_long = prompt_len + table.output_len >= max_model_len
    # A row with nothing to generate (or no prompt) cannot be a request; the artifact's
    # own data has none, other tables may (alpaca_5000.json has two empty outputs).
    empty = ~too_long & ((table.output_len < 1) | (prompt_len < 1))
    keep = ~too_long & ~empty
    dropped = {
        reason: int(mask.sum())
        for reason, mask in (
            (f"prompt_len + output_len >= {max_model_len}", too_long),
            ("output_len < 1 or prompt_len < 1", empty),
        )
        if mask.any()
    }
    times = _times(workload, arrivals, rng)
    num = len(times) if times is not None else int(workload.num_requests or 0)
    kept_rows = np.flatnonzero(keep)
    if num > 0 and len(kept_rows) == 0:
        raise ConfigError("no requests remain after the workload filters")
    rows = np.resize(kept_rows, num)[rng.permutation(num)] if num else kept_rows[:0]
    if times is None:
        times = arrival_times(arrivals, num, rng)
    return assemble_trace(
        prompt_len=table.prompt_len[rows], output_len=table.output_len[rows], arrival_s=times,
        n=workload.n, beam_width=workload.beam_width,
        shared_prefix_len=workload.shared_prefix_len, name=workload.name,
        source_note=table.source_note + "; artifact selection", dropped=dropped,
    )  # fmt: skip


def _build_synthetic(
    workload: WorkloadSpec, arrivals: ArrivalSpec, max_model_len: int, rng: np.random.Generator
) -> Trace:
    if arrivals.process == "replay":
        raise ConfigError(
            f"arrivals.process 'replay' needs a timestamped workload, not {workload.name!r}"
        )
    if workload.name == "alpaca-like":
        prompt_dist, output_dist = ALPACA_LIKE_PROMPT, ALPACA_LIKE_OUTPUT
        note = "SYNTHETIC alpaca-like: lognormal lengths fitted to the paper's Alpaca means"
    else:
        prompt_dist, output_dist = workload.prompt, workload.output
        note = f"synthetic: prompt {prompt_dist.model_dump()}, output {output_dist.model_dump()}"
    times = _times(workload, arrivals, rng)
    num = len(times) if times is not None else int(workload.num_requests or 0)
    prompts, outputs = [], []
    dropped: dict[str, int] = {}
    have, rounds, num_drawn = 0, 0, 0
    while have < num:
        rounds += 1
        if rounds > MAX_SYNTHETIC_ROUNDS:
            raise ConfigError(
                f"synthetic lengths keep breaking the filters ({dropped}); widen the filters "
                "or change workload.prompt / workload.output"
            )
        want = num - have if rounds == 1 else max(2 * (num - have), 64)
        p = sample_lengths(prompt_dist, want, rng)
        o = sample_lengths(output_dist, want, rng)
        num_drawn += want
        keep, drops = apply_filters(
            p + workload.shared_prefix_len, o, min_len=workload.min_len,
            max_prompt_len=workload.max_prompt_len, max_model_len=max_model_len,
        )  # fmt: skip
        p, o = p[keep][: num - have], o[keep][: num - have]
        for reason, count in drops.items():
            redrawn = f"{reason} (redrawn)"
            dropped[redrawn] = dropped.get(redrawn, 0) + count
        prompts.append(p)
        outputs.append(o)
        have += len(p)
    if times is None:
        times = arrival_times(arrivals, num, rng)
    return assemble_trace(
        prompt_len=np.concatenate(prompts) if prompts else np.zeros(0, dtype=np.int64),
        output_len=np.concatenate(outputs) if outputs else np.zeros(0, dtype=np.int64),
        arrival_s=times, n=workload.n, beam_width=workload.beam_width,
        shared_prefix_len=workload.shared_prefix_len, name=workload.name, source_note=note,
        dropped=dropped, num_candidates=num_drawn,
    )  # fmt: skip
