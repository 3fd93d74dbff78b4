"""The numpy references agree: block-by-block online softmax == plain softmax attention."""

import numpy as np
import pytest

from pagesim.calibrate import reference as ref
from pagesim.errors import InvariantError


def _paged_setup(
    rng, context_lens, num_heads, num_kv_heads, head_dim, block_size, shared_first=False
):
    blocks_per_seq = [-(-c // block_size) for c in context_lens]
    num_blocks = sum(blocks_per_seq) + 3
    k_cache = rng.standard_normal((num_blocks, num_kv_heads, block_size, head_dim))
    v_cache = rng.standard_normal((num_blocks, num_kv_heads, block_size, head_dim))
    physical = rng.permutation(num_blocks)  # scattered blocks
    tables, offset = [], 0
    for nb in blocks_per_seq:
        tables.append(list(physical[offset : offset + nb]))
        offset += nb
    if shared_first:  # every sequence starts with the first sequence's first block
        for t in tables:
            t[0] = tables[0][0]
    q = rng.standard_normal((len(context_lens), num_heads, head_dim))
    return q, k_cache, v_cache, tables


def _plain(q, k_cache, v_cache, tables, context_lens, scale):
    return np.stack(
        [
            ref.attention(
                q[i],
                ref.gather_kv(k_cache, tables[i], c),
                ref.gather_kv(v_cache, tables[i], c),
                scale,
            )
            for i, c in enumerate(context_lens)
        ]
    )


@pytest.mark.parametrize(
    ("context_lens", "num_heads", "num_kv_heads", "head_dim", "block_size", "shared"),
    [
        ([1], 4, 4, 64, 16, False),  # context 1
        ([17, 33, 5], 4, 4, 80, 16, False),  # partial last blocks
        ([40, 40, 7], 8, 2, 96, 8, True),  # GQA and a shared first block
        ([300], 2, 1, 128, 1, False),  # block size 1
        ([600, 1], 2, 2, 64, 256, False),  # block size 256
    ],
)
def test_paged_online_softmax_equals_plain_attention(
    context_lens, num_heads, num_kv_heads, head_dim, block_size, shared
):
    rng = np.random.default_rng(7)
    q, kc, vc, tables = _paged_setup(
        rng, context_lens, num_heads, num_kv_heads, head_dim, block_size, shared
    )
    scale = 1 / np.sqrt(head_dim)
    want = _plain(q, kc, vc, tables, context_lens, scale)
    got = ref.paged_attention(q, kc, vc, tables, context_lens, scale)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    parted = ref.paged_attention(q, kc, vc, tables, context_lens, scale, partition_size=32)
    np.testing.assert_allclose(parted, want, rtol=1e-9, atol=1e-12)


def test_float32_inputs_agree_to_1e5():
    rng = np.random.default_rng(3)
    q, kc, vc, tables = _paged_setup(rng, [100, 3, 64], 4, 4, 64, 16)
    q, kc, vc = (a.astype(np.float32) for a in (q, kc, vc))
    got = ref.paged_attention(q, kc, vc, tables, [100, 3, 64], 0.125)
    want = _plain(
        q.astype(np.float64),
        kc.astype(np.float64),
        vc.astype(np.float64),
        tables,
        [100, 3, 64],
        0.125,
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gathered_tokens_follow_the_block_table():
    cache = np.arange(4 * 1 * 2 * 1).reshape(4, 1, 2, 1)  # block b holds tokens 2b, 2b+1
    np.testing.assert_array_equal(ref.gather_kv(cache, [3, 0], 3)[:, 0, 0], [6, 7, 0])


def test_contiguous_attention_matches_paged_on_same_tokens():
    rng = np.random.default_rng(1)
    lens = [5, 12]
    q, kc, vc, tables = _paged_setup(rng, lens, 4, 2, 64, 4)
    k = np.zeros((2, 12, 2, 64))
    v = np.zeros((2, 12, 2, 64))
    for i, c in enumerate(lens):
        k[i, :c] = ref.gather_kv(kc, tables[i], c)
        v[i, :c] = ref.gather_kv(vc, tables[i], c)
    np.testing.assert_allclose(
        ref.contiguous_attention(q, k, v, lens, 0.1),
        ref.paged_attention(q, kc, vc, tables, lens, 0.1),
        rtol=1e-10,
    )


def test_prefill_last_query_equals_decode_and_first_sees_only_itself():
    rng = np.random.default_rng(2)
    ctx, new, heads, kvh, d = 10, 4, 4, 2, 64
    q = rng.standard_normal((new, heads, d))
    k = rng.standard_normal((ctx, kvh, d))
    v = rng.standard_normal((ctx, kvh, d))
    out = ref.prefill_attention(q, k, v, 0.2)
    np.testing.assert_allclose(out[-1], ref.attention(q[-1], k, v, 0.2), rtol=1e-10)
    np.testing.assert_allclose(
        out[0], ref.attention(q[0], k[: ctx - new + 1], v[: ctx - new + 1], 0.2), rtol=1e-10
    )
    np.testing.assert_allclose(
        ref.prefill_attention(q[:1], k[:1], v[:1], 0.2)[0], np.repeat(v[0], 2, axis=0)
    )


def test_kv_write_scatters_each_token_to_its_slot():
    kc = np.zeros((3, 2, 4, 8))
    vc = np.zeros((3, 2, 4, 8))
    key = np.arange(2 * 2 * 8, dtype=float).reshape(2, 2, 8) + 1
    k2, v2 = ref.kv_write(kc, vc, key, -key, [9, 2])  # block 2 offset 1; block 0 offset 2
    np.testing.assert_array_equal(k2[2, :, 1], key[0])
    np.testing.assert_array_equal(v2[0, :, 2], -key[1])
    assert np.count_nonzero(k2) == key.size
    assert not kc.any()  # inputs untouched


def test_block_copy_copies_and_rejects_overlaps():
    rng = np.random.default_rng(0)
    kc = rng.standard_normal((4, 1, 2, 8))
    vc = rng.standard_normal((4, 1, 2, 8))
    k2, v2 = ref.block_copy(kc, vc, [(0, 3), (1, 2)])
    np.testing.assert_array_equal(k2[3], kc[0])
    np.testing.assert_array_equal(v2[2], vc[1])
    np.testing.assert_array_equal(k2[:2], kc[:2])
    with pytest.raises(InvariantError):
        ref.block_copy(kc, vc, [(0, 1), (1, 2)])


def test_context_zero_is_rejected():
    with pytest.raises(InvariantError):
        ref.paged_attention(
            np.zeros((1, 1, 8)), np.zeros((1, 1, 4, 8)), np.zeros((1, 1, 4, 8)), [[0]], [0], 1.0
        )
