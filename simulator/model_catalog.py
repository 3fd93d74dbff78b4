"""Which model ``hardware.model`` names: a shipped name, a Hugging Face id, or a config.json.

Shipped models are pagesim's hand-written specs (``model_gpu_specs.MODELS``, unchanged) and
the configs shipped in ``simulator/model_configs/<name>.json`` (:data:`SHIPPED_CONFIGS`:
each file is the checkpoint's Hugging Face ``config.json`` with its id in ``_name_or_path``
and where its values were read in ``_pagesim_source``), parsed by :mod:`.hf_config`.
``llama-3.1-8b`` and ``qwen3-32b`` are both: the hand-written spec is used, and a test
checks the shipped config parses to it.

:func:`resolve_model` is lenient: a shipped name or a Hugging Face id (:data:`HF_IDS`),
case-insensitive, with the fine-tune words ``instruct``, ``chat`` and ``hf`` dropped
(``meta-llama/Llama-3.1-8B-Instruct`` is ``llama-3.1-8b``: an instruction-tuned checkpoint
has its base's shapes), and a unique prefix (``mistral-7b``); anything else is a one-line
error listing the close matches. :func:`get_model` also takes a path to a ``config.json``
(or a folder holding one): a text ending in ``.json``, starting with ``/``, ``./``, ``../``
or ``~``, or naming a folder that holds a ``config.json``.
"""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path

from pagesim.errors import ConfigError
from pagesim.simulator.hf_config import load_model_config, model_spec_from_config, read_config
from pagesim.simulator.model_gpu_specs import MODELS, ModelSpec

#: the folder of the shipped config files
CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"

#: shipped config name -> its Hugging Face id (the file's ``_name_or_path``)
SHIPPED_CONFIGS = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "mistral-7b-v0.1": "mistralai/Mistral-7B-v0.1",
}

#: Hugging Face id -> shipped name, for the hand-written specs (their docstring names the
#: checkpoints) and the shipped configs
HF_IDS = {
    **{f"facebook/opt-{size}": f"opt-{size}" for size in ("125m", "350m", "1.3b", "2.7b")},
    **{f"facebook/opt-{size}": f"opt-{size}" for size in ("6.7b", "13b", "30b", "66b")},
    "huggyllama/llama-7b": "llama-7b",
    "huggyllama/llama-13b": "llama-13b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-hf": "codellama-34b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",
    **{hf_id: name for name, hf_id in SHIPPED_CONFIGS.items()},
}

_FINE_TUNE_WORDS = {"instruct", "chat", "hf"}


def shipped_names() -> list[str]:
    """Every shipped model name, sorted."""
    return sorted(set(MODELS) | set(SHIPPED_CONFIGS))


#: every shipped model name (the registry ``pagesim list`` prints)
SHIPPED_NAMES = tuple(shipped_names())


def _normal(text: str) -> str:
    """Lower case, without the fine-tune words (module doc)."""
    parts = text.strip().lower().split("-")
    return "-".join(p for p in parts if p not in _FINE_TUNE_WORDS)


@functools.cache
def _lookup() -> dict[str, str]:
    """Normalised shipped name, Hugging Face id and id-without-organisation -> shipped name."""
    table = {_normal(name): name for name in shipped_names()}
    for hf_id, name in HF_IDS.items():
        table.setdefault(_normal(hf_id), name)
        table.setdefault(_normal(hf_id.split("/", 1)[1]), name)
    return table


def resolve_model(text: str, *, key: str = "hardware.model") -> str:
    """The shipped name ``text`` means (module doc), or a ConfigError listing close matches."""
    table = _lookup()
    wanted = _normal(text)
    if wanted in table:
        return table[wanted]
    prefixed = sorted({name for k, name in table.items() if k.startswith(wanted + "-")})
    if len(prefixed) == 1:
        return prefixed[0]
    close = prefixed or sorted(
        {table[k] for k in difflib.get_close_matches(wanted, list(table), n=6, cutoff=0.6)}
    )
    hint = (
        f"close matches: {', '.join(close)}" if close else f"shipped: {', '.join(shipped_names())}"
    )
    what = "ambiguous" if len(prefixed) > 1 else "unknown"
    raise ConfigError(f"{key}: {what} model {text!r}; {hint} (or give the path of a config.json)")


def is_config_path(text: str) -> bool:
    """Whether ``text`` names a config file or folder rather than a model (module doc)."""
    if text.endswith(".json") or text.startswith(("/", "./", "../", "~")):
        return True
    return os.path.isfile(os.path.join(text, "config.json"))


def config_file(text: str) -> Path:
    """The config.json a path names (a folder's ``config.json``, ``~`` expanded)."""
    path = Path(os.path.expanduser(text))
    return path / "config.json" if path.is_dir() else path


@functools.cache
def _shipped_config(name: str) -> ModelSpec:
    path = CONFIG_DIR / f"{name}.json"
    doc = read_config(path, key=f"shipped model {name!r}")
    return model_spec_from_config(doc, name=name, source=str(path.name))


def get_model(text: str, *, key: str = "hardware.model") -> ModelSpec:
    """The ModelSpec ``text`` names: a hand-written spec, a shipped config, a Hugging Face
    id of either, or the path of a config.json (whose ``_name_or_path``, else the path as
    given, names the spec)."""
    if text in MODELS:
        return MODELS[text]
    if text in SHIPPED_CONFIGS:
        return _shipped_config(text)
    if is_config_path(text):
        return load_model_config(os.path.expanduser(text), key=key)
    return get_model(resolve_model(text, key=key), key=key)


def model_reference_problem(text: str, *, key: str = "hardware.model") -> str | None:
    """Why ``text`` names no model (None: it names one); reads a config a path names."""
    try:
        get_model(text, key=key)
    except ConfigError as exc:
        return str(exc)
    return None
