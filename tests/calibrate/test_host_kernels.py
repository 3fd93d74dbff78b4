"""Every CUDA kernel, compiled unmodified for the CPU by g++ against the host shim, against
its numpy reference; a broken copy of a kernel must fail the same check. The same checks run
under ThreadSanitizer (which must report a race once a ``__syncthreads`` is removed) and
under AddressSanitizer + UBSan (which must report a kernel reading past a buffer).

The launches are those of ``cupy_ops.Kernels`` (the GPU path), run by ``HostLauncher``.
"""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from pagesim.calibrate import reference as ref
from pagesim.calibrate.cupy_ops import Kernels
from pagesim.calibrate.host_kernels import (
    HostKernelError,
    HostLauncher,
    build_harness,
    find_cxx,
)
from pagesim.calibrate.reference import paged_inputs
from pagesim.calibrate.sources import KERNEL_DIR, SOURCE_TO_KERNELS

CXX = find_cxx()
pytestmark = pytest.mark.skipif(CXX is None, reason="g++ (12 or newer) is not installed")

SOURCES = sorted(SOURCE_TO_KERNELS)
ATOL, RTOL = 2e-3, 2e-2  # fp16 output, fp32 accumulation (as the GPU tests)


def _sanitizer_works(flag: str, tmp: Path) -> bool:
    src = tmp / "probe.cpp"
    src.write_text("int main() { return 0; }\n")
    exe = tmp / f"probe{flag}"
    proc = subprocess.run(
        [CXX, f"-fsanitize={flag}", "-o", str(exe), str(src)], capture_output=True
    )
    return proc.returncode == 0 and subprocess.run([str(exe)]).returncode == 0


@pytest.fixture(scope="session")
def sanitizers(tmp_path_factory):
    """The sanitizers g++ can build and run here."""
    tmp = tmp_path_factory.mktemp("sanitizers")
    return {name for name in ("thread", "address") if CXX and _sanitizer_works(name, tmp)}


def _require(sanitizer, sanitizers):
    if sanitizer is not None and sanitizer not in sanitizers:
        pytest.skip(f"g++ cannot build and run a -fsanitize={sanitizer} program here")


def _kernels(build_dir, tmp_path, sanitizer=None, seed=0, sources=None, files=SOURCES):
    """Kernels on the host shim, built from ``files`` (``sources``: edited copies by name)."""
    sources = sources or {}
    harnesses = {
        f: build_harness(f, build_dir, source_path=sources.get(f), sanitizer=sanitizer)
        for f in files
    }
    return Kernels(np, HostLauncher(harnesses, tmp_path / "launches", seed=seed))


@pytest.fixture(params=[None, "thread", "address"], ids=["plain", "tsan", "asan"])
def kernels(request, build_dir, tmp_path, sanitizers):
    _require(request.param, sanitizers)
    return _kernels(build_dir, tmp_path, sanitizer=request.param)


# (context lengths, heads, kv heads, head dim, block size, shared first block)
PAGED_CASES = [
    ([1], 4, 4, 64, 16, False),  # context 1
    ([17, 33, 5], 8, 8, 80, 16, False),  # partial last blocks
    ([40, 40, 7], 8, 2, 96, 8, True),  # GQA, a shared block
    ([150, 1], 4, 1, 128, 1, False),  # block size 1, multi-query, tiles of 64 blocks
    ([700, 130], 2, 2, 128, 256, False),  # one block per tile, two v2 partitions
    ([1100, 520, 3], 2, 1, 64, 16, True),  # three v2 partitions (one empty for short seqs)
]


