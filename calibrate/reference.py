"""numpy references of the calibration kernels (the ground truth of the GPU tests).

Layouts match ``kernels/paged_attention.cu`` and ``kernels/kv_cache.cu``:
K/V cache [num_blocks, num_kv_heads, block_size, head_dim]; q and out
[num_seqs, num_heads, head_dim]; block_tables [num_seqs, max_blocks] of physical block ids;
grouped-query attention maps query head h to KV head h // (num_heads // num_kv_heads).

``paged_attention`` follows the kernel's algorithm, the online softmax of the
PagedAttention paper (eq. 4): per KV block j, logits s_j = q K_j^T * scale,
m' = max(m, max s_j), l' = l e^(m - m') + sum e^(s_j - m'), acc' = acc e^(m - m') +
e^(s_j - m') V_j, out = acc / l. ``attention`` is the plain softmax(q K^T) V it must equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pagesim.errors import InvariantError


def gather_kv(cache: np.ndarray, block_table: Sequence[int], context_len: int) -> np.ndarray:
    """The [context_len, num_kv_heads, head_dim] tokens of one sequence, in logical order."""
    num_blocks = -(-context_len // cache.shape[2])
    blocks = cache[np.asarray(block_table[:num_blocks])]  # [nb, kvh, bs, d]
    tokens = blocks.transpose(0, 2, 1, 3).reshape(-1, cache.shape[1], cache.shape[3])
    return tokens[:context_len]


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """One query per head over k, v [context, num_kv_heads, head_dim]; q [num_heads, head_dim]."""
    group = q.shape[0] // k.shape[1]
    kh = np.repeat(k, group, axis=1)  # [ctx, heads, d]
    vh = np.repeat(v, group, axis=1)
    logits = np.einsum("hd,thd->ht", q, kh) * scale
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return np.einsum("ht,thd->hd", weights, vh)


def _online_softmax(q, k, v, scale, tile: int):
    """(m, l, acc) of the online softmax over k, v [ctx, kvh, d], tile tokens at a time."""
    group = q.shape[0] // k.shape[1]
    m = np.full(q.shape[0], -np.inf)
    total = np.zeros(q.shape[0])
    acc = np.zeros(q.shape, dtype=np.float64)
    for start in range(0, k.shape[0], tile):
        kt = np.repeat(k[start : start + tile], group, axis=1)
        vt = np.repeat(v[start : start + tile], group, axis=1)
        s = np.einsum("hd,thd->ht", q, kt) * scale
        m_new = np.maximum(m, s.max(axis=1))
        rescale = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        total = total * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + np.einsum("ht,thd->hd", p, vt)
        m = m_new
    return m, total, acc


def paged_attention(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    block_tables: Sequence[Sequence[int]],
    context_lens: Sequence[int],
    scale: float,
    partition_size: int | None = None,
) -> np.ndarray:
    """Decode attention over a paged cache, block by block with the online softmax.

    With ``partition_size`` it mirrors the partitioned (v2) kernel: each partition's
    (m, l, acc) is computed separately and combined with the log-sum-exp rescaling.
    """
    block_size = k_cache.shape[2]
    out = np.zeros(q.shape, dtype=np.float64)
    for i, c in enumerate(context_lens):
        if c < 1:
            raise InvariantError(f"context length must be >= 1, got {c} for sequence {i}")
        k = gather_kv(k_cache, block_tables[i], c).astype(np.float64)
        v = gather_kv(v_cache, block_tables[i], c).astype(np.float64)
        qi = q[i].astype(np.float64)
        part = partition_size or c
        parts = [
            _online_softmax(qi, k[s : s + part], v[s : s + part], scale, block_size)
            for s in range(0, c, part)
        ]
        big_m = np.max([p[0] for p in parts], axis=0)
        big_l = sum(np.exp(p[0] - big_m) * p[1] for p in parts)
        acc = sum(np.exp(p[0] - big_m)[:, None] * p[2] for p in parts)
        out[i] = acc / big_l[:, None]
    return out


def contiguous_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, context_lens: Sequence[int], scale: float
) -> np.ndarray:
    """Decode attention over k, v [num_seqs, max_context, num_kv_heads, head_dim]."""
    return np.stack(
        [
            attention(
                q[i].astype(np.float64),
                k[i, :c].astype(np.float64),
                v[i, :c].astype(np.float64),
                scale,
            )
            for i, c in enumerate(context_lens)
        ]
    )


def prefill_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Causal attention of q [new, heads, d] over k, v [context, kv_heads, d].

    The new tokens are the last ``new`` of the context: query i sees keys
    0 .. context - new + i (the cached prefix and the new tokens up to itself).
    """
    new, ctx = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    kh = np.repeat(k.astype(np.float64), group, axis=1)
    vh = np.repeat(v.astype(np.float64), group, axis=1)
    logits = np.einsum("qhd,thd->hqt", q.astype(np.float64), kh) * scale
    visible = np.arange(ctx)[None, :] <= (ctx - new + np.arange(new))[:, None]
    logits = np.where(visible[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    return np.einsum("hqt,thd->qhd", weights, vh)


def kv_write(
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    slot_mapping: Sequence[int],
) -> tuple[np.ndarray, np.ndarray]:
    """reshape_and_cache: token t's key/value [kv_heads, d] go to slot_mapping[t]; new arrays."""
    k_out, v_out = k_cache.copy(), v_cache.copy()
    block_size = k_cache.shape[2]
    for t, slot in enumerate(slot_mapping):
        block, offset = divmod(int(slot), block_size)
        k_out[block, :, offset] = key[t]
        v_out[block, :, offset] = value[t]
    return k_out, v_out


def block_copy(
    k_cache: np.ndarray, v_cache: np.ndarray, pairs: Sequence[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Copy whole blocks src -> dst (both caches); new arrays.

    The kernel copies all pairs in parallel, so a destination may not be a source or
    appear twice (copy-on-write never produces that).
    """
    srcs = [s for s, _ in pairs]
    dsts = [d for _, d in pairs]
    if len(set(dsts)) != len(dsts) or set(srcs) & set(dsts):
        raise InvariantError(
            f"block copy pairs overlap (a dst twice or a dst that is a src): {pairs}"
        )
    k_out, v_out = k_cache.copy(), v_cache.copy()
    for s, d in pairs:
        k_out[d] = k_cache[s]
        v_out[d] = v_cache[s]
    return k_out, v_out


def paged_inputs(rng, lens, nh, nkv, hd, bs, shared, *, spare_blocks=2, spare_columns=0):
    """Inputs of a paged-attention check: blocks scattered over a pool larger than needed
    (``spare_blocks`` unused), a block table with ``spare_columns`` unused columns;
    ``shared``: every sequence's first block is the same physical block (a shared prefix).
    Returns q, k cache, v cache (fp16) and the int32 table."""
    per_seq = [-(-c // bs) for c in lens]
    num_blocks = sum(per_seq) + spare_blocks
    physical = rng.permutation(num_blocks)
    table = np.zeros((len(lens), max(per_seq) + spare_columns), dtype=np.int32)
    off = 0
    for i, nb in enumerate(per_seq):
        table[i, :nb] = physical[off : off + nb]
        off += nb
    if shared:
        table[:, 0] = table[0, 0]
    kc = rng.standard_normal((num_blocks, nkv, bs, hd)).astype(np.float16)
    vc = rng.standard_normal((num_blocks, nkv, bs, hd)).astype(np.float16)
    q = rng.standard_normal((len(lens), nh, hd)).astype(np.float16)
    return q, kc, vc, table
