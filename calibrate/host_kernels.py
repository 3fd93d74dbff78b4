"""Run the CUDA sources of ``kernels/`` on the CPU: g++ and the host shim in ``kernels/host``.

No GPU is needed to execute the kernels. :func:`build_harness` compiles one source,
unmodified (it is ``#include``d as it is), with ``kernels/host/cuda_fp16.h`` standing in for
the CUDA headers: a thread block runs its CUDA threads as fibers, ``__syncthreads`` and warp
shuffles are barriers between them, ``__half`` is ``_Float16``. The result is an executable
that runs one launch described by a spec file (``kernels/host/harness.h``).
:class:`HostLauncher` is the launcher that ``cupy_ops.Kernels(numpy, launch=...)`` takes, so
the CPU runs exactly the launches (grid, block, shared memory, argument types) the GPU path
makes. Each launch is a separate process: a broken kernel that faults cannot take the caller
down, and a ThreadSanitizer build (``sanitizer="thread"``) reports races on its own stderr.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibrate.sources import KERNEL_DIR, SOURCE_TO_KERNELS
from pagesim.errors import ConfigError, PagesimError
from pagesim.files import replaced_atomically

HOST_DIR = KERNEL_DIR / "host"

#: sanitizer name -> extra compiler flags ("address" is ASan with UBSan: out-of-bounds
#: accesses to the launch's buffers, undefined behaviour in the kernels or the shim)
SANITIZERS: dict[str, tuple[str, ...]] = {
    "thread": ("-fsanitize=thread", "-O1", "-g"),
    "address": ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-O1", "-g"),
}
BASE_FLAGS = ("-std=c++20", "-O2", "-fno-strict-aliasing")
#: halt at the first race so the report is short; a race makes the launch fail
TSAN_OPTIONS = "halt_on_error=1 exitcode=66 second_deadlock_stack=1"

_DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]")
_DTYPE_NAMES = {
    np.dtype(np.float16): "float16",
    np.dtype(np.float32): "float32",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
}


class HostKernelError(PagesimError, RuntimeError):
    """A kernel could not be built or failed on the host shim; ``log`` holds the full output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def find_cxx() -> str | None:
    """The C++ compiler the shim needs (g++ 12 or newer for C++20 and ``_Float16``)."""
    return shutil.which("g++")


def translation_unit(file_name: str, source_path: Path) -> str:
    """The C++ file that includes the source unmodified and lists its kernels for the harness."""
    text = source_path.read_text()
    declared = sorted(set(_DYNAMIC_SHARED.findall(text)))
    if len(declared) > 1:
        raise ConfigError(
            f"{source_path.name}: the host shim supports one `extern __shared__` array name, "
            f"found {[f'{t} {n}[]' for t, n in declared]}"
        )
    dynamic = (
        f"PAGESIM_DYNAMIC_SHARED({declared[0][0]}, {declared[0][1]})"
        if declared
        else "PAGESIM_NO_DYNAMIC_SHARED"
    )
    entries = ",\n".join(
        f'      pagesim_host::entry("{name}", &{name})' for name in SOURCE_TO_KERNELS[file_name]
    )
    return (
        '#include "cuda_fp16.h"\n'
        f"{dynamic}\n"
        f'#include "{source_path.resolve()}"\n'
        '#include "harness.h"\n'
        "int main(int argc, char** argv) {\n"
        "  return pagesim_host::harness_main(argc, argv, {\n"
        f"{entries}\n"
        "  });\n"
        "}\n"
    )


