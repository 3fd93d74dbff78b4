"""A vLLM release's step rules around a cost model: CUDA graphs and the host's time.

A run that names its server's release (``server.vllm_version``) gets, around the cost model
its profile gives (:func:`with_release_rules`, called by ``simulate``):

- **CUDA graphs** (unless ``server.enforce_eager``): vLLM V1 replays a captured graph for a
  step whose token count is at most the largest captured size, padded up to the next captured
  size (``vllm/v1/worker/gpu_model_runner.py``: the batch descriptor's padded token count;
  sizes from ``vllm/config/vllm.py``, :func:`~pagesim.simulator.vllm_releases.
  cudagraph_capture_sizes`); the padding tokens run through every layer's GEMMs and
  element-wise kernels and attend to nothing. Priced as that many more decode sequences of
  no context (:func:`padded_plan`): the token-proportional work at the padded count, the
  attention of the real ones. A larger step runs unpadded.
- **The host's time per step** (``host``: a ``(num_seqs, num_tokens) -> s`` function, the
  ``step_overhead`` term of ``server.host_profile``, else of the step profile itself where it
  has one): with async scheduling (the release's default from v0.14.0) the engine prepares
  step N + 1 while the GPU runs step N (``vllm/v1/engine/core.py``, ``step_with_batch_queue``),
  so a step lasts max(GPU, host); without it they add. The GPU's part is the inner cost model's
  step less its own ``step_overhead`` where its sum holds one (an operator-level profile), the
  whole step where it does not (a whole-step profile: CUDA-graph replays hold no host time).

The engine's interface: ``step_time_s``, ``decode_time_fn``, ``description`` (and the inner
model's ``arrival_delay_s`` and ``bind_clock``, passed through).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from pagesim.simulator.costmodel.iteration import IterationCostModel
from pagesim.simulator.plan import BatchPlan

HostTime = Callable[[int, int], float]


def padded_plan(plan: BatchPlan, sizes: tuple[int, ...]) -> BatchPlan:
    """``plan`` padded to the next captured size (module docstring); unchanged above the
    largest or without sizes."""
    tokens = plan.num_prefill_tokens + plan.num_decode_seqs
    if not sizes or tokens == 0 or tokens > sizes[-1]:
        return plan
    size = sizes[bisect.bisect_left(sizes, tokens)]
    if size == tokens:
        return plan
    return plan._replace(num_decode_seqs=plan.num_decode_seqs + size - tokens)


def own_host_time(inner) -> HostTime | None:
    """The host time an inner cost model's step sum already holds: an operator-level
    profile's ``step_overhead`` (None for a whole-step profile, which holds none)."""
    base = getattr(inner, "kernels", inner)  # a serving path's kernels
    if isinstance(base, IterationCostModel) or not hasattr(base, "step_overhead_time_s"):
        return None
    return base.step_overhead_time_s


class ReleaseSteps:
    """``inner``'s steps under a release's rules (module docstring)."""

    def __init__(
        self,
        inner,
        *,
        capture_sizes: tuple[int, ...],
        host: HostTime | None,
        overlap: bool,
        host_source: str = "",
    ) -> None:
        self.inner = inner
        self.sizes = tuple(capture_sizes)
        self._inner_host = own_host_time(inner)
        self.host = host if host is not None else self._inner_host
        self.overlap = overlap
        for name in ("model", "gpu", "profile", "tensor_parallel", "arrival_delay_s"):
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))
        bind = getattr(inner, "bind_clock", None)
        if bind is not None:
            self.bind_clock = bind
        parts = [inner.description]
        parts.append(
            f"CUDA graphs: steps of up to {self.sizes[-1]} tokens padded to the next of "
            f"{len(self.sizes)} captured sizes"
            if self.sizes
            else "no CUDA graphs (eager)"
        )
        if self.host is None:
            parts.append("no host time per step")
        else:
            how = "overlapping the GPU's step (async scheduling): max" if overlap else "added"
            parts.append(f"host time per step ({host_source or 'step_overhead'}) {how}")
        self.description = "; ".join(parts)

    def _gpu_s(self, plan: BatchPlan) -> float:
        t = self.inner.step_time_s(plan)
        if self._inner_host is not None and not plan.is_empty:
            t -= self._inner_host(plan.num_seqs, plan.num_tokens)
        return t

    def _combine(self, gpu: float, num_seqs: int, num_tokens: int) -> float:
        if self.host is None:
            return gpu
        host = self.host(num_seqs, num_tokens)
        return max(gpu, host) if self.overlap else gpu + host

    def step_time_s(self, plan: BatchPlan) -> float:
        if plan.is_empty:
            return 0.0
        gpu = self._gpu_s(padded_plan(plan, self.sizes))
        return self._combine(gpu, plan.num_seqs, plan.num_tokens)

    def decode_time_fn(self, *, is_paged: bool = True) -> Callable[[int, int, int], float]:
        decode = self.inner.decode_time_fn(is_paged=is_paged)
        sizes, inner_host = self.sizes, self._inner_host
        largest = sizes[-1] if sizes else 0
        combine = self._combine

        def time_s(num_seqs: int, context_sum: int, num_blocks: int) -> float:
            padded = num_seqs
            if num_seqs and num_seqs <= largest:
                padded = sizes[bisect.bisect_left(sizes, num_seqs)]
            gpu = decode(padded, context_sum, num_blocks)
            if inner_host is not None and num_seqs:
                gpu -= inner_host(padded, padded)
            return combine(gpu, num_seqs, num_seqs) if num_seqs else gpu

        return time_s


def with_release_rules(cost_model, spec, hardware=None) -> ReleaseSteps | object:
    """``cost_model`` under the rules of ``spec.server.vllm_version`` (unchanged without one);
    ``hardware``: the server's (a fleet stage's), default the spec's."""
    from pagesim.simulator.vllm_releases import cudagraph_capture_sizes, resolved_scheduler

    server = spec.server
    if server.vllm_version is None:
        return cost_model
    sched = resolved_scheduler(spec.scheduler, server.vllm_version)
    sizes = (
        ()
        if server.enforce_eager
        else cudagraph_capture_sizes(sched.max_num_seqs, sched.max_num_batched_tokens)
    )
    host, source = None, ""
    if server.host_profile is not None:
        host, source = _host_of(server.host_profile, cost_model, hardware or spec.hardware)
    return ReleaseSteps(
        cost_model,
        capture_sizes=sizes,
        host=host,
        overlap=bool(sched.async_scheduling),
        host_source=source,
    )


def _host_of(reference: str, cost_model, hardware) -> tuple[HostTime, str]:
    """The ``step_overhead`` of the profile ``reference`` for the run's model and GPU."""
    from pagesim.simulator.costmodel.factory import cost_model_for, resolve_profile

    source = cost_model_for(
        reference,
        cost_model.model,
        cost_model.gpu,
        tensor_parallel=hardware.tensor_parallel,
        with_serving=False,
    )
    if "step_overhead" not in resolve_profile(reference, cost_model.gpu).terms:
        from pagesim.errors import ConfigError

        raise ConfigError(
            f"server.host_profile: {reference!r} has no step_overhead term (the host's time "
            "per step); give a profile that measured it (e.g. an imported operator profile)"
        )
    return source.step_overhead_time_s, f"{reference}'s step_overhead"
