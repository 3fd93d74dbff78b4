"""Time the calibration kernels on the current GPU with CuPy and CUDA events.

Inputs are random fp16 drawn on the device (the values do not change the time; drawing
gigabytes of them on the host would take longer than timing the shape); block tables are
a random permutation of the physical blocks, so sequences' blocks are scattered as in a
long-running server. Before every timed run an L2 flush writes a buffer of twice the L2
size (``timing`` explains why). Swap is timed GPU -> pinned host, one cudaMemcpyAsync per
block and per K/V (vLLM v0's ``swap_blocks``); the Python loop issuing the copies is
included, so its per-block cost is an upper bound of vLLM's C++ loop. A shape's buffers
are freed (and CuPy's pools emptied) before the next shape is set up.

The array module is passed in (default: CuPy), so the tests run this code on the CPU
over a numpy stand-in with the kernels on the host shim.
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
#: random values drawn at a time when filling inputs
RANDOM_CHUNK = 1 << 27
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
#: cudaDeviceAttr values, for the properties CUDA 13 dropped from cudaDeviceProp
DEVICE_ATTRIBUTES = {
    "clockRate": 13,
    "memoryClockRate": 36,
    "memoryBusWidth": 37,
    "l2CacheSize": 38,
}


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


class CupyBackend:
    def __init__(
        self,
        rng: np.random.Generator,
        cp: Any = None,
        kernels: Kernels | None = None,
        copy_bandwidth_bytes: int = COPY_BANDWIDTH_BYTES,
    ) -> None:
        self.cp = import_cupy() if cp is None else cp
        self.rng = rng
        self.kernels = Kernels(self.cp) if kernels is None else kernels
        self.copy_bandwidth_bytes = copy_bandwidth_bytes
        self.props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        l2_bytes = self._prop("l2CacheSize") or (64 << 20)
        self.flush_buffer = self.cp.empty(2 * int(l2_bytes), dtype=self.cp.uint8)

    def _prop(self, key: str) -> float | None:
        """A device property, from cudaDeviceProp or, where CUDA 13 dropped it, the
        device attribute; None when neither says."""
        value = self.props.get(key)
        if not value and key in DEVICE_ATTRIBUTES:
            try:
                value = self.cp.cuda.runtime.deviceGetAttribute(
                    DEVICE_ATTRIBUTES[key], self.cp.cuda.Device().id
                )
            except Exception:  # noqa: BLE001 - a property the runtime does not report
                value = None
        return float(value) if value else None

    def device_info(self) -> DeviceInfo:
        cp, p = self.cp, self.props
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        khz = lambda key: v / 1e3 if (v := self._prop(key)) else None  # noqa: E731
        software = {
            "cupy": cp.__version__,
            "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()),
            "driver": str(cp.cuda.runtime.driverGetVersion()),
            "numpy": np.__version__,
        }
        include_dirs = getattr(self.kernels.launch, "include_dirs", ())
        if include_dirs:
            software["nvrtc_include"] = " ".join(include_dirs)
        bus = self._prop("memoryBusWidth")
        return DeviceInfo(
            name=name,
            sm_clock_mhz=khz("clockRate"),
            memory_clock_mhz=khz("memoryClockRate"),
            l2_bytes=int(self._prop("l2CacheSize") or 0) or None,
            memory_bytes=int(p.get("totalGlobalMem", 0)) or None,
            software=software,
            memory_bus_width_bits=int(bus) if bus else None,
        )

    def _random_half(self, shape):
        """fp16 N(0, 0.25) values drawn on the device, seeded from the run's generator, in
        chunks (a cache of billions of values needs no float32 copy of itself)."""
        cp = self.cp
        state = cp.random.RandomState(int(self.rng.integers(2**31)))
        out = cp.empty(shape, dtype=cp.float16)
        flat = out.reshape(-1)
        for start in range(0, flat.size, RANDOM_CHUNK):
            n = min(RANDOM_CHUNK, flat.size - start)
            flat[start : start + n] = state.standard_normal(n, dtype=cp.float32) * 0.5
        return out

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

        return measure(run_once, policy, self._flush_l2 if flush else None)

    def _free(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()
        self.cp.get_default_pinned_memory_pool().free_all_blocks()

    def copy_bandwidth_bytes_per_s(self, policy: TimingPolicy) -> float:
        stats = self._time(self._copy_launch(), policy, flush=False)
        self._free()
        return 2.0 * self.copy_bandwidth_bytes / stats.median_s

    def _copy_launch(self) -> Callable[[], None]:
        cp = self.cp
        src = cp.zeros(self.copy_bandwidth_bytes, dtype=cp.uint8)
        dst = cp.empty_like(src)
        stream = cp.cuda.get_current_stream().ptr
        return lambda: cp.cuda.runtime.memcpyAsync(
            dst.data.ptr, src.data.ptr, src.nbytes, MEMCPY_DEVICE_TO_DEVICE, stream
        )

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
        launch = setup(case.params)
        try:
            return self._time(launch, policy)
        finally:
            del launch  # the closure holds the shape's buffers
            self._free()

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
        k_cache = self._random_half((num_blocks, nkv, bs, hd))
        v_cache = self._random_half((num_blocks, nkv, bs, hd))
        q = self._random_half((len(lens), p["num_heads"], hd))
        out = cp.empty_like(q)
        tables, ctx = cp.asarray(table), cp.asarray(np.asarray(lens, dtype=np.int32))
        partitioned = p.get("partitioned")  # None: vLLM's rule (cupy_ops.use_partitioned)
        return lambda: self.kernels.paged_attention(
            out, q, k_cache, v_cache, tables, ctx, max(lens), partitioned=partitioned
        )

    def _contiguous(self, p) -> Callable[[], None]:
        cp = self.cp
        lens = p["context_lens"]
        shape = (len(lens), max(lens), p["num_kv_heads"], p["head_dim"])
        k, v = self._random_half(shape), self._random_half(shape)
        q = self._random_half((len(lens), p["num_heads"], p["head_dim"]))
        out = cp.empty_like(q)
        ctx = cp.asarray(np.asarray(lens, dtype=np.int32))
        return lambda: self.kernels.contiguous_attention(out, q, k, v, ctx)

    def _prefill(self, p) -> Callable[[], None]:
        b, t, hd = p["batch"], p["new_len"], p["head_dim"]
        q = self._random_half((b, p["num_heads"], t, hd))
        k = self._random_half((b, p["num_kv_heads"], t, hd))
        v = self._random_half((b, p["num_kv_heads"], t, hd))
        return lambda: self.kernels.prefill_attention(q, k, v)

    def _gemm(self, p) -> Callable[[], None]:
        cp = self.cp
        x, w = self._random_half((p["m"], p["k"])), self._random_half((p["k"], p["n"]))
        y = cp.empty((p["m"], p["n"]), dtype=cp.float16)
        return lambda: cp.matmul(x, w, out=y)

    def _kv_write(self, p) -> Callable[[], None]:
        cp, rng = self.cp, self.rng
        t, nkv, hd, bs = p["num_tokens"], p["num_kv_heads"], p["head_dim"], p["block_size"]
        num_blocks = 2 * -(-t // bs)
        k_cache = cp.zeros((num_blocks, nkv, bs, hd), dtype=cp.float16)
        v_cache = cp.zeros_like(k_cache)
        key, value = self._random_half((t, nkv, hd)), self._random_half((t, nkv, hd))
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

    def _pinned(self, shape) -> np.ndarray:
        """A numpy array in page-locked host memory (what cupyx.empty_pinned makes)."""
        nbytes = int(np.prod(shape)) * 2
        return np.ndarray(shape, np.float16, self.cp.cuda.alloc_pinned_memory(nbytes))

    def _swap(self, p) -> Callable[[], None]:
        cp = self.cp
        k_cache, v_cache = self._block_cache(p)
        host_shape = (p["num_blocks"], *k_cache.shape[1:])  # one slot per swapped block
        host_k, host_v = self._pinned(host_shape), self._pinned(host_shape)
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
