"""What a replay of recorded requests does with each ``--set``: act on it, or refuse it.

A replay (``replay-vllm``) runs the result's own requests at their recorded send times
(``simulate(spec, trace=...)``, which takes no workload and draws no arrival), so a RunSpec
path that only shapes a drawn workload would be accepted and ignored. Every path either
acts or is refused in one line naming why and what to use instead:

- ``arrivals.time_scale`` (2 = twice as fast, as ``arrivals.process: replay`` reads it):
  the recorded send times divided by it;
- ``arrivals.rate_req_s``: the recorded send times re-spaced to that offered rate, each
  multiplied by the run's rate over the one asked (the run's ``request_rate``, else its
  requests over their span): the recorded pattern, bursts and all, compressed or
  stretched; give one of the two. The measured statistics stay those of the recorded
  rate, so the page's errors then compare two loads (it says so);
- refused (:data:`REFUSED`): ``workload.*``, the other ``arrivals.*`` (Poisson arrivals
  at other rates are what ``pagesim capacity`` draws), ``seed`` without ``spread`` (the
  replay draws nothing), the time series' keys (``metrics.sample_interval_s``,
  ``every_step``, ``reducers``: the replay writes none), a fleet (``cluster.*``,
  ``disaggregation.*``: the recorded run is one server's), and a section that holds any of
  these set whole;
- every other path goes into the RunSpec the replay simulates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pagesim.errors import ConfigError

#: paths a replay refuses -> why, and what to use instead
REFUSED: dict[str, str] = {
    "workload": "the replay's requests are the result's own (their lengths and send times); "
    "a workload is drawn by `pagesim run`, or by `pagesim capacity --workload NAME`",
    "arrivals.process": "the replay keeps the recorded send times; new arrivals at other rates "
    "are what `pagesim capacity` draws (or scale these with arrivals.time_scale)",
    "arrivals.cv": "the replay keeps the recorded send times, drawn by no process; bursty "
    "arrivals at other rates are what `pagesim capacity` draws with --set arrivals.cv",
    "arrivals.quantum_s": "the replay keeps the recorded send times, drawn by no process; "
    "arrivals drawn at other rates are what `pagesim capacity` runs",
    "seed": "the replay draws nothing (its requests and send times are the result's); seeds "
    "vary the arrivals of `pagesim capacity --seeds N` (a seed acts here only with spread)",
    "metrics.sample_interval_s": "the replay writes no time series (its outputs are per "
    "request); `pagesim run` writes one",
    "metrics.every_step": "the replay writes no time series (its outputs are per request); "
    "`pagesim run` writes one",
    "metrics.reducers": "the replay writes no time series (its outputs are per request); "
    "`pagesim run` reduces one",
    "cluster": "the replay replays one server's recorded run; a fleet of replicas is what "
    "`pagesim capacity --vary cluster.replicas=...` or `pagesim run` simulates",
    "disaggregation": "the replay replays one server's recorded run; a disaggregated fleet is "
    "what `pagesim capacity` or `pagesim run` simulates",
}
SCALES = ("arrivals.time_scale", "arrivals.rate_req_s")


@dataclass(frozen=True)
class SendTimes:
    """How the recorded send times are replayed: multiplied by ``factor``, and why."""

    factor: float = 1.0
    note: str = ""

    def trace(self, run):
        """``run``'s requests as a Trace with their send times scaled."""
        trace = run.trace()
        if self.factor == 1.0:
            return trace
        return replace(
            trace, table=trace.table.assign(arrival_s=trace.table["arrival_s"] * self.factor)
        )


def _refusal(key: str, overrides: dict[str, Any]) -> str | None:
    """Why ``--set key`` is refused (None: it acts)."""
    if key == "seed" and any(k == "spread" or k.startswith("spread.") for k in overrides):
        return None
    for path, why in REFUSED.items():
        if key == path or key.startswith(path + "."):
            return why
        if path.startswith(key + "."):
            return f"it holds {path}, which a replay refuses ({why}); set its other keys one by one"
    if key == "arrivals":
        return "set arrivals.time_scale or arrivals.rate_req_s alone"
    return None


def _positive(key: str, value: Any) -> float:
    from pydantic import ValidationError

    from pagesim.specbase import format_validation_error
    from pagesim.workloads.spec import ArrivalSpec

    field = key.split(".")[-1]
    try:
        spec = ArrivalSpec.model_validate({"process": "replay", field: value})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, f"--set {key}")) from None
    return float(getattr(spec, field))


def split_replay_settings(
    overrides: dict[str, Any], run_rate_req_s: float
) -> tuple[dict[str, Any], SendTimes]:
    """``--set``'s paths (module docstring): those that go into the RunSpec, and how the
    recorded send times are replayed; a path the replay cannot follow is a ConfigError."""
    for key in overrides:
        why = _refusal(key, overrides)
        if why is not None:
            raise ConfigError(f"--set {key}: not followed by a replay: {why}")
    scales = [k for k in SCALES if k in overrides]
    if len(scales) > 1:
        raise ConfigError(
            "--set arrivals.time_scale and arrivals.rate_req_s both re-space the recorded send "
            "times: give one"
        )
    spec_overrides = {k: v for k, v in overrides.items() if k not in SCALES}
    if not scales:
        return spec_overrides, SendTimes()
    key = scales[0]
    value = _positive(key, overrides[key])
    if key == "arrivals.time_scale":
        factor = 1.0 / value
        note = (
            f"the recorded send times divided by {value:g} (`--set arrivals.time_scale={value:g}`)"
        )
    else:
        factor = run_rate_req_s / value
        note = (
            f"the recorded send times multiplied by {factor:.4g} (the run's {run_rate_req_s:g} "
            f"req/s over the {value:g} asked, `--set arrivals.rate_req_s={value:g}`): the recorded "
            "pattern re-spaced"
        )
    note += (
        "; the measured statistics are the recorded load's, so the errors below compare two "
        "loads (Poisson arrivals at other rates: `pagesim capacity`)"
    )
    return spec_overrides, SendTimes(factor, note)
