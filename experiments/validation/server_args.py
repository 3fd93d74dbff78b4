"""A vLLM server's command line, pasted as it is: what pagesim applies, what it does not model.

``--server-args`` (``replay-vllm``, ``capacity``, ``pagesim-runs.yaml``'s ``server_args``)
takes the flags ``vllm serve`` was started with, optionally with ``vllm serve MODEL`` in
front. :func:`parse_server_args` reads every flag (``--flag value``, ``--flag=value``, a
boolean flag alone or with ``true``/``false``) without a list of vLLM's flags, which change
by release (``vllm/engine/arg_utils.py`` builds most of them from its config classes):

- the flags that change what pagesim models are applied (:data:`VALUED`, :data:`SWITCHES`,
  and ``--dtype``, ``--enforce-eager``, ``--swap-space`` with their own rule, below), as
  RunSpec paths; a value pagesim cannot take (``--dtype float32``) is refused in one line;
- every other flag is kept in ``not_modelled`` (the pages list them once), those that
  change the server's speed or memory in :data:`CONSEQUENTIAL` said so;
- a flag one letter or two from a flag pagesim applies (``--max-num-seq``) is refused as a
  likely typo (vLLM itself would refuse it), naming the flag meant.

Rules beyond the one-to-one flags:

- ``--dtype``: pagesim prices 16-bit weights and activations (``ModelSpec.dtype_bytes``):
  ``auto``, ``half``, ``float16``, ``bfloat16`` are that; ``float``/``float32`` refused;
- ``--kv-cache-dtype``: ``hardware.kv_cache_dtype`` (the fp8 forms halve the KV bytes per
  token, ``simulator/memory.py``);
- ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill``:
  ``scheduler.chunked_prefill`` (V1 chunks by default; without chunking a prompt runs whole
  or waits, ``schedulers/vllm_v1.py`` rule 7; pagesim's v0 scheduler never chunks, so the
  first is refused there by the spec);
- ``--enforce-eager``: ``server.enforce_eager`` (no CUDA graphs) where a release is named;
  without one pagesim's steps have no CUDA graphs to turn off, and the flag changes nothing;
- ``--swap-space``: ``allocator.swap_space_gib`` under the v0 scheduler; vLLM V1 has no
  swap, so under ``vllm-v1`` it changes nothing;
- ``--num-gpu-blocks-override N``: the pool is N blocks (``hardware.kv_slots``, set by the
  replay from the block size);
- ``--max-model-len`` takes vLLM's human-readable integers (``32k`` = 32,000, ``32K`` =
  32,768: ``vllm/utils`` ``human_readable_int``).

The model a command line names (``vllm serve MODEL``, ``--model``) is kept in ``model``;
turning a Hugging Face id into a pagesim model is not done here (see ``bench.served_model``).
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from pagesim.errors import ConfigError


def _human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``25.6k`` = 25,600, ``16K`` = 16,384, ``4096``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG]?)", text.strip())
    if match is None:
        raise ValueError(f"invalid integer {text!r}")
    number, suffix = match.groups()
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30}
    if suffix in decimal:
        return int(float(number) * decimal[suffix])
    if "." in number:
        raise ValueError(f"invalid integer {text!r}")
    return int(number) * binary.get(suffix, 1)


#: flags with a value -> (RunSpec path, how the value is read)
VALUED: dict[str, tuple[str, Any]] = {
    "--max-num-seqs": ("scheduler.max_num_seqs", int),
    "--max-num-batched-tokens": ("scheduler.max_num_batched_tokens", _human_int),
    "--block-size": ("allocator.block_size", int),
    "--gpu-memory-utilization": ("hardware.gpu_memory_utilization", float),
    "--tensor-parallel-size": ("hardware.tensor_parallel", int),
    "-tp": ("hardware.tensor_parallel", int),
    "--max-model-len": ("max_model_len", _human_int),
    "--num-gpu-blocks-override": ("hardware.kv_blocks", int),
    "--max-paddings": ("scheduler.max_paddings", int),
    "--long-prefill-token-threshold": ("scheduler.long_prefill_token_threshold", int),
    "--kv-cache-dtype": ("hardware.kv_cache_dtype", str),
    "--preemption-mode": ("scheduler.preemption_mode", str),
}
#: boolean flags -> (RunSpec path, the value the flag sets)
SWITCHES: dict[str, tuple[str, bool]] = {
    "--enable-prefix-caching": ("allocator.prefix_caching", True),
    "--no-enable-prefix-caching": ("allocator.prefix_caching", False),
    "--async-scheduling": ("scheduler.async_scheduling", True),
    "--no-async-scheduling": ("scheduler.async_scheduling", False),
    "--enable-chunked-prefill": ("scheduler.chunked_prefill", True),
    "--no-enable-chunked-prefill": ("scheduler.chunked_prefill", False),
}
#: flags with their own rule (module docstring)
SPECIAL = ("--dtype", "--enforce-eager", "--swap-space", "--model")
#: the 16-bit ``--dtype`` values pagesim prices (``ModelSpec.dtype_bytes`` = 2)
SIXTEEN_BIT = ("auto", "half", "float16", "bfloat16")
#: flags pagesim does not model that change the server's speed or memory: a replay of a
#: server started with them is off by their effect
CONSEQUENTIAL = frozenset(
    {"--quantization", "-q", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
     "--speculative-config", "--speculative-model", "--num-speculative-tokens",
     "--cpu-offload-gb", "--kv-transfer-config", "--enable-expert-parallel",
     "--enable-lora", "--max-num-partial-prefills", "--scheduling-policy", "--kv-offloading-size"}
)  # fmt: skip
#: how close (difflib ratio) an unknown flag must be to an applied one to be taken for a typo
TYPO_RATIO = 0.9


def applied_flags() -> list[str]:
    """Every flag pagesim applies, in the order the page lists them."""
    return [*VALUED, *SWITCHES, *(f for f in SPECIAL if f != "--model")]


@dataclass(frozen=True)
class ServerArgs:
    """A parsed command line: ``settings`` (RunSpec path -> value), the flags not modelled
    (as given, with their values), notes on flags that change nothing here, and the model
    the command line names (None if it names none)."""

    settings: dict[str, Any] = field(default_factory=dict)
    not_modelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    model: str | None = None

    def not_modelled_line(self) -> str:
        """The page's one line on the flags given that pagesim does not model ('' if none)."""
        if not self.not_modelled:
            return ""
        heavy = [f for f in self.not_modelled if f.split("=")[0].split()[0] in CONSEQUENTIAL]
        line = "Not modelled (given, ignored by pagesim): " + ", ".join(
            f"`{f}`" for f in self.not_modelled
        )
        if heavy:
            line += (
                f"; of these {', '.join(f'`{f}`' for f in heavy)} change the server's speed "
                "or memory: expect the replay off by their effect"
            )
        return line + "."


