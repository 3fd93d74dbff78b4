"""The CUDA sources in ``kernels/`` and the kernel names each one defines.

Kernels are compiled at run time by CuPy (NVRTC); ``compile_with_nvcc`` compiles the same
source ahead of time with the CUDA toolkit so that the sources are checked without a GPU.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pagesim.errors import ConfigError

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

#: Head dimensions the attention kernels are instantiated for.
HEAD_DIMS = (64, 80, 96, 128)

#: Threads per attention thread block (NUM_THREADS in paged_attention.cu).
ATTENTION_NUM_THREADS = 128


def attention_kernel_names(head_dim: int) -> dict[str, str]:
    if head_dim not in HEAD_DIMS:
        raise ConfigError(
            f"head_dim {head_dim} has no attention kernel; supported: {list(HEAD_DIMS)}"
        )
    return {
        "paged_v1": f"paged_attention_v1_hd{head_dim}",
        "paged_v2": f"paged_attention_v2_hd{head_dim}",
        "reduce_v2": f"attention_v2_reduce_hd{head_dim}",
        "contiguous": f"contiguous_attention_hd{head_dim}",
    }


#: source file -> the extern "C" kernels it defines
SOURCE_TO_KERNELS: dict[str, tuple[str, ...]] = {
    "paged_attention.cu": tuple(n for d in HEAD_DIMS for n in attention_kernel_names(d).values()),
    "kv_cache.cu": ("reshape_and_cache", "copy_blocks"),
}


def read_source(file_name: str) -> str:
    path = KERNEL_DIR / file_name
    if not path.is_file():
        raise ConfigError(
            f"kernel source {file_name!r} not found; sources: {sorted(SOURCE_TO_KERNELS)}"
        )
    return path.read_text()


def compile_with_nvcc(
    file_name: str, out_dir: Path, arch: str = "sm_90", nvcc: str = "nvcc"
) -> Path:
    """Compile one source to a cubin with nvcc; raises CalledProcessError with nvcc's log."""
    out = Path(out_dir) / (Path(file_name).stem + f".{arch}.cubin")
    subprocess.run(
        [
            nvcc,
            f"-arch={arch}",
            "--cubin",
            "-std=c++17",
            "-o",
            str(out),
            str(KERNEL_DIR / file_name),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out
