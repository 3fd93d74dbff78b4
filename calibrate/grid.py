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
- kv_write: token counts x head configurations; block_copy and swap: block counts x sizes.

Shapes whose KV cache (for the core set: the contiguous twin's, padded to the longest
sequence) would exceed ``max_kv_bytes`` are not planned (the limit keeps the
grid inside a GPU's memory; it is part of the plan, recorded in the report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagesim.calibrate.models import ModelDims
from pagesim.calibrate.sources import HEAD_DIMS
from pagesim.simulator.costmodel import features as F

DTYPE_BYTES = 2
MAX_CONTEXT = 8192
CORE_BLOCK_SIZE = 16
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Case:
    """One shape to time: which term, which kernel, its parameters and features."""

    term: str
    kernel: str
    shape_id: str
    params: dict[str, Any] = field(hash=False)
    features: F.Features


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


FULL_GRID = GridSpec(
    batch_sizes=(1, 4, 16, 32, 64, 128, 256),
    context_lens=(1, 64, 256, 1024, 2048, 4096),
    num_random_decode=150,
    prefill_batches=(1, 2, 4, 8),
    prefill_lens=(16, 64, 128, 256, 512, 1024, 2048),
    gemm_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    kv_write_tokens=(1, 4, 16, 64, 256, 1024, 4096),
    copy_num_blocks=(1, 4, 16, 64, 256, 1024),
    copy_block_sizes=(8, 16, 32, 128),
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


def _decode_cases(shape_id, lens, mix, block_size, heads, with_twin) -> list[Case]:
    nh, nkv, hd = heads
    params = {
        "batch": len(lens),
        "context_mix": mix,
        "context_lens": list(lens),
        "block_size": block_size,
        "num_heads": nh,
        "num_kv_heads": nkv,
        "head_dim": hd,
    }
    cases = [
        Case(
            "paged_decode_attention",
            "paged",
            shape_id,
            params,
            F.decode_attention(lens, nh, nkv, hd, block_size, DTYPE_BYTES),
        )
    ]
    if with_twin:
        cases.append(
            Case(
                "contiguous_decode_attention",
                "contiguous",
                shape_id,
                {**params, "block_size": max(lens)},
                F.decode_attention(lens, nh, nkv, hd, max(lens), DTYPE_BYTES),
            )
        )
    return cases


def _kv_bytes(lens, heads) -> float:
    return 2.0 * sum(lens) * heads[1] * heads[2] * DTYPE_BYTES


def plan_grid(dims: ModelDims, spec: GridSpec, rng: np.random.Generator) -> list[Case]:
    """All cases for ``dims`` under ``spec``, in a deterministic order (seeded ``rng``)."""
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
    configs = head_configs(dims)
    for i in range(spec.num_random_decode):
        heads = configs[int(rng.integers(len(configs)))]
        b = int(rng.choice(spec.batch_sizes))
        c = int(rng.choice(spec.context_lens))
        mix = str(rng.choice(["uniform", "skewed"]))
        bs = int(rng.choice(BLOCK_SIZES))
        lens = context_mix(c, b, mix, rng)
        if _kv_bytes(lens, heads) <= spec.max_kv_bytes:
            cases += _decode_cases(f"rand{i}", lens, mix, bs, heads, False)
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
    for layer, (k, n) in dims.linear_shapes.items():
        for m in spec.gemm_tokens:
            cases.append(
                Case(
                    "gemm",
                    "cupy_matmul",
                    f"gemm-{layer}-m{m}",
                    {"layer": layer, "m": m, "k": k, "n": n},
                    F.gemm(m, k, n, DTYPE_BYTES),
                )
            )
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
