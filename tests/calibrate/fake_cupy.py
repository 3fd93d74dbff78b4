"""A numpy stand-in for the part of CuPy that ``cupy_backend`` and ``cupy_ops`` use.

Arrays are numpy arrays whose ``.data.ptr`` is their host address (as a CuPy array's is its
device address), so the backend's raw copies (``memcpyAsync`` of pointers) run as
``ctypes.memmove``; events read ``time.perf_counter``. With the kernels on the host shim
(``Kernels(fake_cupy, launch=HostLauncher(...))``) the backend's whole setup and launch
code runs on the CPU: shapes, dtypes and argument types, not the timing.

It is built as a class so that a test can change a property (CUDA 13 dropped some from
``cudaDeviceProp``; the backend must then ask ``deviceGetAttribute``).
"""

from __future__ import annotations

import ctypes
import time
import types

import numpy as np


class DeviceArray(np.ndarray):
    """A numpy array with CuPy's ``.data.ptr``."""

    @property
    def data(self):  # noqa: D401 - mirrors cupy.ndarray.data (a MemoryPointer)
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _dev(a) -> DeviceArray:
    return np.ascontiguousarray(a).view(DeviceArray)


class _Event:
    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


class _Pool:
    def __init__(self) -> None:
        self.num_frees = 0

    def free_all_blocks(self) -> None:
        self.num_frees += 1


class _RandomState:
    def __init__(self, seed: int) -> None:
        self.rs = np.random.RandomState(seed)

    def standard_normal(self, size, dtype=np.float64):
        return _dev(self.rs.standard_normal(size).astype(dtype))


#: cudaDeviceAttr -> value (clock 1.98 GHz, memory 2.619 GHz x 5120 bits, L2 64 KiB)
ATTRIBUTES = {13: 1_980_000, 36: 2_619_000, 37: 5120, 38: 1 << 16}


class FakeCupy:
    """``cupy`` as far as the calibration uses it (see the module docstring)."""

    __version__ = "0.0-fake"
    float16, float32, uint8, inf = np.float16, np.float32, np.uint8, np.inf

    def __init__(self, props: dict | None = None) -> None:
        self.props = props or {"name": b"Fake GPU", "totalGlobalMem": 80 << 30}
        self.memory_pool, self.pinned_pool = _Pool(), _Pool()
        self.num_memcpy = 0
        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: 1,
            getDeviceProperties=lambda dev: dict(self.props),
            deviceGetAttribute=lambda attr, dev: ATTRIBUTES[attr],
            runtimeGetVersion=lambda: 13000,
            driverGetVersion=lambda: 13000,
            memcpyAsync=self._memcpy,
        )
        self.cuda = types.SimpleNamespace(
            runtime=runtime,
            Device=lambda: types.SimpleNamespace(id=0),
            Event=_Event,
            get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
            get_current_stream=lambda: types.SimpleNamespace(ptr=0),
            alloc_pinned_memory=lambda nbytes: bytearray(nbytes),
        )
        self.random = types.SimpleNamespace(RandomState=_RandomState)

    def _memcpy(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        self.num_memcpy += 1
        ctypes.memmove(dst, src, size)

    def get_default_memory_pool(self) -> _Pool:
        return self.memory_pool

    def get_default_pinned_memory_pool(self) -> _Pool:
        return self.pinned_pool

    # ---- array functions (numpy's, returning DeviceArray) --------------------------------

    def empty(self, shape, dtype=np.float64):
        return _dev(np.empty(shape, dtype))

    def zeros(self, shape, dtype=np.float64):
        return _dev(np.zeros(shape, dtype))

    def empty_like(self, a):
        return _dev(np.empty_like(a))

    def zeros_like(self, a):
        return _dev(np.zeros_like(a))

    def full(self, shape, value, dtype=None):
        return _dev(np.full(shape, value, dtype))

    def asarray(self, a):
        return _dev(np.asarray(a))

    def asnumpy(self, a):
        return np.asarray(a).view(np.ndarray)

    def matmul(self, a, b, out=None):
        return np.matmul(a, b, out=out) if out is not None else _dev(np.matmul(a, b))

    def triu(self, a, k=0):
        return _dev(np.triu(a, k))

    def exp(self, a, out=None):
        return np.exp(a, out=out)
