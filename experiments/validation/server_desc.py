"""The server a replay or a capacity search describes, and the lines that say how it ran.

From what a user has: the model and GPU (``--model``, ``--gpu``, leniently matched:
:func:`~pagesim.simulator.gpu_names.resolve_gpu`), the kernel profile, the server's
command line (``--server-args``, :mod:`.server_args`), the vLLM release (``--vllm-version``,
else a ``vllm_version`` field in the result: ``vllm bench serve --metadata
vllm_version=0.19.0`` writes one; vLLM writes none of its own), the scheduler and any
``--set``. The scheduler follows the release:

- a named release runs vLLM's V1 engine (``scheduler.kind: vllm-v1`` on ``paged-v1``) with
  that release's defaults (``simulator/vllm_releases.py``: async scheduling from v0.14.0,
  the admission rule from v0.19.0); ``--scheduler`` other than ``vllm-v1`` is then refused;
- without one, ``--scheduler`` (pagesim's default ``vllm``: vLLM v0.2-v0.4's engine).

:meth:`ServerDescription.page_lines` says in one line which scheduler ran and why, then
the flags given that pagesim does not model and the notes on those that change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pagesim.errors import ConfigError
from pagesim.experiments.validation.server_args import (
    ServerArgs,
    parse_server_args,
    without_release,
)

V0 = "vllm"
V1 = "vllm-v1"


def served_model(given: str | None, model_id: Any, named: str | None) -> str:
    """The pagesim model of the replay: ``--model``, else the model the command line names,
    else the result's ``model_id``: a shipped name, a Hugging Face id
    (``meta-llama/Llama-3.1-8B-Instruct``: ``simulator/model_catalog.py resolve_model``) or
    a config.json path, kept as given when it is a path; anything else is refused naming
    close matches."""
    from pagesim.simulator.model_catalog import is_config_path, resolve_model
    from pagesim.simulator.model_gpu_specs import MODELS, get_model

    name = given or named or (model_id if isinstance(model_id, str) else None)
    if not name:
        raise ConfigError(
            "--model: give the model served (a pagesim model name); the result names none "
            "(no model_id)"
        )
    try:
        get_model(name)
        return name if (name in MODELS or is_config_path(name)) else resolve_model(name)
    except ConfigError as exc:
        origin = "--model" if given else ("--server-args" if named else "the result's model_id")
        raise ConfigError(f"{origin}: {exc}; pass --model NAME") from None


@dataclass(frozen=True)
class ServerDescription:
    """A server as pagesim will run it (module docstring)."""

    model: str
    gpu: str
    profile: str | None
    scheduler: str
    version: str | None
    args: ServerArgs
    overrides: dict[str, Any] = field(default_factory=dict)
    #: why this scheduler ran: the flag, the result's field, or pagesim's default
    scheduler_origin: str = ""

    @property
    def settings(self) -> dict[str, Any]:
        """The RunSpec paths set: the flags', the release, then ``--set`` (last wins)."""
        release = {"server.vllm_version": self.version} if self.version else {}
        return {**self.args.settings, **release, **self.overrides}

    def run_doc(self, longest_request: int | None = None) -> dict[str, Any]:
        """The RunSpec document (bench.replay_doc) of this server; ``longest_request``: the
        run's longest prompt + output (the replay's ``max_model_len`` when none is given)."""
        from pagesim.experiments.validation.bench import replay_doc

        return replay_doc(
            model=self.model,
            gpu=self.gpu,
            profile=self.profile,
            scheduler=self.scheduler,
            settings=dict(self.settings),
            longest_request=longest_request,
        )

    def scheduler_line(self) -> str:
        """One line: which scheduler ran, and why."""
        if self.version:
            return (
                f"Scheduler: `{V1}` (vLLM's V1 engine) with vLLM {self.version}'s defaults, "
                f"because {self.scheduler_origin} names that release."
            )
        if self.scheduler == V0:
            return (
                f"Scheduler: `{V0}` (vLLM v0.2-v0.4's engine, pagesim's default): no vLLM "
                "release named; for a V1 server (vLLM 0.8 and later) give `--vllm-version X` "
                "(or `--scheduler vllm-v1`)."
            )
        return f"Scheduler: `{self.scheduler}`, as {self.scheduler_origin} asks (no release named)."

    def page_lines(self) -> list[str]:
        """The scheduler's line, the flags not modelled, the notes (each its own paragraph)."""
        lines = [self.scheduler_line()]
        if self.args.not_modelled:
            lines.append(self.args.not_modelled_line())
        if self.args.notes:
            lines.append("Flags that change nothing here: " + "; ".join(self.args.notes) + ".")
        return [part for line in lines for part in ("", line)]


def _version(given: str | None, raw: dict[str, Any] | None) -> tuple[str | None, str]:
    from pagesim.simulator.vllm_releases import check_modelled

    if given:
        check_modelled(given, key="--vllm-version")
        return given, f"`--vllm-version {given}`"
    found = (raw or {}).get("vllm_version")
    if found is None:
        return None, ""
    if not isinstance(found, str | int | float) or isinstance(found, bool):
        raise ConfigError(
            f"the result's vllm_version {found!r}: not a version; pass --vllm-version"
        )
    check_modelled(str(found), key="the result's vllm_version")
    return str(found), f"the result's `vllm_version` ({found})"


def describe_server(
    *,
    model: str | None,
    gpu: str,
    profile: str | None = None,
    scheduler: str | None = None,
    server_args: str = "",
    vllm_version: str | None = None,
    overrides: dict[str, Any] | None = None,
    raw: dict[str, Any] | None = None,
) -> ServerDescription:
    """The server (module docstring); ``raw`` is the result's JSON document, if any."""
    from pagesim.simulator.gpu_names import resolve_gpu

    version, origin = _version(vllm_version, raw)
    if version and scheduler not in (None, V1):
        raise ConfigError(
            f"--scheduler {scheduler}: {origin} names vLLM {version}, which runs vLLM's V1 "
            f"engine ({V1}); leave --scheduler out, or the release out to run {scheduler}"
        )
    kind = V1 if version else (scheduler or V0)
    if not version:
        origin = f"`--scheduler {scheduler}`" if scheduler else "pagesim's default"
    args = parse_server_args(server_args, v1=kind == V1)
    if not version:
        args = without_release(args)
    return ServerDescription(
        model=served_model(model, (raw or {}).get("model_id"), args.model),
        gpu=resolve_gpu(gpu),
        profile=profile,
        scheduler=kind,
        version=version,
        args=args,
        overrides=dict(overrides or {}),
        scheduler_origin=origin,
    )
