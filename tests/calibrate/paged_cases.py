"""Inputs of the paged-attention kernel tests, shared by the GPU and the CPU (host shim) tests."""

from __future__ import annotations

import numpy as np


def paged_inputs(rng, lens, nh, nkv, hd, bs, shared, *, spare_blocks=2, spare_columns=0):
    """Blocks scattered over a pool larger than needed (``spare_blocks`` unused), a block
    table with ``spare_columns`` unused columns; ``shared``: every sequence's first block
    is the same physical block (a shared prefix). Returns q, k cache, v cache, table."""
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
