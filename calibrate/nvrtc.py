"""Compile the kernel sources with NVRTC on a machine without a GPU.

On a GPU, CuPy compiles ``kernels/*.cu`` with NVRTC, whose environment is not nvcc's: no
C library headers (``INFINITY`` comes from ``<math.h>``), only what the source includes
itself. The host shim (g++) and nvcc both see those headers, so a source can pass every
CPU test and still fail its first GPU run. NVRTC itself needs no GPU: this module loads
``libnvrtc`` (the ``nvidia-cuda-nvrtc`` wheel of the ``dev`` extra, or a CUDA toolkit) with
ctypes and compiles each source with the options :class:`~pagesim.calibrate.cupy_ops.
CupyLauncher` passes, for a Hopper virtual architecture.

    python -m pagesim.calibrate.nvrtc     # exit 0: every source compiles; 1: a log; 2: no NVRTC
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from pagesim.calibrate.cupy_ops import cuda_include_candidates
from pagesim.calibrate.sources import SOURCE_TO_KERNELS, nvidia_wheel_roots, read_source

#: the virtual architecture compiled for (compute_90: H100 and H200)
ARCH = "compute_90"


def find_libnvrtc() -> Path | None:
    """``libnvrtc.so`` from the NVIDIA wheels in site-packages, else $CUDA_HOME, $CUDA_PATH
    or /usr/local/cuda (``lib64``); None when there is none."""
    roots = [r / "lib" for r in nvidia_wheel_roots("cu13", "cuda_nvrtc")]
    roots += [Path(os.environ[k]) / "lib64" for k in ("CUDA_HOME", "CUDA_PATH") if k in os.environ]
    roots.append(Path("/usr/local/cuda/lib64"))
    for root in roots:
        found = sorted(root.glob("libnvrtc.so*")) if root.is_dir() else []
        found = [p for p in found if "builtins" not in p.name]
        if found:
            return found[0]
    return None


def compile_source(
    lib: ctypes.CDLL, source: str, name: str, options: list[str]
) -> tuple[bool, str]:
    """(compiled, NVRTC's log) for one source."""
    prog = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(
        ctypes.byref(prog), source.encode(), name.encode(), 0, None, None
    )
    if status != 0:
        return False, f"nvrtcCreateProgram returned {status}"
    try:
        opts = [o.encode() for o in options]
        status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return status == 0, log.value.decode(errors="replace").strip()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def check_sources(libnvrtc: Path, include_dirs: list[str]) -> dict[str, tuple[bool, str]]:
    """Each kernel source → (compiled, log), with CupyLauncher's options and ``include_dirs``."""
    lib = ctypes.CDLL(str(libnvrtc))
    options = ["-std=c++17", f"--gpu-architecture={ARCH}", *(f"-I{d}" for d in include_dirs)]
    return {
        name: compile_source(lib, read_source(name), name, options) for name in SOURCE_TO_KERNELS
    }


def main() -> int:
    libnvrtc = find_libnvrtc()
    includes = cuda_include_candidates()
    if libnvrtc is None or not includes:
        what = "libnvrtc (pip install nvidia-cuda-nvrtc)" if libnvrtc is None else "cuda_fp16.h"
        print(f"nvrtc check: skipped, no {what} on this machine")
        return 2
    results = check_sources(libnvrtc, includes[0])
    for name, (ok, log) in results.items():
        print(f"nvrtc check: {name} {'compiles' if ok else 'FAILS'} ({ARCH}, {libnvrtc.name})")
        if not ok:
            print(log)
    return 0 if all(ok for ok, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
