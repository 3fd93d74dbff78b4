"""A GPU named as people and tools write it, matched to pagesim's GPU names.

``nvidia-smi`` prints ``NVIDIA H100 80GB HBM3``, clouds sell ``A100-SXM4-80GB``, people
write ``H100`` or ``h100``: :func:`resolve_gpu` takes any of these and returns the name
of the one GPU of :data:`~pagesim.simulator.model_gpu_specs.GPUS` it can be, or a
one-line ConfigError listing the candidates (``A100``: a100-40gb and a100-80gb) or, when
none fits, the known names.

The rule, on lower-cased words (split at anything that is not a letter or a digit):

- words that say nothing about which chip it is are dropped (the vendor, the brand, the
  architecture, the memory type: :data:`IGNORED`);
- a memory size (``80gb``) must be within :data:`MEMORY_TOLERANCE` of the GPU's memory
  (in GB or GiB: vendors print either);
- a form factor (``sxm``, ``sxm4``, ``pcie``, ``nvl``, ``server``, ``workstation``) must
  be the GPU's where pagesim's spec is of one form (:data:`FORMS`: an A100 or H100
  priced at SXM bandwidth is not a PCIe card);
- every other word names the chip, and the chip words of the text and of the GPU's name
  must be the same set (``RTX 6000 Ada`` is not ``rtx-pro-6000-server``).
"""

from __future__ import annotations

import re

from pagesim.errors import ConfigError

#: words that do not tell GPUs apart (vendor, product line, architecture, memory type)
IGNORED = frozenset(
    {"nvidia", "geforce", "tesla", "tensor", "core", "gpu", "graphics", "edition", "blackwell",
     "hopper", "ampere", "hbm", "hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"}
)  # fmt: skip
#: form-factor words and the form each names
FORM_WORDS = {
    "sxm": "sxm",
    "sxm2": "sxm",
    "sxm4": "sxm",
    "sxm5": "sxm",
    "pcie": "pcie",
    "nvl": "pcie",
    "server": "server",
    "workstation": "workstation",
}
#: the form factor pagesim's spec of a GPU is priced at (its datasheet's bandwidth and
#: link: ``model_gpu_specs.py``); a GPU not listed accepts any form
FORMS = {
    "a100-40gb": "sxm",
    "a100-80gb": "sxm",
    "h100-sxm": "sxm",
    "h200": "sxm",
    "rtx-pro-6000-server": "server",
}
#: how far a memory size in the text may be from the spec's (vendors round: an H100's
#: 81,559 MiB is sold as 80 GB, an H200's 143,771 MiB as 141 GB)
MEMORY_TOLERANCE = 0.1

_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(gb|g|gib)$")


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9.]+", text.lower()) if w and w != "."]


def _parts(text: str) -> tuple[frozenset[str], float | None, str | None]:
    """(chip words, memory in GB or None, form or None) of a GPU's name or description."""
    chip, memory, form = set(), None, None
    for word in _words(text):
        match = _MEMORY.match(word)
        if match:
            memory = float(match.group(1))
        elif word in FORM_WORDS:
            form = FORM_WORDS[word]
        elif word not in IGNORED:
            chip.add(word)
    return frozenset(chip), memory, form


def _fits(name: str, text: str) -> bool:
    from pagesim.simulator.model_gpu_specs import GPUS

    chip, memory, form = _parts(text)
    own_chip, _, own_form = _parts(name)
    if chip != own_chip:
        return False
    wanted_form = FORMS.get(name, own_form)
    if form is not None and wanted_form is not None and form != wanted_form:
        return False
    if memory is not None:
        size = GPUS[name].memory_bytes
        near = [abs(memory - size / unit) / (size / unit) for unit in (1e9, 2**30)]
        if min(near) > MEMORY_TOLERANCE:
            return False
    return True


def gpu_candidates(text: str) -> list[str]:
    """The pagesim GPU names ``text`` can be (module docstring), sorted."""
    from pagesim.simulator.model_gpu_specs import GPUS

    exact = text.strip().lower()
    if exact in GPUS:
        return [exact]
    return sorted(name for name in GPUS if _fits(name, text))


def resolve_gpu(text: str, *, key: str = "--gpu") -> str:
    """The one pagesim GPU ``text`` names, or a one-line ConfigError naming ``key``: the
    candidates when several fit, the known names when none does."""
    from pagesim.simulator.model_gpu_specs import GPUS

    found = gpu_candidates(str(text))
    if len(found) == 1:
        return found[0]
    if found:
        raise ConfigError(
            f"{key} {text!r}: matches several pagesim GPUs: {', '.join(found)}; name one "
            "(its memory tells them apart, e.g. A100-80GB)"
        )
    raise ConfigError(f"{key} {text!r}: no pagesim GPU matches it; known GPUs: {', '.join(GPUS)}")
