"""The kernel sources compile under NVRTC, CuPy's compiler on a GPU, which lacks the C library
headers that nvcc and the host shim see (the first GPU run failed on ``INFINITY``)."""

import ctypes

import pytest

from pagesim.calibrate.cupy_ops import cuda_include_candidates
from pagesim.calibrate.nvrtc import ARCH, check_sources, compile_source, find_libnvrtc
from pagesim.calibrate.sources import SOURCE_TO_KERNELS

LIBNVRTC = find_libnvrtc()
INCLUDES = cuda_include_candidates()
pytestmark = pytest.mark.skipif(
    LIBNVRTC is None or not INCLUDES,
    reason="no libnvrtc (the dev extra's nvidia-cuda-nvrtc) or no CUDA headers (cuda_fp16.h)",
)


def test_every_kernel_source_compiles_under_nvrtc():
    results = check_sources(LIBNVRTC, INCLUDES[0])
    assert sorted(results) == sorted(SOURCE_TO_KERNELS)
    failed = {name: log for name, (ok, log) in results.items() if not ok}
    assert not failed, failed


def test_the_check_fails_where_nvrtc_lacks_a_c_library_macro():
    source = (
        '#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) { x[0] = -INFINITY; }\n'
    )
    options = ["-std=c++17", f"--gpu-architecture={ARCH}", *(f"-I{d}" for d in INCLUDES[0])]
    ok, log = compile_source(ctypes.CDLL(str(LIBNVRTC)), source, "probe.cu", options)
    assert not ok
    assert "INFINITY" in log