def check_paged(kernels, lens, nh, nkv, hd, bs, shared, partitioned):
    rng = np.random.default_rng(len(lens) * 100 + hd + bs)
    q, kc, vc, table = paged_inputs(
        rng, lens, nh, nkv, hd, bs, shared, spare_blocks=3, spare_columns=1
    )
    out = np.full(q.shape, np.nan, dtype=np.float16)
    kernels.paged_attention(
        out, q, kc, vc, table, np.asarray(lens, dtype=np.int32), max(lens), partitioned
    )
    want = ref.paged_attention(q, kc, vc, table.tolist(), lens, 1 / np.sqrt(hd))
    np.testing.assert_allclose(out.astype(np.float64), want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("partitioned", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize(("lens", "nh", "nkv", "hd", "bs", "shared"), PAGED_CASES)
def test_paged_attention_matches_reference(kernels, lens, nh, nkv, hd, bs, shared, partitioned):
    check_paged(kernels, lens, nh, nkv, hd, bs, shared, partitioned)


def test_paged_attention_is_schedule_independent(build_dir, tmp_path):
    """Threads resumed in a seeded random order at every barrier give the same result."""
    for seed in (1, 2):
        check_paged(_kernels(build_dir, tmp_path / str(seed), seed=seed), *PAGED_CASES[2], True)


@pytest.mark.parametrize(
    ("lens", "nh", "nkv", "hd"),
    [([1, 9], 4, 4, 64), ([130, 64, 3], 8, 2, 80), ([70], 2, 1, 96), ([200, 1], 2, 2, 128)],
)
def test_contiguous_attention_matches_reference(kernels, lens, nh, nkv, hd):
    rng = np.random.default_rng(hd)
    kk = rng.standard_normal((len(lens), max(lens) + 2, nkv, hd)).astype(np.float16)
    vv = rng.standard_normal((len(lens), max(lens) + 2, nkv, hd)).astype(np.float16)
    q = rng.standard_normal((len(lens), nh, hd)).astype(np.float16)
    out = np.full(q.shape, np.nan, dtype=np.float16)
    kernels.contiguous_attention(out, q, kk, vv, np.asarray(lens, dtype=np.int32))
    want = ref.contiguous_attention(q, kk, vv, lens, 1 / np.sqrt(hd))
    np.testing.assert_allclose(out.astype(np.float64), want, atol=ATOL, rtol=RTOL)


def check_kv_write_and_copy(kernels, num_kv_heads, block_size, head_dim, slots, pairs):
    rng = np.random.default_rng(block_size * head_dim)
    shape = (7, num_kv_heads, block_size, head_dim)
    kc = rng.standard_normal(shape).astype(np.float16)
    vc = rng.standard_normal(shape).astype(np.float16)
    key = rng.standard_normal((len(slots), num_kv_heads, head_dim)).astype(np.float16)
    value = rng.standard_normal((len(slots), num_kv_heads, head_dim)).astype(np.float16)
    k0, v0 = kc.copy(), vc.copy()
    kernels.kv_write(kc, vc, key, value, np.asarray(slots, dtype=np.int64))
    want_k, want_v = ref.kv_write(k0, v0, key, value, slots)
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)
    kernels.block_copy(kc, vc, np.asarray(pairs, dtype=np.int64))
    want_k, want_v = ref.block_copy(want_k, want_v, pairs)
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)


