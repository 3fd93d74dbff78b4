"""Time the calibration kernels on the current GPU with CuPy and CUDA events.

Inputs are random fp16 (the values do not change the time); block tables are a random
permutation of the physical blocks, so sequences' blocks are scattered as in a long-
running server. Before every timed run an L2 flush writes a buffer of twice the L2 size
(``timing`` explains why). Swap is timed GPU -> pinned host, one cudaMemcpyAsync per block
and per K/V (vLLM v0's ``swap_blocks``); the Python loop issuing the copies is included,
so its per-block cost is an upper bound of vLLM's C++ loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pagesim.calibrate.backend import DeviceInfo
from pagesim.calibrate.cupy_ops import Kernels
from pagesim.calibrate.grid import Case
from pagesim.calibrate.timing import TimingPolicy, TimingStats, measure
from pagesim.errors import PagesimError

INSTALL_HINT = "install CuPy with `pip install 'pagesim[gpu]'` (or any CuPy wheel for your CUDA, e.g. cupy-cuda12x)"
COPY_BANDWIDTH_BYTES = 1 << 30
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3


class GpuUnavailableError(PagesimError, RuntimeError):
    """Calibration needs CuPy and a CUDA device and one of them is missing."""


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailableError(
            f"calibration needs CuPy, which is not installed ({exc}); {INSTALL_HINT}"
        ) from None
    try:
        num_devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        raise GpuUnavailableError(
            f"calibration needs a CUDA GPU and CuPy found none ({exc}); run it on a machine with an NVIDIA GPU and driver"
        ) from None
    if num_devices == 0:
        raise GpuUnavailableError(
            "calibration needs a CUDA GPU and CuPy found none; run it on a machine with an NVIDIA GPU"
        )
    return cupy


def _random_half(cp, shape, rng: np.random.Generator):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.5).astype(cp.float16)


class CupyBackend:
    def __init__(self, rng: np.random.Generator) -> None:
        self.cp = import_cupy()
        self.rng = rng
        self.kernels = Kernels(self.cp)
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        self.props = props
        l2_bytes = int(props.get("l2CacheSize", 0)) or (64 << 20)
        self.flush_buffer = self.cp.empty(2 * l2_bytes, dtype=self.cp.uint8)

    def device_info(self) -> DeviceInfo:
        cp, p = self.cp, self.props
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        khz = lambda key: float(p[key]) / 1e3 if p.get(key) else None  # noqa: E731
        return DeviceInfo(
            name=name,
            sm_clock_mhz=khz("clockRate"),
            memory_clock_mhz=khz("memoryClockRate"),
            l2_bytes=int(p.get("l2CacheSize", 0)) or None,
            memory_bytes=int(p.get("totalGlobalMem", 0)) or None,
            software={
                "cupy": cp.__version__,
                "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()),
                "driver": str(cp.cuda.runtime.driverGetVersion()),
            },
        )

    # ---- timing --------------------------------------------------------------------------

    def _flush_l2(self) -> None:
        self.flush_buffer.fill(0)

    def _time(
        self, launch: Callable[[], None], policy: TimingPolicy, flush: bool = True
    ) -> TimingStats:
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def run_once() -> float:
            start.record()
            launch()
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1e3

        stats = measure(run_once, policy, self._flush_l2 if flush else None)
        cp.get_default_memory_pool().free_all_blocks()
        return stats

    def copy_bandwidth_bytes_per_s(self, policy: TimingPolicy) -> float:
        cp = self.cp
        src = cp.zeros(COPY_BANDWIDTH_BYTES, dtype=cp.uint8)
        dst = cp.empty_like(src)
        stream = cp.cuda.get_current_stream().ptr
        launch = lambda: cp.cuda.runtime.memcpyAsync(  # noqa: E731
            dst.data.ptr, src.data.ptr, src.nbytes, MEMCPY_DEVICE_TO_DEVICE, stream
        )
        stats = self._time(launch, policy, flush=False)
        return 2.0 * src.nbytes / stats.median_s

    def time_case(self, case: Case, policy: TimingPolicy) -> TimingStats:
        setup = {
            "paged_decode_attention": self._paged,
            "contiguous_decode_attention": self._contiguous,
            "prefill_attention": self._prefill,
            "gemm": self._gemm,
            "kv_write": self._kv_write,
            "block_copy": self._block_copy,
            "swap": self._swap,
        }[case.term]
        return self._time(setup(case.params), policy)

    # ---- one launch closure per term -------------------------------------------------------

    def _paged(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        lens = p["context_lens"]
        bs, nkv, hd = p["block_size"], p["num_kv_heads"], p["head_dim"]
        blocks_per_seq = [-(-c // bs) for c in lens]
        num_blocks = sum(blocks_per_seq)
        physical = rng.permutation(num_blocks).astype(np.int32)
        table = np.zeros((len(lens), max(blocks_per_seq)), dtype=np.int32)
        offset = 0
        for i, nb in enumerate(blocks_per_seq):
            table[i, :nb] = physical[offset : offset + nb]
            offset += nb
        k_cache = _random_half(cp, (num_blocks, nkv, bs, hd), rng)
        v_cache = _random_half(cp, (num_blocks, nkv, bs, hd), rng)
        q = _random_half(cp, (len(lens), p["num_heads"], hd), rng)
        out = cp.empty_like(q)
        tables, ctx = cp.asarray(table), cp.asarray(np.asarray(lens, dtype=np.int32))
        return lambda: self.kernels.paged_attention(
            out, q, k_cache, v_cache, tables, ctx, max(lens)
        )

    def _contiguous(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        lens = p["context_lens"]
        shape = (len(lens), max(lens), p["num_kv_heads"], p["head_dim"])
        k, v = _random_half(cp, shape, rng), _random_half(cp, shape, rng)
        q = _random_half(cp, (len(lens), p["num_heads"], p["head_dim"]), rng)
        out = cp.empty_like(q)
        ctx = cp.asarray(np.asarray(lens, dtype=np.int32))
        return lambda: self.kernels.contiguous_attention(out, q, k, v, ctx)

    def _prefill(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        b, t, hd = p["batch"], p["new_len"], p["head_dim"]
        q = _random_half(cp, (b, p["num_heads"], t, hd), rng)
        k = _random_half(cp, (b, p["num_kv_heads"], t, hd), rng)
        v = _random_half(cp, (b, p["num_kv_heads"], t, hd), rng)
        return lambda: self.kernels.prefill_attention(q, k, v)

    def _gemm(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        x, w = _random_half(cp, (p["m"], p["k"]), rng), _random_half(cp, (p["k"], p["n"]), rng)
        y = cp.empty((p["m"], p["n"]), dtype=cp.float16)
        return lambda: cp.matmul(x, w, out=y)

    def _kv_write(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        t, nkv, hd, bs = p["num_tokens"], p["num_kv_heads"], p["head_dim"], p["block_size"]
        num_blocks = 2 * -(-t // bs)
        k_cache = cp.zeros((num_blocks, nkv, bs, hd), dtype=cp.float16)
        v_cache = cp.zeros_like(k_cache)
        key, value = _random_half(cp, (t, nkv, hd), rng), _random_half(cp, (t, nkv, hd), rng)
        slots = cp.asarray(rng.permutation(num_blocks * bs)[:t].astype(np.int64))
        return lambda: self.kernels.kv_write(k_cache, v_cache, key, value, slots)

    def _block_cache(self, p):
        cp = self.cp
        shape = (2 * p["num_blocks"], p["num_kv_heads"], p["block_size"], p["head_dim"])
        return cp.zeros(shape, dtype=cp.float16), cp.zeros(shape, dtype=cp.float16)

    def _block_copy(self, p) -> Callable[[], None]:
        k_cache, v_cache = self._block_cache(p)
        perm = self.rng.permutation(2 * p["num_blocks"])
        pairs = np.stack([perm[: p["num_blocks"]], perm[p["num_blocks"] :]], axis=1).astype(
            np.int64
        )
        pairs_d = self.cp.asarray(pairs)
        return lambda: self.kernels.block_copy(k_cache, v_cache, pairs_d)

    def _swap(self, p) -> Callable[[], None]:
        import cupyx

        cp = self.cp
        k_cache, v_cache = self._block_cache(p)
        host_k = cupyx.empty_pinned(k_cache.shape, dtype=np.float16)
        host_v = cupyx.empty_pinned(v_cache.shape, dtype=np.float16)
        block_nbytes = k_cache[0].nbytes
        stream = cp.cuda.get_current_stream().ptr
        src_ids = self.rng.permutation(k_cache.shape[0])[: p["num_blocks"]]

        def launch() -> None:
            for dst, src in enumerate(src_ids):
                for dev, host in ((k_cache, host_k), (v_cache, host_v)):
                    cp.cuda.runtime.memcpyAsync(
                        host.ctypes.data + dst * block_nbytes,
                        dev.data.ptr + int(src) * block_nbytes,
                        block_nbytes,
                        MEMCPY_DEVICE_TO_HOST,
                        stream,
                    )

        return launch