def _tokens(text: str) -> tuple[list[str], str | None]:
    """The flags' tokens, and the model named by a leading ``vllm serve MODEL``."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"--server-args: {exc}") from None
    model = None
    if tokens[:2] == ["vllm", "serve"]:
        tokens = tokens[2:]
        if tokens and not tokens[0].startswith("-"):
            model, tokens = tokens[0], tokens[1:]
    return tokens, model


def _is_value(token: str) -> bool:
    return not token.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", token) is not None


def _split(tokens: list[str]) -> list[tuple[str, str | None]]:
    """``(flag, value or None)`` in order; a positional argument where a flag belongs is an
    error."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-") or _is_value(token):
            raise ConfigError(
                f"--server-args: {token!r} is not a flag (give the server's flags, optionally "
                "after `vllm serve MODEL`)"
            )
        flag, sep, value = token.partition("=")
        if sep:
            pairs.append((flag, value))
        elif i + 1 < len(tokens) and _is_value(tokens[i + 1]):
            pairs.append((flag, tokens[i + 1]))
            i += 1
        else:
            pairs.append((flag, None))
        i += 1
    return pairs


def _switch(flag: str, value: str | None) -> bool:
    """A boolean flag alone is true; ``--flag true|false`` as older vLLM took them."""
    if value is None:
        return True
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"--server-args: {flag} takes no value or true/false, got {value!r}")


