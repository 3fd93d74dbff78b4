"""The serving path: what a server spends per step and per request outside the GPU kernels.

A real server's step is longer than its kernels: the scheduler runs, inputs are
prepared and shipped to the workers, the sampler's output is processed, each running
request's new token is detokenised and its output object built and sent back to the
front end; with vLLM v0's ``--engine-use-ray --worker-use-ray`` each of these crosses a
Ray call and pickles every running sequence's token lists. And a request spends some
time in the front end (HTTP, tokenising, the engine's request queue) before the
scheduler sees it. None of this is in an operator table, so a profile carries it in a
section of its own, fitted on a real server's per-request records
(``pagesim calibrate fit-serving``, ``calibrate/serving.py``), with its provenance::

    serving:
      form: seq_ctx                 # which coefficients were fitted (SERVING_FORMS)
      coefficients: {const_s: 2.1e-3, s_per_seq: 3.0e-4, s_per_context_token: 4.0e-7,
                     s_per_prefill_token: 2.0e-5}
      frontend_delay_s: 0.012       # issue -> the scheduler sees the request
      fitted_on: distserve_vllm_opt13b vllm-150-1.5 (later launch)
      sources: [{file: ..., repository: ..., commit: ..., sha256: ...}]
      fit_error: {decode_time_mape: 0.03, ttft_mape: 0.1, num_requests: 150}
      residual_quantiles: {decode_time: [...], ttft: [...]}   # at RESIDUAL_QUANTILES
      origin: free text

Rule: every step that runs (a non-empty plan) costs, on top of the kernels::

    serving_s = const_s + s_per_seq * sequences in the step
                + s_per_context_token * their context tokens
                + s_per_prefill_token * prompt tokens computed in the step

where a decode sequence's context is its tokens so far and a prompt's is its prompt
(``BatchPlan.decode_context_sum + prefill_context_sum``; ``num_prefill_tokens``, padding
included where the scheduler pads), and every request reaches the
scheduler ``frontend_delay_s`` after it was issued (its TTFT and end-to-end latency
count the delay). :class:`ServingCostModel` adds both to any cost model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pagesim.errors import ConfigError

#: form -> the per-step coefficients it fits (the others are 0); each is a hypothesis
#: about what the serving path's step cost grows with. Every form also has
#: ``s_per_prefill_token`` and the front-end delay (fitted on TTFT).
SERVING_FORMS: dict[str, tuple[str, ...]] = {
    "const": ("const_s",),
    "seq": ("const_s", "s_per_seq"),
    "ctx": ("const_s", "s_per_context_token"),
    "seq_ctx": ("const_s", "s_per_seq", "s_per_context_token"),
}
SERVING_COEFFICIENTS = ("const_s", "s_per_seq", "s_per_context_token", "s_per_prefill_token")
#: the quantiles at which a serving section keeps its fit residuals (predicted / measured - 1)
RESIDUAL_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
SERVING_KEYS = (
    "form",
    "coefficients",
    "frontend_delay_s",
    "fitted_on",
    "sources",
    "fit_error",
    "residual_quantiles",
    "origin",
)


@dataclass(frozen=True)
class ServingPath:
    """A profile's ``serving`` section (module docstring)."""

    form: str
    coefficients: dict[str, float]
    frontend_delay_s: float = 0.0
    fitted_on: str = ""
    sources: tuple[dict[str, str], ...] = ()
    fit_error: dict[str, float] = field(default_factory=dict)
    residual_quantiles: dict[str, tuple[float, ...]] = field(default_factory=dict)
    origin: str = ""

    def coef(self, name: str) -> float:
        return self.coefficients.get(name, 0.0)

    def step_time_s(
        self, num_seqs: int, num_context_tokens: int, num_prefill_tokens: int = 0
    ) -> float:
        """The serving path's part of one step that runs (or, given arrays, of each step)."""
        return (
            self.coef("const_s")
            + self.coef("s_per_seq") * num_seqs
            + self.coef("s_per_context_token") * num_context_tokens
            + self.coef("s_per_prefill_token") * num_prefill_tokens
        )

    def describe(self) -> str:
        c = self.coefficients
        parts = [f"{c.get('const_s', 0.0) * 1e3:.3g} ms per step"]
        if c.get("s_per_seq"):
            parts.append(f"{c['s_per_seq'] * 1e3:.3g} ms per sequence")
        if c.get("s_per_context_token"):
            parts.append(f"{c['s_per_context_token'] * 1e6:.3g} µs per context token")
        if c.get("s_per_prefill_token"):
            parts.append(f"{c['s_per_prefill_token'] * 1e6:.3g} µs per prefill token")
        parts.append(f"front-end delay {self.frontend_delay_s * 1e3:.3g} ms per request")
        fitted = f", fitted on {self.fitted_on}" if self.fitted_on else ""
        return f"serving path ({self.form}: {', '.join(parts)}{fitted})"

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "form": self.form,
            "coefficients": {k: float(v) for k, v in self.coefficients.items()},
            "frontend_delay_s": float(self.frontend_delay_s),
            "fitted_on": self.fitted_on,
        }
        if self.sources:
            doc["sources"] = [dict(s) for s in self.sources]
        if self.fit_error:
            doc["fit_error"] = {k: float(v) for k, v in self.fit_error.items()}
        if self.residual_quantiles:
            doc["residual_quantiles"] = {
                k: [float(x) for x in v] for k, v in self.residual_quantiles.items()
            }
        if self.origin:
            doc["origin"] = self.origin
        return doc


