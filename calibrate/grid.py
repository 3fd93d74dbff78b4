"""The grid of shapes to time: what is measured for each cost term, and its features.

Every :class:`Case` carries the physical features of ``pagesim.simulator.costmodel.features``
(the same functions the simulator evaluates), so a fitted term means the same thing on both
sides. The grid, for one model's layer (plain dims, :class:`~pagesim.calibrate.models.ModelDims`):

- paged decode attention: a *core* set at block 16 with the model's heads over batch sizes
  x context lengths x context mixes (``uniform``: every sequence has the length;
  ``skewed``: lognormal lengths with that mean, as serving batches have), each with a
  contiguous-cache twin of the same shape (same ``shape_id``: the paged-vs-contiguous
  overhead), plus a seeded random sample over block sizes 1-256 and head configurations
  (GQA, head dims 64/80/96) so that per-block and per-byte costs are separable;
- prefill attention: batches of equal-length prompts (no cached prefix);
- gemm: the model's four linear layers at token counts 1 to 4096 (both roofline regimes);
- kv_write: token counts x head configurations; block_copy and swap: block counts x sizes;
- for the report (``compare``): a block-size sweep of paged decode attention at the model's
  heads (every block size of ``BLOCK_SIZES`` at a few batch x context shapes, uniform and
  skewed mixes: achieved bandwidth by block size), the single-pass and the partitioned
  kernel forced at the same shapes (the variant vLLM's rule would not pick there is timed
  but not fitted, ``Case.in_fit``), and the layer and LM-head GEMMs of the models in
  ``gemm_models`` (the simulator's own shapes, ``costmodel.model.layer_gemm_shapes``).

A paged case's ``kernel`` names the variant that runs (``paged_v1`` single pass,
``paged_v2`` partitioned): vLLM's rule (``cupy_ops.use_partitioned``) unless forced.

Shapes whose KV cache (for the core set: the contiguous twin's, padded to the longest
sequence) would exceed ``max_kv_bytes`` are not planned (the limit keeps the
grid inside a GPU's memory; it is part of the plan, recorded in the report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagesim.calibrate.cupy_ops import use_partitioned
from pagesim.calibrate.models import ModelDims
from pagesim.calibrate.sources import HEAD_DIMS
from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.model import layer_gemm_shapes, lm_head_shape
from pagesim.simulator.model_gpu_specs import ModelSpec, get_model

DTYPE_BYTES = 2
MAX_CONTEXT = 8192
CORE_BLOCK_SIZE = 16
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: shape ids of the seeded random sample start with this (the rest are planned shapes)
SAMPLE_PREFIX = "rand"
#: names of the simulator's four GEMMs of a layer (``layer_gemm_shapes`` order)
LAYER_GEMM_NAMES = ("qkv", "out", "up", "down")


@dataclass(frozen=True)
class Case:
    """One shape to time: which term, which kernel, its parameters and features."""

    term: str
    kernel: str
    shape_id: str
    params: dict[str, Any] = field(hash=False)
    features: F.Features
    #: False for a shape timed for the report only, not fitted (a kernel variant that
    #: vLLM's rule would not run there)
    in_fit: bool = True


@dataclass(frozen=True)
class GridSpec:
    batch_sizes: tuple[int, ...]
    context_lens: tuple[int, ...]
    num_random_decode: int
    prefill_batches: tuple[int, ...]
    prefill_lens: tuple[int, ...]
    gemm_tokens: tuple[int, ...]
    kv_write_tokens: tuple[int, ...]
    copy_num_blocks: tuple[int, ...]
    copy_block_sizes: tuple[int, ...]
    max_kv_bytes: float = 8e9
    #: (batch, mean context) shapes swept over every block size, uniform and skewed
    block_sweep: tuple[tuple[int, int], ...] = ()
    #: (batch, context) shapes timed with the single-pass and with the partitioned kernel
    variant_pairs: tuple[tuple[int, int], ...] = ()
    #: models (``simulator.model_gpu_specs.MODELS``) whose layer and LM-head GEMMs are timed,
    #: each as ``name`` (one GPU) or ``name@tpN`` (the shapes of one GPU of a TP-N group)
    gemm_models: tuple[str, ...] = ()


def gemm_model(entry: str) -> tuple[ModelSpec, int]:
    """The model and tensor-parallel degree of a ``gemm_models`` entry (``name`` or ``name@tpN``)."""
    name, sep, tp = entry.partition("@tp")
    if sep and not tp.isdigit():
        raise ValueError(f"gemm_models entry {entry!r}: expected NAME or NAME@tpN")
    return get_model(name), int(tp) if sep else 1


#: the GEMM shapes of the H100 validation runs' dense models beyond the shipped experiments'
#: (``pagesim validate-vllm --data inference_sim_h100_v0151``: Llama-2-7B at TP 1 and
#: Llama-2-70B at TP 4; the Mixtral runs are not modelled)
H100_VALIDATION_GEMM_MODELS = ("llama-2-70b@tp4",)

FULL_GRID = GridSpec(
    batch_sizes=(1, 4, 16, 32, 64, 128, 256),
    context_lens=(1, 64, 256, 1024, 2048, 4096),
    num_random_decode=400,
    prefill_batches=(1, 2, 4, 8),
    prefill_lens=(16, 64, 128, 256, 512, 1024, 2048),
    gemm_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    kv_write_tokens=(1, 4, 16, 64, 256, 1024, 4096),
    copy_num_blocks=(1, 4, 16, 64, 256, 1024),
    copy_block_sizes=(8, 16, 32, 128),
    block_sweep=((8, 4096), (64, 1024), (64, 4096)),
    variant_pairs=((1, 1024), (1, 4096), (4, 2048), (8, 4096), (16, 2048), (64, 2048), (256, 1024)),
    # the models of the shipped experiments, then the H100 validation's that they lack
    # (inference_sim_h100_v0151: Llama-2-70B at TP 4); tests/calibrate/test_gpu_task.py checks
    gemm_models=("opt-13b", "llama-13b", "llama-2-7b", "opt-66b@tp4", "opt-175b@tp8")
    + H100_VALIDATION_GEMM_MODELS,
)

QUICK_GRID = GridSpec(
    batch_sizes=(1, 16, 64, 128),
    context_lens=(1, 256, 1024, 4096),
    num_random_decode=40,
    prefill_batches=(1, 2, 4),
    prefill_lens=(16, 64, 128, 512, 1024, 2048),
    gemm_tokens=(1, 8, 64, 256, 1024, 4096),
    kv_write_tokens=(1, 16, 256, 4096),
    copy_num_blocks=(1, 16, 256),
    copy_block_sizes=(16, 128),
)


def head_configs(dims: ModelDims) -> list[tuple[int, int, int]]:
    """(num_heads, num_kv_heads, head_dim): the model's, a GQA variant, the other head dims."""
    configs = [(dims.num_heads, dims.num_kv_heads, dims.head_dim)]
    if dims.num_kv_heads % 4 == 0:
        configs.append((dims.num_heads, dims.num_kv_heads // 4, dims.head_dim))
    configs += [(32, 32, d) for d in HEAD_DIMS if d != dims.head_dim]
    return configs


def context_mix(mean_len: int, batch: int, mix: str, rng: np.random.Generator) -> tuple[int, ...]:
    if mix == "uniform":
        return (mean_len,) * batch
    lens = np.clip(np.round(mean_len * rng.lognormal(-0.5, 1.0, batch)), 1, MAX_CONTEXT)
    return tuple(int(x) for x in lens)


def _decode_cases(
    shape_id, lens, mix, block_size, heads, with_twin, partitioned: bool | None = None
) -> list[Case]:
    """A paged case (and its contiguous twin); ``partitioned`` forces the kernel variant."""
    nh, nkv, hd = heads
    by_rule = use_partitioned(max(lens), len(lens), nh)
    params = {
        "batch": len(lens),
        "context_mix": mix,
        "context_lens": list(lens),
        "block_size": block_size,
        "num_heads": nh,
        "num_kv_heads": nkv,
        "head_dim": hd,
        "partitioned": by_rule if partitioned is None else partitioned,
    }
    cases = [
        Case(
            "paged_decode_attention",
            "paged_v2" if params["partitioned"] else "paged_v1",
            shape_id,
            params,
            F.decode_attention(lens, nh, nkv, hd, block_size, DTYPE_BYTES),
            in_fit=params["partitioned"] == by_rule,
        )
    ]
    if with_twin:
        cases.append(
            Case(
                "contiguous_decode_attention",
                "contiguous",
                shape_id,
                {**params, "block_size": max(lens), "partitioned": False},
                F.decode_attention(lens, nh, nkv, hd, max(lens), DTYPE_BYTES),
            )
        )
    return cases


def _kv_bytes(lens, heads) -> float:
    return 2.0 * sum(lens) * heads[1] * heads[2] * DTYPE_BYTES


def plan_grid(dims: ModelDims, spec: GridSpec, rng: np.random.Generator) -> list[Case]:
    """All cases for ``dims`` under ``spec``, in a deterministic order (seeded ``rng``)."""
    configs = head_configs(dims)
    cases = _decode_grid(dims, spec, rng, configs)
    cases += _prefill_cases(dims, spec)
    cases += _gemm_cases(dims, spec)
    cases += _kv_write_cases(spec, configs)
    cases += _copy_cases(dims, spec)
    return cases + _report_cases(dims, spec, rng, cases)


def _decode_grid(
    dims: ModelDims, spec: GridSpec, rng: np.random.Generator, configs: list[tuple[int, int, int]]
) -> list[Case]:
    """The decode attention cases: the core grid, then the random head configurations."""
    cases: list[Case] = []
    model_heads = (dims.num_heads, dims.num_kv_heads, dims.head_dim)
    for b in spec.batch_sizes:
        for c in spec.context_lens:
            for mix in ("uniform", "skewed") if c > 1 else ("uniform",):
                lens = context_mix(c, b, mix, rng)
                padded = [max(lens)] * len(lens)  # the contiguous twin's cache
                if _kv_bytes(padded, model_heads) <= spec.max_kv_bytes:
                    cases += _decode_cases(
                        f"core-b{b}-c{c}-{mix}", lens, mix, CORE_BLOCK_SIZE, model_heads, True
                    )
    for i in range(spec.num_random_decode):
        heads = configs[int(rng.integers(len(configs)))]
        b = int(rng.choice(spec.batch_sizes))
        c = int(rng.choice(spec.context_lens))
        mix = str(rng.choice(["uniform", "skewed"]))
        bs = int(rng.choice(BLOCK_SIZES))
        lens = context_mix(c, b, mix, rng)
        if _kv_bytes(lens, heads) <= spec.max_kv_bytes:
            cases += _decode_cases(f"{SAMPLE_PREFIX}{i}", lens, mix, bs, heads, False)
    return cases


def _prefill_cases(dims: ModelDims, spec: GridSpec) -> list[Case]:
    cases = []
    for b in spec.prefill_batches:
        for q in spec.prefill_lens:
            lens = [q] * b
            params = {
                "batch": b,
                "new_len": q,
                "num_heads": dims.num_heads,
                "num_kv_heads": dims.num_kv_heads,
                "head_dim": dims.head_dim,
            }
            cases.append(
                Case(
                    "prefill_attention",
                    "cupy_matmul",
                    f"prefill-b{b}-q{q}",
                    params,
                    F.prefill_attention(
                        lens, lens, dims.num_heads, dims.num_kv_heads, dims.head_dim, DTYPE_BYTES
                    ),
                )
            )
    return cases


def _gemm_cases(dims: ModelDims, spec: GridSpec) -> list[Case]:
    cases = []
    for layer, (k, n) in dims.linear_shapes.items():
        for m in spec.gemm_tokens:
            cases.append(
                Case(
                    "gemm",
                    "cupy_matmul",
                    f"gemm-{layer}-m{m}",
                    {"layer": layer, "model": dims.name, "m": m, "k": k, "n": n},
                    F.gemm(m, k, n, DTYPE_BYTES),
                )
            )
    return cases


def _kv_write_cases(spec: GridSpec, configs: list[tuple[int, int, int]]) -> list[Case]:
    cases = []
    for _nh, nkv, hd in configs[:2]:
        for t in spec.kv_write_tokens:
            cases.append(
                Case(
                    "kv_write",
                    "reshape_and_cache",
                    f"kvw-t{t}-kv{nkv}-d{hd}",
                    {
                        "num_tokens": t,
                        "num_kv_heads": nkv,
                        "head_dim": hd,
                        "block_size": CORE_BLOCK_SIZE,
                    },
                    F.kv_write(t, nkv, hd, DTYPE_BYTES),
                )
            )
    return cases


def _copy_cases(dims: ModelDims, spec: GridSpec) -> list[Case]:
    cases = []
    for bs in spec.copy_block_sizes:
        block_bytes = 2 * dims.num_kv_heads * bs * dims.head_dim * DTYPE_BYTES
        for nb in spec.copy_num_blocks:
            params = {
                "num_blocks": nb,
                "block_size": bs,
                "num_kv_heads": dims.num_kv_heads,
                "head_dim": dims.head_dim,
                "block_bytes": block_bytes,
            }
            cases.append(
                Case(
                    "block_copy",
                    "copy_blocks",
                    f"copy-n{nb}-bs{bs}",
                    params,
                    F.block_copy(nb, block_bytes),
                )
            )
            cases.append(
                Case("swap", "memcpy_pinned", f"swap-n{nb}-bs{bs}", params, F.swap(nb, block_bytes))
            )
    return cases


def _report_cases(
    dims: ModelDims, spec: GridSpec, rng: np.random.Generator, planned: list[Case]
) -> list[Case]:
    """The block-size sweep, the kernel-variant pairs and the models' GEMMs (module doc)."""
    cases: list[Case] = []
    heads = (dims.num_heads, dims.num_kv_heads, dims.head_dim)
    for b, c in spec.block_sweep:
        for mix in ("uniform", "skewed"):
            lens = context_mix(c, b, mix, rng)
            if _kv_bytes(lens, heads) <= spec.max_kv_bytes:
                for bs in BLOCK_SIZES:
                    cases += _decode_cases(
                        f"bsweep-b{b}-c{c}-{mix}-bs{bs}", lens, mix, bs, heads, False
                    )
    for b, c in spec.variant_pairs:
        lens = (c,) * b
        if _kv_bytes(lens, heads) <= spec.max_kv_bytes:
            for v, partitioned in (("v1", False), ("v2", True)):
                cases += _decode_cases(
                    f"variant-b{b}-c{c}-{v}",
                    lens,
                    "uniform",
                    CORE_BLOCK_SIZE,
                    heads,
                    False,
                    partitioned,
                )
    seen = {(c.params["k"], c.params["n"]) for c in planned if c.term == "gemm"}
    for name in spec.gemm_models:
        model, tp = gemm_model(name)
        layers = dict(zip(LAYER_GEMM_NAMES, layer_gemm_shapes(model, tp), strict=True))
        layers["lm_head"] = lm_head_shape(model, tp)
        for layer, (k, n) in layers.items():
            if (k, n) in seen:
                continue
            seen.add((k, n))
            for m in spec.gemm_tokens:
                cases.append(
                    Case(
                        "gemm",
                        "cupy_matmul",
                        f"gemm-{name}-{layer}-m{m}",
                        {"layer": layer, "model": name, "m": m, "k": k, "n": n},
                        F.gemm(m, k, n, DTYPE_BYTES),
                    )
                )
    return cases
