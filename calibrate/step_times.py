"""A real run's step times, read off its per-request records (a V1 server's).

Scenario: a vLLM V1 server (a step decodes one token of every running request and spends
the rest of its token budget on prompt chunks) served a run whose per-request records give
each request's first-token and last-token times (:mod:`pagesim.records.run`). Between
its first token and its last, request i sat in ``output_i − 1`` steps, one token each: if
the server ran ``r(t)`` steps per second at time t,

    ∫_{first_i}^{last_i} r(t) dt = output_i − 1.

With ``r`` constant within bins of :data:`BIN_S` seconds from the first arrival, each
request is one linear equation in the bins' rates (its overlap with each bin, in
seconds). Requests overlap many bins and bins many requests, so the rates come from a
least-squares fit of every request with at least two output tokens, each equation divided
by ``output_i − 1`` (relative errors), plus a penalty on the change between neighbouring
bins, :data:`SMOOTHING` times the squared change relative to the run's mean rate (a bin
no request decodes through takes its neighbours' rate). The step time of a bin is
``1 / r``. A bin whose fitted rate is not positive (none in the shipped data) takes the
smallest positive rate's step time, and is counted (:attr:`StepTimes.num_clamped`).

What it assumes: every step gives every decoding request a token (V1, and no preemption
during the request's decode: a request preempted and recomputed sat in more steps than
it has tokens, and the fit spreads that over its bins). It does not hold for a v0 server,
whose prefill steps give the decoding requests nothing. And a bin's step time is the
mean of its steps: a step that carries a prompt chunk is longer than a decode-only one
beside it, so a replay under these times (``simulator/costmodel/recorded.py``) gives a
TTFT of a few steps without queueing too short (a run pagesim made itself, 100 ms TTFTs at
8 req/s: about half, ``tests/experiments/test_replay_vllm.py``); a TTFT that is mostly
queueing (the vLLM 0.19 runs: tens of seconds) is not affected.

How good the reconstruction is, per run (:func:`split_half_errors`): fitted on half of
the requests (drawn by a fixed seed), the other half's decode times predicted as their
overlap with the fitted rates, four splits; the page reports the median and 90th
percentile of those errors.

**From every token's time** (:func:`from_token_times`: a ``vllm bench serve`` result
keeps each request's token gaps, ``itls``): every output token arrives at the end of a
step, so the steps' ends are the token times themselves, the tokens of one step (which
reach the client a little apart) merged where they are closer than
:data:`MERGE_FRACTION` of the median token gap. A step lasts from one end to the next; a
stretch in which no request was in flight (the server idle) takes the step time before it.
No bin averages the steps, so a step that carries a prompt chunk keeps its own length. A
stretch with no decoding request shows no step end (a long prompt's chunks alone): its
steps are read as one.

The form was fixed before any replay used it: a bin of 1 s (the engine's own series
tick); the smoothing chosen from {0.01, 0.1, 1, 10} at bins of {0.5, 1, 2} s by the
split-half errors and the count of non-positive bins alone (1 is the smallest weight with
no non-positive bin in any of the three dense vLLM 0.19 runs; split-half median error
0.3-1.5% on the RTX PRO 6000 runs, 7.7% on the RTX 4090 run, which preempted).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from pagesim.errors import DataError
from pagesim.records.run import MeasuredRun

#: the width of a bin of constant step rate (s): the engine's own series tick
BIN_S = 1.0
#: the weight of the penalty on the change of rate between neighbouring bins
SMOOTHING = 1.0
#: token times closer than this fraction of the median token gap are one step's
MERGE_FRACTION = 0.25
#: splits and seed of :func:`split_half_errors`
SPLITS = 4
SPLIT_SEED = 0


@dataclass(frozen=True)
class StepTimes:
    """A run's step time over time: ``step_s[k]`` from ``edges_s[k]`` to ``edges_s[k + 1]``
    (seconds from the run's first arrival); before the first edge the first bin's, after
    the last the last bin's."""

    edges_s: np.ndarray
    step_s: np.ndarray
    #: the requests whose decode the fit used (two or more output tokens)
    num_requests: int
    #: bins whose fitted rate was not positive (given the shortest step time's rate)
    num_clamped: int = 0
    #: the edges and step times as Python floats, for :meth:`at` (once a simulated step)
    _edges: list[float] = field(init=False, repr=False, compare=False)
    _steps: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_edges", [float(x) for x in self.edges_s])
        object.__setattr__(self, "_steps", [float(x) for x in self.step_s])

    def at(self, t_s: float) -> float:
        """The step time (s) at ``t_s``."""
        k = bisect.bisect_right(self._edges, t_s) - 1
        return self._steps[min(max(k, 0), len(self._steps) - 1)]

    def steps_between(self, start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
        """How many steps the fitted rates put in each ``[start, end]``."""
        return _overlaps(np.asarray(start_s), np.asarray(end_s), self.edges_s) @ (1.0 / self.step_s)


def _overlaps(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    lo = np.maximum(start[:, None], edges[None, :-1])
    hi = np.minimum(end[:, None], edges[None, 1:])
    return np.clip(hi - lo, 0.0, None)


def _edges(end: np.ndarray, bin_s: float) -> np.ndarray:
    """Bin edges from 0 past the last decode's end (at least one bin)."""
    edges = np.arange(0.0, end.max() + bin_s, bin_s)
    return edges if len(edges) >= 2 else np.array([0.0, bin_s])


def _decodes(run: MeasuredRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    run.require_served("the step times' reconstruction")
    t = run.table
    steps = t["output_len"].to_numpy(dtype=float) - 1.0
    start = t["first_token_s"].to_numpy(dtype=float)
    end = t["finish_s"].to_numpy(dtype=float)
    keep = (steps >= 1) & (end > start)
    return start[keep], end[keep], steps[keep]


def _fit(start, end, steps, edges, smoothing) -> np.ndarray:
    """The bins' step rates (steps/s) by the least squares of the module docstring."""
    weights = 1.0 / steps
    a = _overlaps(start, end, edges) * weights[:, None]
    num_bins = len(edges) - 1
    mean_rate = steps.sum() / (end - start).sum()
    diff = np.diff(np.eye(num_bins), axis=0) * (np.sqrt(smoothing) / mean_rate)
    lhs = np.vstack([a, diff])
    rhs = np.concatenate([steps * weights, np.zeros(num_bins - 1)])
    rates, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    return rates


def reconstruct(
    run: MeasuredRun, *, bin_s: float = BIN_S, smoothing: float = SMOOTHING
) -> StepTimes:
    """``run``'s step time over time (module docstring)."""
    start, end, steps = _decodes(run)
    if len(steps) < 2:
        raise DataError(
            f"run {run.name}: {len(steps)} requests with two or more output tokens; the step "
            "times need the decode times of several requests"
        )
    edges = _edges(end, bin_s)
    rates = _fit(start, end, steps, edges, smoothing)
    bad = ~(rates > 0)
    if bad.all():
        raise DataError(f"run {run.name}: no positive step rate fits its decode times")
    rates = np.where(bad, rates[~bad].min(), rates)
    return StepTimes(edges, 1.0 / rates, len(steps), int(bad.sum()))


def from_token_times(run: MeasuredRun, token_times_s: np.ndarray) -> StepTimes:
    """``run``'s steps from every output token's time (module docstring), on the run
    table's clock."""
    t = np.sort(np.asarray(token_times_s, dtype=float))
    gaps = np.diff(t)
    positive = gaps[gaps > 0]
    if len(positive) < 2:
        raise DataError(f"run {run.name}: too few distinct token times to read steps from")
    table = run.table
    out = table["output_len"].to_numpy(dtype=float)
    decode = (table["finish_s"] - table["first_token_s"]).to_numpy(dtype=float)
    per_token = decode[out > 1] / (out[out > 1] - 1)
    typical = float(np.median(per_token)) if len(per_token) else float(np.median(positive))
    ends = t[np.concatenate([[True], gaps > MERGE_FRACTION * typical])]
    if len(ends) < 2:
        raise DataError(f"run {run.name}: its token times make fewer than two steps")
    step = np.diff(ends)
    # a stretch with no request in flight is the server idle, not a step
    arrival = table["arrival_s"].to_numpy(dtype=float)
    finish = table["finish_s"].to_numpy(dtype=float)
    events = np.concatenate([arrival, finish])
    delta = np.concatenate([np.ones(len(arrival)), -np.ones(len(finish))])
    order = np.lexsort((-delta, events))  # at a tie, the arrival first
    times, in_flight = events[order], np.cumsum(delta[order])
    idle_from = times[in_flight == 0]
    idle_to = np.append(times[1:], np.inf)[in_flight == 0]
    keep = idle_to > idle_from
    idle_from, idle_to = idle_from[keep], idle_to[keep]  # disjoint, in order
    # a step overlaps an idle stretch when the first stretch ending after it starts
    # begins before it ends
    first = np.searchsorted(idle_to, ends[:-1], side="right")
    idle = first < len(idle_to)
    idle[idle] = idle_from[first[idle]] < ends[1:][idle]
    for k in np.flatnonzero(idle):
        step[k] = step[k - 1] if k > 0 else typical
    return StepTimes(ends, step, int((out > 1).sum()), int(idle.sum()))


def step_count_errors(run: MeasuredRun, steps: StepTimes) -> np.ndarray:
    """Per request with two or more output tokens: the steps ``steps`` puts in its decode
    over its output − 1 (minus 1): how well the step times hold each request's decode."""
    start, end, count = _decodes(run)
    return steps.steps_between(start, end) / count - 1.0


def split_half_errors(
    run: MeasuredRun,
    *,
    bin_s: float = BIN_S,
    smoothing: float = SMOOTHING,
    splits: int = SPLITS,
    seed: int = SPLIT_SEED,
) -> np.ndarray:
    """Held-out errors of the reconstruction: for each of ``splits`` random halvings, the
    rates fitted on one half predict the other half's step counts (predicted / real − 1,
    one value per request per split)."""
    start, end, steps = _decodes(run)
    edges = _edges(end, bin_s)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(splits):
        order = rng.permutation(len(steps))
        fit, test = order[: len(order) // 2], order[len(order) // 2 :]
        rates = _fit(start[fit], end[fit], steps[fit], edges, smoothing)
        predicted = _overlaps(start[test], end[test], edges) @ rates
        out.append(predicted / steps[test] - 1.0)
    return np.concatenate(out) if out else np.array([])


def recorded_costs(run: MeasuredRun, *, shadow=None):
    """``run``'s step times as a cost model (:mod:`pagesim.simulator.costmodel.recorded`),
    ``shadow`` pricing each step beside."""
    from pagesim.simulator.costmodel.recorded import RecordedStepCosts

    tokens = run.meta.get("token_times_s")
    if tokens is not None:
        steps = from_token_times(run, tokens)
        how = (
            f"{len(steps.step_s):,} steps from every token's time, {steps.num_clamped} idle "
            "stretches"
        )
    else:
        steps = reconstruct(run)
        how = f"{steps.num_requests} decodes, {BIN_S:g} s bins, smoothing {SMOOTHING:g}"
    return RecordedStepCosts(
        steps,
        f"step times of run {run.name} read off its records ({how}; calibrate/step_times.py)",
        shadow=shadow,
    )


def priced_decode_times(run: MeasuredRun, log: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request with two or more output tokens: its decode time priced by the shadow
    cost model over the recorded-steps replay's steps (``RecordedStepCosts.log``) that
    start in its real decode window, and the measured decode time (s): the step cost's
    error alone, on the batches of a replay whose steps last what the real run's did."""
    t = run.table
    keep = t["output_len"].to_numpy() > 1
    first = t["first_token_s"].to_numpy(dtype=float)[keep]
    last = t["finish_s"].to_numpy(dtype=float)[keep]
    order = np.argsort(log[:, 0], kind="stable")
    start, price = log[order, 0], log[order, 2]
    cum = np.concatenate([[0.0], np.cumsum(price)])
    lo = np.searchsorted(start, first, side="left")
    hi = np.searchsorted(start, last, side="left")
    return cum[hi] - cum[lo], last - first
