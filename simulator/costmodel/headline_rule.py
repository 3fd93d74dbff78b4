"""The headline for a vLLM server pagesim has not seen: which shipped profile prices its steps.

The rule (``experiments/validation/vllm023_protocol.md``, fixed before it was scored) uses
only what a user has before running anything: the model's config, the GPU, the vLLM release
and its flags. Of the profiles shipped for the server's GPU (``gpu_spec``), the step profile
is the first of:

1. ``<gpu>-compiled-steps``: pagesim's compiled whole steps of other models on that GPU,
   pooled per layer (``calibrate/per_layer_steps.py``): any dense model's step;
2. ``<gpu>-measured``: pagesim's own kernels timed on that GPU;
3. the GPU's imported operator-level profile (kind ``external``, not iteration-level;
   the first by name);
4. none: the GPU's analytic roofline.

The host's time per step (``server.host_profile``, overlapped under async scheduling:
``costmodel/release.py``) is the ``step_overhead`` of the first shipped profile of that GPU
(by name) whose ``step_overhead`` was measured as the host's CPU time (its origin says so):
for the H100 and the A100-80GB, Vidur's CPU time per step (``<gpu>-vidur``). A profile whose
``step_overhead`` is GPU time (LLMServingSim's sampler) is not a host figure.
"""

from __future__ import annotations

from functools import cache

from pagesim.simulator.costmodel.factory import resolve_profile, shipped_profile_names
from pagesim.simulator.costmodel.iteration import is_iteration_level
from pagesim.simulator.model_gpu_specs import get_gpu


@cache
def _profiles_of(gpu: str) -> tuple[tuple[str, str, bool, bool], ...]:
    """(name, kind, iteration-level, has step_overhead) of each shipped profile of ``gpu``."""
    spec = get_gpu(gpu)
    out = []
    for name in shipped_profile_names():
        profile = resolve_profile(name, spec)
        if profile.gpu_spec != gpu or profile.serving is not None:
            continue
        terms = profile.terms
        host = "step_overhead" in terms and "cpu" in terms["step_overhead"].origin.lower()
        out.append((name, profile.kind, is_iteration_level(terms), host))
    return tuple(out)


def unseen_step_profile(gpu: str) -> str | None:
    """The step profile of the rule (module docstring); None: the analytic roofline."""
    names = {name for name, *_ in _profiles_of(gpu)}
    for name in (f"{gpu}-compiled-steps", f"{gpu}-measured"):
        if name in names:
            return name
    imported = [
        n for n, kind, iteration, _ in _profiles_of(gpu) if kind == "external" and not iteration
    ]
    return imported[0] if imported else None


def unseen_host_profile(gpu: str) -> str | None:
    """The profile whose ``step_overhead`` is the host's time per step (module docstring)."""
    hosts = [
        name for name, _, iteration, has_host in _profiles_of(gpu) if has_host and not iteration
    ]
    return hosts[0] if hosts else None


def unseen_settings(gpu: str) -> dict[str, str | None]:
    """The rule's RunSpec settings (dotted paths) for a server on ``gpu``."""
    out: dict[str, str | None] = {"hardware.profile": unseen_step_profile(gpu)}
    host = unseen_host_profile(gpu)
    if host is not None:
        out["server.host_profile"] = host
    return out
