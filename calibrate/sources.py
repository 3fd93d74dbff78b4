"""The CUDA sources in ``kernels/`` and the kernel names each one defines.

Kernels are compiled at run time by CuPy (NVRTC); ``compile_with_nvcc`` compiles the same
source ahead of time with the CUDA toolkit so that the sources are checked without a GPU,
and ``ptxas_resources`` reads what ptxas allocated per kernel (registers, spills, stack,
shared memory) for the budget check. ``find_nvcc`` looks on PATH, in ``$CUDA_HOME``, then
in the PyPI wheels (``nvidia-cuda-nvcc``: ``nvidia/cu13/bin`` or ``nvidia/cuda_nvcc/bin``
in site-packages).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sysconfig
from dataclasses import dataclass
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
    "prefill.cu": ("causal_softmax",),
}
#: threads of a causal_softmax block (prefill.cu's SOFTMAX_THREADS): one warp per row
SOFTMAX_NUM_THREADS = 128


def read_source(file_name: str) -> str:
    path = KERNEL_DIR / file_name
    if not path.is_file():
        raise ConfigError(
            f"kernel source {file_name!r} not found; sources: {sorted(SOURCE_TO_KERNELS)}"
        )
    return path.read_text()


def nvidia_wheel_roots(*subdirs: str) -> list[Path]:
    """``site-packages/nvidia/<sub>`` for each of ``subdirs`` in every site-packages folder
    (where the NVIDIA CUDA wheels unpack: ``cu13`` for CUDA 13, per-component names before),
    in search order; whether each exists is the caller's question."""
    folders = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    return [Path(packages) / "nvidia" / sub for packages in folders for sub in subdirs]


def find_nvcc() -> str | None:
    """nvcc on PATH, in $CUDA_HOME/bin, or from the nvidia-cuda-nvcc wheel; None if absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [Path(os.environ["CUDA_HOME"])] if os.environ.get("CUDA_HOME") else []
    roots += nvidia_wheel_roots("cu13", "cuda_nvcc")
    for root in roots:
        if (root / "bin" / "nvcc").is_file():
            return str(root / "bin" / "nvcc")
    return None


def compile_with_nvcc(
    file_name: str, out_dir: Path, arch: str = "sm_90", nvcc: str = "nvcc"
) -> Path:
    """Compile one source to a cubin with nvcc; raises CalledProcessError with nvcc's log."""
    return _nvcc_cubin(file_name, out_dir, arch, nvcc)[0]


def _nvcc_cubin(file_name: str, out_dir: Path, arch: str, nvcc: str, *extra: str):
    out = Path(out_dir) / (Path(file_name).stem + f".{arch}.cubin")
    proc = subprocess.run(
        [nvcc, f"-arch={arch}", "--cubin", "-std=c++17", *extra, "-o", str(out)]
        + [str(KERNEL_DIR / file_name)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out, proc.stdout + proc.stderr


#: Budgets every kernel must meet on every architecture (checked from ptxas -v, no GPU):
#: no register spills and no stack frame (local memory is DRAM traffic the cost model does
#: not count); at most 64 registers a thread, so 8 blocks of 128 threads fit the 64K
#: registers of an SM (occupancy for a memory-bound kernel); at most 16 KiB of shared memory
#: a block (static + the largest dynamic size the launches ask), so 8 blocks fit A100's
#: 164 KiB.
MAX_REGISTERS_PER_THREAD = 64
MAX_SHARED_BYTES_PER_BLOCK = 16 * 1024


@dataclass(frozen=True)
class KernelResources:
    """What ptxas allocated for one kernel on one architecture."""

    kernel: str
    arch: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    static_shared_bytes: int


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> list[KernelResources]:
    """The per-kernel lines of ``nvcc -Xptxas -v`` (any order of a kernel's info lines)."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    key = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            key = (m.group(1), m.group(2))
            found[key] = {}
        elif key is not None and (m := _FRAME.search(line)):
            found[key].update(
                stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3))
            )
        elif key is not None and (m := _USED.search(line)):
            found[key].update(regs=int(m.group(1)), smem=int(m.group(2) or 0))
    out = []
    for (kernel, arch), v in found.items():
        if {"stack", "regs"} - v.keys():
            raise ValueError(f"ptxas log lacks the frame or register line of {kernel} ({arch})")
        out.append(
            KernelResources(
                kernel, arch, v["regs"], v["spill_st"], v["spill_ld"], v["stack"], v["smem"]
            )
        )
    return out


def ptxas_resources(
    file_name: str, out_dir: Path, arch: str, nvcc: str, *extra_flags: str
) -> list[KernelResources]:
    """Compile ``file_name`` for ``arch`` with ``-Xptxas -v`` and parse what ptxas reports."""
    log = _nvcc_cubin(file_name, out_dir, arch, nvcc, "-Xptxas", "-v", *extra_flags)[1]
    return parse_ptxas_log(log)