def check_prefill(kernels, num_heads=8, num_kv_heads=2, t=37, head_dim=64):
    """The prefill path (numpy GEMMs around prefill.cu's causal softmax) against the
    reference, per sequence and head."""
    rng = np.random.default_rng(t)
    q = rng.standard_normal((2, num_heads, t, head_dim)).astype(np.float16)
    k = rng.standard_normal((2, num_kv_heads, t, head_dim)).astype(np.float16)
    v = rng.standard_normal((2, num_kv_heads, t, head_dim)).astype(np.float16)
    out = kernels.prefill_attention(q, k, v)
    want = np.stack(
        [
            ref.prefill_attention(
                q[i].transpose(1, 0, 2), k[i].transpose(1, 0, 2), v[i].transpose(1, 0, 2),
                1 / np.sqrt(head_dim),
            ).transpose(1, 0, 2)
            for i in range(2)
        ]
    )  # fmt: skip
    np.testing.assert_allclose(out.astype(np.float64), want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(("nh", "nkv", "t", "hd"), [(8, 2, 37, 64), (4, 4, 1, 128), (2, 1, 70, 80)])
def test_prefill_matches_reference(kernels, nh, nkv, t, hd):
    check_prefill(kernels, nh, nkv, t, hd)


KV_CASES = [
    (2, 16, 128, [0, 17, 95, 40, 3, 111], [(0, 4), (2, 5)]),  # 16-byte vector copies
    (8, 4, 128, [5, 27, 0], [(6, 1)]),  # 1024 values per token: threads stride (512 threads)
    (1, 3, 3, [20, 2, 0, 9], [(1, 3), (5, 0), (2, 6)]),  # 9 halves per block: scalar copy path
]


@pytest.mark.parametrize(("kvh", "bs", "hd", "slots", "pairs"), KV_CASES)
def test_kv_write_and_block_copy_match_reference(kernels, kvh, bs, hd, slots, pairs):
    check_kv_write_and_copy(kernels, kvh, bs, hd, slots, pairs)


def _edited_copy(file_name: str, old: str, new: str, out_dir: Path) -> Path:
    """A copy of a kernel source with exactly one occurrence of ``old`` replaced."""
    text = (KERNEL_DIR / file_name).read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {file_name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name
    path.write_text(text.replace(old, new))
    return path


# (file, original text, broken text, a check that must catch it)
MUTANTS = {
    "block_table_off_by_one": (
        "paged_attention.cu",
        "block_table[token / block_size]",
        "block_table[(token - 1) / block_size]",  # in bounds: token 0 still maps to block 0
        lambda k: check_paged(k, *PAGED_CASES[1], False),
    ),
    "no_online_softmax_rescale": (
        "paged_attention.cu",
        "const float rescale = __expf(m - m_new);",
        "const float rescale = 1.f;",
        lambda k: check_paged(k, *PAGED_CASES[5], True),
    ),
    "prefill_mask_one_key_late": (
        "prefill.cu",
        "const int last = (int)(row % t);",
        "const int last = (int)(row % t) + (t > 1);",  # sees the next key
        check_prefill,
    ),
    "kv_slot_offset_off_by_one": (
        "kv_cache.cu",
        "const int offset = (int)(slot % block_size);",
        "const int offset = (int)((slot + 1) % block_size);",
        lambda k: check_kv_write_and_copy(k, *KV_CASES[0]),
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_broken_kernel_fails_the_check(mutant, build_dir, tmp_path):
    file_name, old, new, check = MUTANTS[mutant]
    check(_kernels(build_dir, tmp_path / "good", files=[file_name]))  # the intact source passes
    broken = _edited_copy(file_name, old, new, tmp_path / "src")
    bad = _kernels(build_dir, tmp_path / "bad", sources={file_name: broken}, files=[file_name])
    with pytest.raises(AssertionError, match="Not equal|Mismatched elements"):
        check(bad)


SYNCS = {
    # phase 1 writes red[warp], every thread then reads all of red
    "after_tile_logits": "    if (lane == 0) red[warp] = local_max;\n    __syncthreads();\n",
    # the next tile overwrites logits and red while slower threads still read them
    "end_of_tile": "    __syncthreads();  // logits and red are reused by the next tile\n",
}


@pytest.mark.parametrize("sync", sorted(SYNCS))
def test_tsan_reports_a_missing_syncthreads(sync, build_dir, tmp_path, sanitizers):
    _require("thread", sanitizers)
    case = ([100, 3], 4, 4, 64, 16, False)  # two tiles for the first sequence
    paged = ["paged_attention.cu"]
    check_paged(
        _kernels(build_dir, tmp_path / "good", sanitizer="thread", files=paged), *case, False
    )
    removed = SYNCS[sync].replace("    __syncthreads();", "", 1)
    broken = _edited_copy("paged_attention.cu", SYNCS[sync], removed, tmp_path / "src")
    kernels = _kernels(
        build_dir, tmp_path / "bad", "thread", sources={"paged_attention.cu": broken}, files=paged
    )
    with pytest.raises(HostKernelError, match="ThreadSanitizer: data race") as err:
        check_paged(kernels, *case, False)
    assert "paged_attention_v1_hd64" in str(err.value)


def test_launch_errors_are_one_line(build_dir, tmp_path):
    kernels = _kernels(build_dir, tmp_path)
    q = np.zeros((1, 2, 64), dtype=np.float16)
    with pytest.raises(HostKernelError, match="48 KiB") as err:
        kernels.launch(
            "paged_attention.cu",
            "paged_attention_v1_hd64",
            (2, 1),
            (128,),
            (q, q, q, q, np.zeros((1, 1), np.int32), np.ones(1, np.int32))
            + (np.int32(1), np.int32(2), np.int32(16), np.int32(16), np.float32(0.125)),
            64 * 1024,
        )
    assert "\n" not in str(err.value)
    with pytest.raises(HostKernelError, match="argument 6 is int32, got int64"):
        kernels.launch(
            "paged_attention.cu",
            "paged_attention_v1_hd64",
            (2, 1),
            (128,),
            (q, q, q, q, np.zeros((1, 1), np.int32), np.ones(1, np.int32))
            + (np.int64(1), np.int32(2), np.int32(16), np.int32(16), np.float32(0.125)),
            64,
        )


def test_a_shuffle_in_divergent_code_is_reported_as_a_deadlock(build_dir, tmp_path):
    """Half a warp in __shfl_xor_sync while the other half waits at __syncthreads hangs a GPU;
    the shim stops with a one-line error instead."""
    broken = _edited_copy(
        "paged_attention.cu",
        "local_max = warp_max(local_max);",
        "if (lane < 16) local_max = warp_max(local_max);",
        tmp_path / "src",
    )
    kernels = _kernels(
        build_dir, tmp_path, sources={"paged_attention.cu": broken}, files=["paged_attention.cu"]
    )
    with pytest.raises(HostKernelError, match="deadlock"):
        check_paged(kernels, *PAGED_CASES[0], False)


def test_too_little_dynamic_shared_memory_is_reported(build_dir, tmp_path):
    """A launch with one float less than the tile's logits: the kernel writes past it."""
    kernels = _kernels(build_dir, tmp_path, files=["paged_attention.cu"])
    rng = np.random.default_rng(0)
    q, kc, vc, table = paged_inputs(rng, [80], 2, 2, 64, 16, False, spare_blocks=3, spare_columns=1)
    tile = 64
    args = (np.empty_like(q), q, kc, vc, table, np.array([80], np.int32))
    scalars = (np.int32(table.shape[1]), np.int32(2), np.int32(16), np.int32(tile))
    launch = ("paged_attention.cu", "paged_attention_v1_hd64", (2, 1), (128,))
    kernels.launch(*launch, args + scalars + (np.float32(0.125),), 4 * tile)
    with pytest.raises(HostKernelError, match="wrote past the dynamic shared memory"):
        kernels.launch(*launch, args + scalars + (np.float32(0.125),), 4 * tile - 4)


def test_asan_reports_a_kernel_reading_past_a_buffer(build_dir, tmp_path, sanitizers):
    """copy_blocks copying one 16-byte vector too many: from the last block it reads past the
    end of the cache, which AddressSanitizer reports."""
    _require("address", sanitizers)
    broken = _edited_copy(
        "kv_cache.cu", "i < elems_per_block / 8;", "i <= elems_per_block / 8;", tmp_path / "src"
    )
    kernels = _kernels(
        build_dir, tmp_path, "address", sources={"kv_cache.cu": broken}, files=["kv_cache.cu"]
    )
    with pytest.raises(HostKernelError, match="AddressSanitizer: heap-buffer-overflow"):
        check_kv_write_and_copy(kernels, *KV_CASES[1])