def _typo_check(flag: str) -> None:
    close = difflib.get_close_matches(flag, applied_flags(), n=1, cutoff=TYPO_RATIO)
    if close:
        raise ConfigError(
            f"--server-args: {flag!r} is not a vLLM flag pagesim knows; did you mean {close[0]!r}? "
            "(vLLM would refuse it too)"
        )


def parse_server_args(text: str, *, v1: bool) -> ServerArgs:
    """The command line ``text`` (module docstring), for a V1 server when ``v1``."""
    tokens, model = _tokens(text)
    settings: dict[str, Any] = {}
    not_modelled: list[str] = []
    notes: list[str] = []
    for flag, value in _split(tokens):
        if flag in VALUED:
            path, read = VALUED[flag]
            if value is None:
                raise ConfigError(f"--server-args: {flag} needs a value")
            try:
                settings[path] = read(value)
            except ValueError:
                raise ConfigError(f"--server-args: {flag} {value!r}: not a valid value") from None
        elif flag in SWITCHES:
            path, setting = SWITCHES[flag]
            settings[path] = setting if _switch(flag, value) else not setting
        elif flag == "--model":
            model = value
        elif flag == "--dtype":
            if value not in SIXTEEN_BIT:
                raise ConfigError(
                    f"--server-args: --dtype {value}: pagesim prices 16-bit weights and "
                    f"activations ({', '.join(SIXTEEN_BIT)}); a {value} server is not modelled"
                )
            notes.append(f"`--dtype {value}`: 16-bit, as pagesim prices every model")
        elif flag == "--enforce-eager":
            settings["server.enforce_eager"] = _switch(flag, value)
        elif flag == "--swap-space":
            if value is None:
                raise ConfigError("--server-args: --swap-space needs a value (GiB)")
            if v1:
                notes.append(f"`--swap-space {value}`: vLLM V1 has no swap, so it changes nothing")
            else:
                try:
                    settings["allocator.swap_space_gib"] = float(value)
                except ValueError:
                    raise ConfigError(
                        f"--server-args: --swap-space {value!r}: not a number"
                    ) from None
        else:
            _typo_check(flag)
            not_modelled.append(flag if value is None else f"{flag} {value}")
    if "scheduler.max_paddings" in settings:
        settings["scheduler.prefill_padding"] = True
    return ServerArgs(settings, tuple(not_modelled), tuple(notes), model)


def without_release(args: ServerArgs) -> ServerArgs:
    """``args`` for a run that names no vLLM release: ``--enforce-eager`` changes nothing
    there (pagesim's steps without a release have no CUDA graphs), said in a note."""
    if "server.enforce_eager" not in args.settings:
        return args
    settings = dict(args.settings)
    eager = settings.pop("server.enforce_eager")
    note = (
        "`--enforce-eager`: no vLLM release named, and pagesim's steps without one have no "
        "CUDA graphs to turn off"
        if eager
        else "`--enforce-eager false`: vLLM's default"
    )
    return ServerArgs(settings, args.not_modelled, (*args.notes, note), args.model)


def server_settings(text: str, *, v1: bool = False) -> dict[str, Any]:
    """The RunSpec paths of a command line for a run that names no release (a
    ``pagesim-runs.yaml``'s ``server_args``)."""
    return dict(without_release(parse_server_args(text, v1=v1)).settings)
