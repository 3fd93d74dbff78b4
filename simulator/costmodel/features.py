"""Physical features of each kernel family: bytes moved, FLOPs, blocks touched, sequences.

One source of truth for both sides of the cost model: ``calibrate`` computes these
for every shape it times and fits a profile term on them; the simulator computes
them for every step and evaluates the term. All sizes are for one layer on one GPU
(tensor-parallel shards are the caller's business) and ``dtype_bytes`` per element.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


class Features(NamedTuple):
    """A kernel's physical features (an immutable named tuple: steps build several)."""

    bytes_: float = 0.0
    flops: float = 0.0
    blocks: float = 0.0
    seqs: float = 0.0
    tokens: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "bytes": self.bytes_,
            "flops": self.flops,
            "blocks": self.blocks,
            "seqs": self.seqs,
            "tokens": self.tokens,
        }


def gemm(num_tokens: int, in_features: int, out_features: int, dtype_bytes: int = 2) -> Features:
    """Y[m, n] = X[m, k] @ W[k, n]: read X and W, write Y; 2 m k n FLOPs."""
    m, k, n = num_tokens, in_features, out_features
    return Features(
        bytes_=float((m * k + k * n + m * n) * dtype_bytes),
        flops=2.0 * m * k * n,
        tokens=float(m),
    )


def prefill_attention(
    new_lens: Sequence[int],
    context_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int = 2,
) -> Features:
    """Causal attention of each prompt's new tokens over its context (cached prefix + new).

    Query i of a sequence with context c and q new tokens attends over c - q + i + 1 keys;
    summed over queries that is q (c - q) + q (q + 1) / 2 scores, each costing
    2 head_dim FLOPs for QK^T and 2 head_dim for PV, per head.
    """
    num_seqs = tokens = context_sum = 0
    scores = 0.0
    for q, c in zip(new_lens, context_lens, strict=True):
        num_seqs += 1
        tokens += q
        context_sum += c
        scores += q * (c - q) + q * (q + 1) / 2
    return prefill_attention_totals(
        num_seqs, tokens, context_sum, scores, num_heads, num_kv_heads, head_dim, dtype_bytes
    )


def prefill_attention_totals(
    num_seqs: int,
    num_tokens: int,
    context_sum: int,
    scores: float,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int = 2,
) -> Features:
    """:func:`prefill_attention` from its sufficient statistics: the number of prompts,
    the new tokens and the contexts summed, and the scores ``q (c - q) + q (q + 1) / 2``
    summed (every product is an integer or a half, so sums are exact below 2**53)."""
    # read Q and write O for the new tokens; read K and V over the whole context
    bytes_ = (2 * num_tokens * num_heads + 2 * context_sum * num_kv_heads) * head_dim * dtype_bytes
    return Features(
        bytes_=float(bytes_),
        flops=4.0 * head_dim * num_heads * scores,
        seqs=float(num_seqs),
        tokens=float(num_tokens),
    )


def decode_attention(
    context_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype_bytes: int = 2,
) -> Features:
    """One query token per sequence over its K/V cache (paged or contiguous).

    Bytes are the K and V read (the dominant traffic) plus Q read and O written;
    blocks are the KV blocks touched per KV head (the paged kernel's per-block work;
    pass block_size = max context for a contiguous cache).
    """
    total_ctx = sum(context_lens)
    num_blocks = sum(-(-c // block_size) for c in context_lens)
    return decode_attention_totals(
        len(context_lens), total_ctx, num_blocks, num_heads, num_kv_heads, head_dim, dtype_bytes
    )


def decode_attention_totals(
    num_seqs: Any,
    total_ctx: Any,
    num_blocks: Any,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int = 2,
) -> Features:
    """:func:`decode_attention` from its sufficient statistics.

    The features depend on the context lengths only through their count, their sum
    and the sum of their block counts (sum of ceil(ctx / block_size)), so a caller
    that keeps those running totals need not pass the lengths. Plain arithmetic: the
    three totals may be numpy arrays (one entry per step), and so is every field then.
    """
    kv_bytes = 2.0 * total_ctx * num_kv_heads * head_dim * dtype_bytes
    qo_bytes = 2.0 * num_seqs * num_heads * head_dim * dtype_bytes
    return Features(
        bytes_=kv_bytes + qo_bytes,
        flops=4.0 * total_ctx * num_heads * head_dim,
        blocks=1.0 * num_blocks * num_kv_heads,
        seqs=1.0 * num_seqs * num_heads,
        tokens=1.0 * total_ctx,
    )


def kv_write(num_tokens: int, num_kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> Features:
    """reshape_and_cache: read the new K and V and scatter them into their slots."""
    b = 2.0 * 2 * num_tokens * num_kv_heads * head_dim * dtype_bytes
    return Features(bytes_=b, tokens=float(num_tokens))


def block_copy(num_blocks: int, block_bytes: int) -> Features:
    """Copy whole blocks (read + write), ``block_bytes`` = one block's K and V, one layer."""
    return Features(bytes_=2.0 * num_blocks * block_bytes, blocks=float(num_blocks))


def swap(num_blocks: int, block_bytes: int) -> Features:
    """Move blocks across PCIe (one direction), ``block_bytes`` = one block, one layer."""
    return Features(bytes_=float(num_blocks * block_bytes), blocks=float(num_blocks))


def pointwise_elems_per_token(
    arch: str,
    hidden: int,
    ffn_per_gpu: int,
    q_dim: int,
    kv_dim: int,
    has_qk_norm: bool = False,
) -> int:
    """Elements one token's element-wise kernels of one layer read and write.

    LLaMA (vLLM's kernels): two RMSNorms (read + write h each), rotary embedding on q and
    k (read + write), SiLU-and-mul (read 2f, write f), the residual add (read 2h, write h);
    with ``has_qk_norm`` (Qwen3) also the per-head RMSNorms of q and k (read + write).
    OPT: two LayerNorms, ReLU (read + write f), two residual adds (bias adds are fused
    into the GEMMs). ``ffn_per_gpu`` and the q/kv widths are the TP shard's.
    """
    if arch == "llama":
        elems = 2 * 2 * hidden + 2 * (q_dim + kv_dim) + 3 * ffn_per_gpu + 3 * hidden
        return elems + (2 * (q_dim + kv_dim) if has_qk_norm else 0)
    return 2 * 2 * hidden + 2 * ffn_per_gpu + 2 * 3 * hidden


def pointwise(num_tokens: int, elems_per_token: int, dtype_bytes: int = 2) -> Features:
    """A layer's element-wise kernels over ``num_tokens`` tokens: the bytes they move."""
    return Features(
        bytes_=float(num_tokens * elems_per_token * dtype_bytes), tokens=float(num_tokens)
    )


def step_overhead(num_seqs: int, num_tokens: int) -> Features:
    """The per-step fixed cost's features: sequences and tokens scheduled (no bytes, no FLOPs)."""
    return Features(seqs=float(num_seqs), tokens=float(num_tokens))
