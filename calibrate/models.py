"""The per-layer dimensions the calibration grid needs, and the paper's models.

Sources: OPT (Zhang et al., 2022, Table 1 of arXiv:2205.01068) and LLaMA (Touvron et al.,
2023, Table 2 of arXiv:2302.13971); the PagedAttention paper evaluates OPT-13B/66B/175B and
LLaMA-13B. ``pagesim.simulator.model_gpu_specs.MODELS``, where it exists and names the model, is read
first so that the simulator and the calibration agree; this table is the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.errors import ConfigError


@dataclass(frozen=True)
class ModelDims:
    """One decoder layer's shapes: attention heads and the four linear layers."""

    name: str
    hidden_size: int
    ffn_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model {self.name!r}: num_heads {self.num_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )

    @property
    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer of one decoder layer."""
        h, q, kv = (
            self.hidden_size,
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        )
        return {
            "qkv_proj": (h, q + 2 * kv),
            "out_proj": (q, h),
            "fc1": (h, self.ffn_size),
            "fc2": (self.ffn_size, h),
        }


KNOWN_MODELS = {
    "opt-13b": ModelDims("opt-13b", 5120, 20480, 40, 40, 128),
    "opt-66b": ModelDims("opt-66b", 9216, 36864, 72, 72, 128),
    "opt-175b": ModelDims("opt-175b", 12288, 49152, 96, 96, 128),
    "llama-13b": ModelDims("llama-13b", 5120, 13824, 40, 40, 128),
}


def _from_simulator_specs(name: str) -> ModelDims | None:
    """Read ``pagesim.simulator.model_gpu_specs.MODELS[name]`` if that module and entry exist."""
    try:
        from pagesim.simulator.model_gpu_specs import MODELS  # type: ignore[import-not-found]
    except ImportError:
        return None
    spec = MODELS.get(name) if hasattr(MODELS, "get") else None
    if spec is None:
        return None
    get = lambda *keys: next(  # noqa: E731
        (getattr(spec, k) for k in keys if getattr(spec, k, None) is not None), None
    )
    hidden = get("hidden_size", "hidden")
    heads = get("num_heads", "num_attention_heads")
    if hidden is None or heads is None:
        return None
    head_dim = get("head_dim") or hidden // heads
    return ModelDims(
        name=name,
        hidden_size=int(hidden),
        ffn_size=int(get("ffn_size", "ffn_dim", "intermediate_size") or 4 * hidden),
        num_heads=int(heads),
        num_kv_heads=int(get("num_kv_heads", "num_key_value_heads") or heads),
        head_dim=int(head_dim),
    )


def model_dims(name: str) -> ModelDims:
    dims = _from_simulator_specs(name) or KNOWN_MODELS.get(name)
    if dims is None:
        raise ConfigError(f"--model {name!r} is not known; known models: {sorted(KNOWN_MODELS)}")
    return dims


def closest_gpu_spec(device_name: str, memory_bytes: int | None = None) -> str:
    """The key of ``pagesim.simulator.model_gpu_specs.GPUS`` that best matches a device's name.

    Score: how many of the key's dash-separated parts (``a100``, ``40gb``, ``sxm``) occur in
    the lower-cased device name; ties, and devices matching no key, go to the spec whose
    memory size is closest. Used for the profile's ``gpu_spec`` (projection to other GPUs).
    """
    from pagesim.simulator.model_gpu_specs import GPUS

    name = device_name.lower().replace(" ", "-")

    def score(key: str) -> tuple[int, float]:
        hits = sum(part in name for part in key.split("-"))
        mem_gap = abs(GPUS[key].memory_bytes - memory_bytes) if memory_bytes else 0.0
        return (hits, -mem_gap)

    return max(sorted(GPUS), key=score)
