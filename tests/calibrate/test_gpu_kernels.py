"""Every CUDA kernel against its numpy reference, within fp16 tolerance (needs a GPU).

Run with ``pytest -m gpu tests/calibrate`` on a machine with CuPy and an NVIDIA GPU;
elsewhere these tests skip, saying what is missing.
"""

import numpy as np
import pytest

from pagesim.calibrate import reference as ref
from pagesim.calibrate.reference import paged_inputs

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    try:
        from pagesim.calibrate.cupy_backend import import_cupy
        from pagesim.errors import PagesimError

        cp = import_cupy()
    except PagesimError as exc:
        pytest.skip(f"no GPU: {exc}")
    from pagesim.calibrate.cupy_ops import Kernels

    return cp, Kernels(cp)


def _half(cp, a):
    return cp.asarray(a.astype(np.float16))


CASES = [
    ([1], 4, 4, 64, 16, False),
    ([17, 33, 5], 8, 8, 80, 16, False),
    ([40, 40, 7], 8, 2, 96, 8, True),
    ([300, 1], 4, 1, 128, 1, False),
    ([1500, 700], 4, 4, 128, 256, False),
    ([5000, 1200, 3], 8, 4, 128, 16, True),
]


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize(("lens", "nh", "nkv", "hd", "bs", "shared"), CASES)
def test_paged_attention_matches_reference(gpu, lens, nh, nkv, hd, bs, shared, partitioned):
    cp, k = gpu
    rng = np.random.default_rng(len(lens) * 100 + hd + bs)
    q, kc, vc, table = paged_inputs(rng, lens, nh, nkv, hd, bs, shared)
    out = cp.empty(q.shape, dtype=cp.float16)
    k.paged_attention(
        out,
        cp.asarray(q),
        cp.asarray(kc),
        cp.asarray(vc),
        cp.asarray(table),
        cp.asarray(np.asarray(lens, dtype=np.int32)),
        max(lens),
        partitioned=partitioned,
    )
    want = ref.paged_attention(q, kc, vc, table.tolist(), lens, 1 / np.sqrt(hd))
    np.testing.assert_allclose(cp.asnumpy(out).astype(np.float64), want, atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize(
    ("lens", "nh", "nkv", "hd"), [([1, 9], 4, 4, 64), ([130, 64, 3], 8, 2, 80), ([2049], 4, 4, 128)]
)
def test_contiguous_attention_matches_reference(gpu, lens, nh, nkv, hd):
    cp, k = gpu
    rng = np.random.default_rng(5)
    kk = rng.standard_normal((len(lens), max(lens), nkv, hd)).astype(np.float16)
    vv = rng.standard_normal((len(lens), max(lens), nkv, hd)).astype(np.float16)
    q = rng.standard_normal((len(lens), nh, hd)).astype(np.float16)
    out = cp.empty(q.shape, dtype=cp.float16)
    k.contiguous_attention(
        out,
        cp.asarray(q),
        cp.asarray(kk),
        cp.asarray(vv),
        cp.asarray(np.asarray(lens, dtype=np.int32)),
    )
    want = ref.contiguous_attention(q, kk, vv, lens, 1 / np.sqrt(hd))
    np.testing.assert_allclose(cp.asnumpy(out).astype(np.float64), want, atol=2e-3, rtol=2e-2)


def test_kv_write_and_block_copy_match_reference(gpu):
    cp, k = gpu
    rng = np.random.default_rng(8)
    kc = rng.standard_normal((6, 2, 16, 128)).astype(np.float16)
    vc = rng.standard_normal((6, 2, 16, 128)).astype(np.float16)
    key = rng.standard_normal((5, 2, 128)).astype(np.float16)
    value = rng.standard_normal((5, 2, 128)).astype(np.float16)
    slots = np.array([0, 17, 95, 40, 3], dtype=np.int64)
    kd, vd = cp.asarray(kc), cp.asarray(vc)
    k.kv_write(kd, vd, cp.asarray(key), cp.asarray(value), cp.asarray(slots))
    wk, wv = ref.kv_write(kc, vc, key, value, slots)
    np.testing.assert_array_equal(cp.asnumpy(kd), wk)
    np.testing.assert_array_equal(cp.asnumpy(vd), wv)
    pairs = np.array([[0, 4], [2, 5]], dtype=np.int64)
    k.block_copy(kd, vd, cp.asarray(pairs))
    wk, wv = ref.block_copy(wk, wv, [tuple(p) for p in pairs])
    np.testing.assert_array_equal(cp.asnumpy(kd), wk)
    np.testing.assert_array_equal(cp.asnumpy(vd), wv)


@pytest.mark.parametrize(("nh", "nkv", "t"), [(4, 4, 1), (8, 2, 37), (4, 4, 256)])
def test_prefill_matches_reference(gpu, nh, nkv, t):
    cp, k = gpu
    rng = np.random.default_rng(t)
    q = rng.standard_normal((2, nh, t, 64)).astype(np.float16)
    kk = rng.standard_normal((2, nkv, t, 64)).astype(np.float16)
    vv = rng.standard_normal((2, nkv, t, 64)).astype(np.float16)
    got = cp.asnumpy(k.prefill_attention(cp.asarray(q), cp.asarray(kk), cp.asarray(vv))).astype(
        np.float64
    )
    for b in range(2):
        want = ref.prefill_attention(
            q[b].transpose(1, 0, 2), kk[b].transpose(1, 0, 2), vv[b].transpose(1, 0, 2), 1 / 8
        )
        np.testing.assert_allclose(got[b].transpose(1, 0, 2), want, atol=3e-3, rtol=2e-2)


def test_cupy_backend_times_every_term(gpu):
    from pagesim.calibrate.cupy_backend import CupyBackend
    from pagesim.calibrate.grid import QUICK_GRID, plan_grid
    from pagesim.calibrate.models import ModelDims
    from pagesim.calibrate.timing import TimingPolicy

    backend = CupyBackend(np.random.default_rng(0))
    dims = ModelDims("tiny", 512, 2048, 8, 8, 64)
    cases = plan_grid(dims, QUICK_GRID, np.random.default_rng(0))
    policy = TimingPolicy(1, 2, 3, 0.5)
    seen = {}
    for case in cases:
        if case.term not in seen:
            seen[case.term] = backend.time_case(case, policy)
    assert all(s.median_s > 0 for s in seen.values())
    assert backend.copy_bandwidth_bytes_per_s(policy) > 1e11
    assert backend.device_info().name