def _number(value: Any, where: str, fail, *, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(f"{where}: must be a finite number, got {value!r}")
    if value < low:
        raise fail(f"{where}: must be >= {low:g}, got {value!r}")
    return float(value)


def serving_from_dict(doc: Any, fail: Callable[[str], ConfigError]) -> ServingPath:
    """A ``serving`` section from parsed YAML; unknown keys and bad values name the key."""
    if not isinstance(doc, dict):
        raise fail("serving: must be a mapping")
    unknown = sorted(set(doc) - set(SERVING_KEYS))
    if unknown:
        raise fail(f"serving: unknown key {unknown[0]!r}; allowed keys: {list(SERVING_KEYS)}")
    form = doc.get("form")
    if form not in SERVING_FORMS:
        raise fail(f"serving.form: {form!r} is not one of {list(SERVING_FORMS)}")
    coefs = doc.get("coefficients")
    if not isinstance(coefs, dict):
        raise fail("serving.coefficients: must be a mapping")
    values: dict[str, float] = {}
    for name, value in coefs.items():
        if name not in SERVING_COEFFICIENTS:
            raise fail(
                f"serving.coefficients.{name}: unknown; allowed: {list(SERVING_COEFFICIENTS)}"
            )
        values[name] = _number(value, f"serving.coefficients.{name}", fail)
    delay = _number(doc.get("frontend_delay_s", 0.0), "serving.frontend_delay_s", fail)
    fit_error = doc.get("fit_error", {}) or {}
    if not isinstance(fit_error, dict):
        raise fail("serving.fit_error: must be a mapping")
    quantiles = doc.get("residual_quantiles", {}) or {}
    if not isinstance(quantiles, dict):
        raise fail("serving.residual_quantiles: must be a mapping")
    residuals: dict[str, tuple[float, ...]] = {}
    for name, qs in quantiles.items():
        if not isinstance(qs, list) or len(qs) != len(RESIDUAL_QUANTILES):
            raise fail(
                f"serving.residual_quantiles.{name}: must be a list of "
                f"{len(RESIDUAL_QUANTILES)} numbers (at {list(RESIDUAL_QUANTILES)})"
            )
        residuals[str(name)] = tuple(
            _number(q, f"serving.residual_quantiles.{name}", fail, low=-math.inf) for q in qs
        )
    sources = doc.get("sources", []) or []
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise fail("serving.sources: must be a list of mappings")
    for key in ("fitted_on", "origin"):
        if not isinstance(doc.get(key, ""), str):
            raise fail(f"serving.{key}: must be a string")
    return ServingPath(
        form=str(form),
        coefficients=values,
        frontend_delay_s=delay,
        fitted_on=str(doc.get("fitted_on", "")),
        sources=tuple({str(k): str(v) for k, v in s.items()} for s in sources),
        fit_error={
            str(k): _number(v, f"serving.fit_error.{k}", fail, low=-math.inf)
            for k, v in fit_error.items()
        },
        residual_quantiles=residuals,
        origin=str(doc.get("origin", "")),
    )


class ServingCostModel:
    """A cost model plus a serving path: each step that runs costs the kernels' time plus
    :meth:`ServingPath.step_time_s`; requests reach the scheduler ``frontend_delay_s``
    after their arrival (``arrival_delay_s``, which the engine applies)."""

    def __init__(self, kernels, serving: ServingPath) -> None:
        self.kernels = kernels
        self.serving = serving
        self.model, self.gpu, self.profile = kernels.model, kernels.gpu, kernels.profile
        self.tensor_parallel = kernels.tensor_parallel
        self.description = f"{kernels.description}; {serving.describe()}"
        self.arrival_delay_s = serving.frontend_delay_s
        self._const = serving.coef("const_s")
        self._per_seq = serving.coef("s_per_seq")
        self._per_ctx = serving.coef("s_per_context_token")
        self._per_prefill = serving.coef("s_per_prefill_token")

    def serving_time_s(self, plan) -> float:
        if plan.is_empty:
            return 0.0
        return (
            self._const
            + self._per_seq * plan.num_seqs
            + self._per_ctx * (plan.prefill_context_sum + plan.decode_context_sum)
            + self._per_prefill * plan.num_prefill_tokens
        )

    def step_time_s(self, plan) -> float:
        return self.kernels.step_time_s(plan) + self.serving_time_s(plan)

    def decode_time_fn(self, *, is_paged: bool = True) -> Callable[[int, int, int], float]:
        inner = self.kernels.decode_time_fn(is_paged=is_paged)
        const, per_seq, per_ctx = self._const, self._per_seq, self._per_ctx

        def time_s(num_seqs: int, context_sum: int, num_blocks: int) -> float:
            t = inner(num_seqs, context_sum, num_blocks)
            if num_seqs:
                t += const + per_seq * num_seqs + per_ctx * context_sum
            return t

        return time_s
