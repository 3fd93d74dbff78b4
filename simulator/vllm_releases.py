"""vLLM releases: which rules and defaults a named version runs with.

A run that names its server's release (``server.vllm_version``, e.g. ``"0.23.0"``) gets
that release's rules where pagesim models them: the KV pool as that release sizes it
(``simulator/vllm_pool.py``), its scheduler defaults (async scheduling, the admission rule)
and its step rules (CUDA graphs for decode-only batches). A run that names none keeps
pagesim's own defaults, unchanged (every golden file and paper figure is computed so).

Versions are compared as numbers (``0.9.2 < 0.10.0``); a suffix after the third number
(``0.23.0rc1``, ``0.15.1+cu128``) is ignored for the comparison and kept in the text.
"""

from __future__ import annotations

import re

from pagesim.errors import ConfigError

#: the oldest release whose rules pagesim models when a version is named: the V1 engine
#: became vLLM's default in 0.8.0 (its release notes); older releases run ``vllm`` (v0)
#: without a version
OLDEST_MODELLED = (0, 8, 0)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+\-]?[0-9A-Za-z.+\-]*)?$")


def parse_version(text: str, *, key: str = "server.vllm_version") -> tuple[int, int, int]:
    """``"0.23.0"`` -> ``(0, 23, 0)``; a one-line error naming ``key`` otherwise."""
    match = _VERSION.match(str(text).strip())
    if match is None:
        raise ConfigError(
            f"{key}: {text!r} is not a vLLM version (write it as vLLM prints it, e.g. 0.23.0)"
        )
    major, minor, patch = (int(g) if g is not None else 0 for g in match.groups())
    return major, minor, patch


def check_modelled(text: str, *, key: str = "server.vllm_version") -> tuple[int, int, int]:
    """The parsed version, refused when older than :data:`OLDEST_MODELLED`."""
    version = parse_version(text, key=key)
    if version < OLDEST_MODELLED:
        oldest = ".".join(map(str, OLDEST_MODELLED))
        raise ConfigError(
            f"{key}: {text!r} is older than {oldest}, the first release whose V1 rules pagesim "
            "models; leave the version out and pick the scheduler (kind 'vllm' for v0.2-v0.4)"
        )
    return version


#: async scheduling is on by default from this release (vLLM's release notes of v0.14.0,
#: PR #27614: ``--async-scheduling`` became the default, ``--no-async-scheduling`` turns
#: it off)
ASYNC_SCHEDULING_FROM = (0, 14, 0)


#: admission asks for the request's whole length (``scheduler_reserve_full_isl``, default on;
#: vLLM PR #37307, merged 2026-03-17): on in v0.19.0's ``vllm/v1/core/sched/scheduler.py``,
#: absent from v0.15.1's; the releases between were not read and are taken as v0.15.1
RESERVE_FULL_PROMPT_FROM = (0, 19, 0)


def scheduler_defaults(version_text: str | None) -> dict[str, object]:
    """The scheduler settings a release runs with by default, as SchedulerSpec keys
    (empty without a version: pagesim's own defaults)."""
    if version_text is None:
        return {}
    version = parse_version(version_text)
    return {
        "async_scheduling": version >= ASYNC_SCHEDULING_FROM,
        "reserve_full_prompt": version >= RESERVE_FULL_PROMPT_FROM,
    }


def resolved_scheduler(scheduler, version_text: str | None):
    """``scheduler`` (a SchedulerSpec) with every setting left to the release (None)
    given the release's default, or pagesim's own without a version."""
    defaults = scheduler_defaults(version_text)
    update = {}
    if scheduler.async_scheduling is None:
        update["async_scheduling"] = bool(defaults.get("async_scheduling", False))
    if scheduler.reserve_full_prompt is None:
        update["reserve_full_prompt"] = bool(defaults.get("reserve_full_prompt", True))
    return scheduler.model_copy(update=update) if update else scheduler


#: CUDA-graph sizes (vLLM's ``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py``, the
#: V1 default since the engine compiles its models): 1, 2, 4, the multiples of 8 below 256,
#: then the multiples of 16 from 256 up to ``min(2 x max_num_seqs, 512)``, none above
#: ``max_num_batched_tokens``
MAX_CAPTURE_SIZE = 512


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """The token counts a V1 server captures CUDA graphs for (ascending)."""
    largest = min(2 * max_num_seqs, MAX_CAPTURE_SIZE)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= min(largest, max_num_batched_tokens))
