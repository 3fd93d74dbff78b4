"""Building the CostModel a run asks for: which profile, and whether it must be projected.

``hardware.profile``:

- None: the analytic (roofline) profile of ``hardware.gpu``;
- a path to a YAML file (it ends in ``.yaml``/``.yml`` or contains a path separator):
  that profile;
- otherwise a shipped profile name: ``profiles/<name>/profile.yaml`` inside the
  installed ``pagesim.calibrate`` package, read as a data file (its directory is found
  with ``importlib.util.find_spec``; no calibrate code is imported or run).

A profile whose ``gpu_spec`` is not ``hardware.gpu`` is projected onto it
(:func:`project_profile`); a profile lacking some term gets that term from the
analytic profile of the target GPU; terms a profile itself marks as projected (their
``origin``, e.g. an H100 profile whose attention was projected from A100 timings) are
named. A profile with a ``serving`` section adds its serving path to every step and its
front-end delay to every request (:class:`~.serving.ServingCostModel`). A profile with iteration-level terms (``prefill_iteration``, ``decode_iteration``)
gives an :class:`~.iteration.IterationCostModel`. All of it is said in ``CostModel.description``, which run summaries print, so
nothing about the timing source is hidden.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pagesim.errors import ConfigError
from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.iteration import (
    ITERATION_TERMS,
    IterationCostModel,
    is_iteration_level,
    steps_hold_allreduce,
)
from pagesim.simulator.costmodel.model import NEEDED_TERMS, CostModel
from pagesim.simulator.costmodel.profile import Profile, load_profile
from pagesim.simulator.costmodel.projection import project_profile
from pagesim.simulator.costmodel.serving import ServingCostModel
from pagesim.simulator.costmodel.spread import apply as spread_apply
from pagesim.simulator.costmodel.spread import draw as spread_draw
from pagesim.simulator.model_gpu_specs import GPUS, GPUSpec, ModelSpec

if TYPE_CHECKING:
    from pagesim.simulator.spec import HardwareSpec, LinkSpec

PROFILE_FILE_NAME = "profile.yaml"


def shipped_profiles_dir() -> Path | None:
    """The ``profiles`` folder of the installed calibrate package (None if not installed)."""
    spec = importlib.util.find_spec("pagesim.calibrate")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "profiles"


def shipped_profile_names() -> list[str]:
    folder = shipped_profiles_dir()
    if folder is None or not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / PROFILE_FILE_NAME).is_file())


def resolve_profile(name_or_path: str | None, gpu: GPUSpec) -> Profile:
    """The profile ``hardware.profile`` names (see the module docstring)."""
    if name_or_path is None:
        return analytic_profile(gpu)
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path or "\\" in name_or_path:
        return load_profile(name_or_path)
    folder = shipped_profiles_dir()
    path = folder / name_or_path / PROFILE_FILE_NAME if folder is not None else None
    if path is None or not path.is_file():
        raise ConfigError(
            f"hardware.profile: no shipped profile {name_or_path!r}; shipped profiles: "
            f"{shipped_profile_names()} (or give a path to a profile .yaml, or null for the "
            f"analytic profile of hardware.gpu)"
        )
    return load_profile(path)


def make_cost_model(
    hardware: HardwareSpec, model: ModelSpec, gpu: GPUSpec
) -> CostModel | ServingCostModel:
    """The cost model of ``model`` on ``hardware.tensor_parallel`` x ``gpu`` under
    ``hardware.profile`` (with its serving path, when the profile has one)."""
    return cost_model_for(
        hardware.profile,
        model,
        gpu,
        tensor_parallel=hardware.tensor_parallel,
        link=hardware.link,
    )


def replicate_rng(seed: int, replicate: int) -> np.random.Generator:
    """The generator of one interval replicate's draws (apart from the run's own)."""
    return np.random.default_rng([seed, replicate, 0x5EED])


def cost_model_for(
    profile_ref: str | None,
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    tensor_parallel: int = 1,
    with_serving: bool = True,
    spread: tuple[tuple[str, ...], np.random.Generator] | None = None,
    without_terms: tuple[str, ...] = (),
    link: LinkSpec | None = None,
) -> CostModel | ServingCostModel:
    """:func:`make_cost_model` from its parts: ``profile_ref`` as ``hardware.profile``;
    ``with_serving`` False leaves out the profile's serving path (the kernels alone);
    ``spread`` (sources, generator) perturbs the profile by one replicate's draw
    (:mod:`.spread`); ``without_terms`` drops those optional terms of the profile (a
    validation's "the profile as it was without them"); ``link`` (``hardware.link``) prices
    the TP all-reduces over a measured link instead of the GPU spec's."""
    profile = resolve_profile(profile_ref, gpu)
    if profile_ref is None:
        parts = [f"analytic (roofline) profile of {gpu.name}"]
    else:
        parts = [f"{profile.kind} profile of {profile.gpu_name} ({profile_ref})"]
        if profile.projected_terms:
            parts.append(
                f"terms {profile.projected_terms} projected from another GPU (see its origin)"
            )
    dropped = [name for name in without_terms if name in profile.terms]
    if dropped:
        if any(name in NEEDED_TERMS for name in dropped):
            raise ConfigError(f"{profile_ref}: only optional terms can be left out, not {dropped}")
        profile = profile.with_terms(
            terms={k: v for k, v in profile.terms.items() if k not in dropped}
        )
        parts.append(f"without its terms {dropped}")
    source = profile_ref or "analytic"
    if profile.gpu_spec != gpu.name:
        if profile.gpu_spec not in GPUS:
            raise ConfigError(
                f"{source}: gpu_spec {profile.gpu_spec!r} is not a known GPU, so the profile "
                f"cannot be projected onto {gpu.name!r}; known GPUs: {sorted(GPUS)}"
            )
        profile = project_profile(profile, gpu, GPUS[profile.gpu_spec])
        parts.append(f"projected to {gpu.name} by bandwidth and FLOP ratios")
    is_iteration = is_iteration_level(profile.terms)
    missing = [name for name in NEEDED_TERMS if name not in profile.terms]
    if missing:
        fallback = analytic_profile(gpu).terms
        profile = profile.with_terms(terms={**profile.terms, **{n: fallback[n] for n in missing}})
        if is_iteration:
            used = [n for n in missing if n in ("block_copy", "swap")]
            parts.append(
                f"whole steps priced by its iteration-level terms {list(ITERATION_TERMS)}; "
                f"transfers {used} from the analytic profile of {gpu.name}"
            )
        else:
            parts.append(f"terms {missing} from the analytic profile of {gpu.name}")
    over = _link_words(link)
    if tensor_parallel > 1 and not is_iteration:
        parts.append(f"TP {tensor_parallel} with analytic {over}")
    if spread is not None:
        drawn = spread_draw(profile, spread[0], spread[1])
        profile = spread_apply(profile, drawn)
        varied = sorted(drawn.multipliers)
        parts.append(
            "one replicate of an interval: "
            + (f"{', '.join(varied)} varied by their residuals" if varied else "nothing varied")
            + (f" ({', '.join(drawn.fixed_terms)} keep no residuals)" if drawn.fixed_terms else "")
        )
    if is_iteration and tensor_parallel > 1:
        parts.append(
            f"TP {tensor_parallel} (all-reduces inside the fitted steps"
            + ("; hardware.link not used" if link is not None else "")
            + ")"
            if steps_hold_allreduce(profile)
            else f"TP {tensor_parallel}: the fitted steps hold no all-reduce, analytic {over} added"
        )
    kernels = (IterationCostModel if is_iteration else CostModel)(
        model,
        gpu,
        profile,
        tensor_parallel=tensor_parallel,
        description="; ".join(parts),
        **_link_args(link),
    )
    if profile.serving is None or not with_serving:
        return kernels
    return ServingCostModel(kernels, profile.serving)


def _link_words(link: LinkSpec | None) -> str:
    """How the description names the all-reduces (over the GPU spec's link, or ``link``)."""
    if link is None:
        return "NVLink all-reduces"
    return (
        f"all-reduces over hardware.link ({link.bus_bw_gbps:g} GB/s bus bandwidth, "
        f"{link.latency_us:g} µs; {link.source})"
    )


def _link_args(link: LinkSpec | None) -> dict[str, float]:
    """The cost model's link arguments (none: the GPU spec's link and the default latency)."""
    if link is None:
        return {}
    return {
        "link_bw_bytes_s": link.bus_bw_gbps * 1e9,
        "allreduce_latency_s": link.latency_us * 1e-6,
    }