def build_harness(
    file_name: str,
    out_dir: Path,
    *,
    source_path: Path | None = None,
    sanitizer: str | None = None,
    cxx: str | None = None,
) -> Path:
    """Compile ``file_name`` (or a copy of it at ``source_path``) into a harness executable.

    The executable's name carries a hash of the source, the shim and the flags, so a build is
    reused while none of them changes.
    """
    if file_name not in SOURCE_TO_KERNELS:
        raise ConfigError(
            f"kernel source {file_name!r} unknown; sources: {sorted(SOURCE_TO_KERNELS)}"
        )
    if sanitizer is not None and sanitizer not in SANITIZERS:
        raise ConfigError(f"sanitizer {sanitizer!r} unknown; allowed: {sorted(SANITIZERS)}")
    cxx = cxx or find_cxx()
    if cxx is None:
        raise HostKernelError("running the kernels on the CPU needs g++ (12 or newer); none found")
    source_path = Path(source_path) if source_path is not None else KERNEL_DIR / file_name
    tu = translation_unit(file_name, source_path)
    flags = BASE_FLAGS + SANITIZERS.get(sanitizer or "", ())
    digest = hashlib.sha256(tu.encode() + source_path.read_bytes() + " ".join(flags).encode())
    for shim in sorted(HOST_DIR.glob("*.h")):
        digest.update(shim.read_bytes())
    stem = f"{Path(file_name).stem}-{sanitizer or 'plain'}-{digest.hexdigest()[:12]}"
    out_dir = Path(out_dir)
    exe = out_dir / stem
    out_dir.mkdir(parents=True, exist_ok=True)
    # One builder at a time per executable (parallel test workers wait and reuse it).
    with open(out_dir / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.is_file():
            return exe
        tu_path = out_dir / f"{stem}.cpp"
        tu_path.write_text(tu)
        with replaced_atomically(exe) as partial:
            proc = subprocess.run(
                [cxx, *flags, "-I", str(HOST_DIR), "-o", str(partial), str(tu_path)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                first = next(
                    (ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200]
                )
                raise HostKernelError(
                    f"{cxx} could not compile {source_path.name}: {first}", proc.stderr
                )
    return exe


def _scalar_line(value: Any, index: int, kernel: str) -> str:
    dtype = np.asarray(value).dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None or name == "float16" or not np.isscalar(value):
        raise ConfigError(
            f"{kernel} argument {index}: scalar of type {type(value).__name__} cannot be "
            "passed to a kernel; allowed: numpy.int32, numpy.int64, numpy.float32"
        )
    text = float(value).hex() if name == "float32" else str(int(value))
    return f"scalar {name} {text}"


class HostLauncher:
    """Runs launches on the CPU with harness executables (one per source file).

    ``harnesses`` maps a source file name to its executable (:func:`build_harness`);
    ``seed`` 0 resumes a block's threads in thread order at every barrier, another value in a
    seeded random order (a different schedule, the same result for a race-free kernel).
    Array arguments must be C-contiguous numpy arrays; they are updated in place, as device
    memory would be.
    """

    def __init__(
        self, harnesses: Mapping[str, Path], work_dir: Path, seed: int = 0, timeout_s: float = 600
    ) -> None:
        self.harnesses = dict(harnesses)
        self.work_dir = Path(work_dir)
        self.seed = seed
        self.timeout_s = timeout_s
        self.num_launches = 0

    def __call__(
        self,
        source: str,
        kernel: str,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_mem: int = 0,
    ) -> None:
        if source not in self.harnesses:
            raise ConfigError(f"no host harness for {source!r}; built: {sorted(self.harnesses)}")
        self.num_launches += 1
        run_dir = self.work_dir / f"launch{self.num_launches}"
        run_dir.mkdir(parents=True, exist_ok=True)
        dims = lambda d: " ".join(str(int(x)) for x in (*d, 1, 1)[:3])  # noqa: E731
        lines = [
            f"kernel {kernel}",
            f"grid {dims(grid)}",
            f"block {dims(block)}",
            f"shared {int(shared_mem)}",
            f"seed {self.seed}",
        ]
        buffers: list[tuple[np.ndarray, Path]] = []
        for i, arg in enumerate(args):
            if isinstance(arg, np.ndarray):
                if not arg.flags.c_contiguous or arg.dtype not in _DTYPE_NAMES:
                    raise ConfigError(
                        f"{kernel} argument {i}: arrays must be C-contiguous with dtype in "
                        f"{sorted(_DTYPE_NAMES.values())}, got {arg.dtype}"
                    )
                path = run_dir / f"arg{i}.bin"
                arg.tofile(path)
                buffers.append((arg, path))
                lines.append(f"buffer {_DTYPE_NAMES[arg.dtype]} {arg.size} {path}")
            else:
                lines.append(_scalar_line(arg, i, kernel))
        spec = run_dir / "launch.spec"
        spec.write_text("\n".join(lines) + "\n")
        env = {**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS}
        proc = subprocess.run(
            [str(self.harnesses[source]), str(spec)],
            capture_output=True,
            text=True,
            env=env,
            timeout=self.timeout_s,
        )
        if proc.returncode != 0:
            raise HostKernelError(_failure_line(kernel, proc), proc.stderr)
        for array, path in buffers:
            array[...] = np.fromfile(path, dtype=array.dtype).reshape(array.shape)
        shutil.rmtree(run_dir)


def _failure_line(kernel: str, proc: subprocess.CompletedProcess) -> str:
    """One line: the sanitizer's or the shim's own error if there is one, else the last line."""
    lines = proc.stderr.splitlines()
    for ln in lines:
        if "Sanitizer:" in ln or "runtime error:" in ln or ln.startswith("pagesim host"):
            text = re.sub(r"^==\d+==", "", ln.strip()).removeprefix("WARNING: ")
            return f"{kernel}: {text.removeprefix('ERROR: ')} (exit {proc.returncode})"
    tail = lines[-1].strip() if lines else "no output"
    return f"{kernel} failed on the host shim (exit {proc.returncode}): {tail}"
