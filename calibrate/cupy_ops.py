"""The calibration kernels as functions of arrays, launched on a GPU or on the CPU.

Each op takes and returns arrays in the layouts of ``kernels/*.cu`` (see ``reference.py``,
their numpy twins). The array module and the launcher are passed in: CuPy device arrays and
:class:`CupyLauncher` (NVRTC RawModules, compiled once) on a GPU; numpy arrays and
``host_kernels.HostLauncher`` (the unmodified sources compiled by g++ against a host shim)
on the CPU. Both run the same launch code below (grid, block, dynamic shared memory,
argument types), so the CPU tests also check what the GPU would be asked to run. CuPy is
imported lazily by the caller, so this module imports without it.

Decode attention picks the single-pass or the partitioned kernel by vLLM's rule
(v0.2-v0.4 ``_paged_attention``): partitioned (v2, 512-token partitions) unless the
longest context fits one partition, or there are more than 512 (sequence, head) pairs to
keep the GPU busy and the context is at most 8192 tokens.
Prefill attention is two batched GEMMs (cuBLAS: fp16 in and out) around prefill.cu's
causal softmax: S = Q K^T with each KV head's group of query heads stacked as rows, the
masked softmax in place (fp32 inside, one read of S and one write of P), then P V.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pagesim.calibrate.sources import (
    ATTENTION_NUM_THREADS,
    SOFTMAX_NUM_THREADS,
    SOURCE_TO_KERNELS,
    attention_kernel_names,
    nvidia_wheel_roots,
    read_source,
)

#: launch(source_file, kernel_name, grid, block, args, shared_mem_bytes)
Launcher = Callable[[str, str, tuple[int, ...], tuple[int, ...], Sequence[Any], int], None]

PARTITION_SIZE = 512
MIN_TILE_TOKENS = 64


def attention_tile(block_size: int) -> int:
    """Tokens per online-softmax step: whole blocks, at least MIN_TILE_TOKENS."""
    return max(block_size, MIN_TILE_TOKENS // block_size * block_size)


def use_partitioned(max_context: int, num_seqs: int, num_heads: int) -> bool:
    num_parts = -(-max_context // PARTITION_SIZE)
    return not (max_context <= 8192 and (num_parts == 1 or num_seqs * num_heads > 512))


class CupyLauncher:
    """Launches through CuPy ``RawModule`` (NVRTC), one module per source, compiled once.

    ``include_dirs`` are passed to NVRTC as ``-I`` (empty: CuPy finds the CUDA headers
    itself); see :func:`compile_launcher` for when they are needed.
    """

    def __init__(self, cp: Any, include_dirs: Sequence[str] = ()) -> None:
        options = ("-std=c++17", *(f"-I{d}" for d in include_dirs))
        self.include_dirs = tuple(include_dirs)
        self.modules = {
            name: cp.RawModule(code=read_source(name), options=options)
            for name in SOURCE_TO_KERNELS
        }

    def compile(self) -> None:
        """Compile every module now (CuPy may compile on the first launch otherwise)."""
        for name, module in self.modules.items():
            if hasattr(module, "compile"):
                module.compile()
            else:
                module.get_function(SOURCE_TO_KERNELS[name][0])

    def __call__(self, source, kernel, grid, block, args, shared_mem=0) -> None:
        self.modules[source].get_function(kernel)(grid, block, tuple(args), shared_mem=shared_mem)


#: lists CUDA include folders to try when NVRTC cannot find cuda_fp16.h by itself
#: (``os.pathsep``-separated; ``tasks.py gpu-calibrate`` points it at the headers it carries)
INCLUDE_ENV = "PAGESIM_NVRTC_INCLUDE"


def cuda_include_candidates() -> list[list[str]]:
    """Folders with ``cuda_fp16.h`` (each with its ``cccl`` folder, where CUDA 13 keeps
    ``nv/target``): those in ``$PAGESIM_NVRTC_INCLUDE``, ``$CUDA_PATH``, ``$CUDA_HOME``,
    /usr/local/cuda, then the NVIDIA wheels in site-packages. Each is one set of -I dirs."""
    import os
    from pathlib import Path

    roots = [Path(d) for d in os.environ.get(INCLUDE_ENV, "").split(os.pathsep) if d]
    roots += [
        Path(os.environ[k]) / "include" for k in ("CUDA_PATH", "CUDA_HOME") if k in os.environ
    ]
    roots.append(Path("/usr/local/cuda/include"))
    roots += [
        r / "include" for r in nvidia_wheel_roots("cu13", "cuda_runtime", "cu12", "cuda_nvrtc")
    ]
    found = []
    for root in dict.fromkeys(roots):
        if (root / "cuda_fp16.h").is_file():
            found.append([str(root)] + ([str(root / "cccl")] if (root / "cccl").is_dir() else []))
    return found


def compile_launcher(cp: Any) -> CupyLauncher:
    """A compiled :class:`CupyLauncher`: as CuPy configures NVRTC, else with the first set of
    :func:`cuda_include_candidates` that compiles (a CuPy wheel without the CUDA headers);
    raises the first compile error when none does."""
    try:
        launcher = CupyLauncher(cp)
        launcher.compile()
        return launcher
    except Exception as first:  # noqa: BLE001 - CompileException; retried with headers below
        for dirs in cuda_include_candidates():
            try:
                launcher = CupyLauncher(cp, dirs)
                launcher.compile()
                return launcher
            except Exception:  # noqa: BLE001 - the next candidate may compile
                continue
        raise first


class Kernels:
    """The kernels of ``kernels/`` over arrays of ``xp``: CuPy (default launcher) or numpy."""

    def __init__(self, xp: Any, launch: Launcher | None = None) -> None:
        self.cp = xp
        self.launch = launch if launch is not None else compile_launcher(xp)

    def paged_attention(
        self, out, q, k_cache, v_cache, block_tables, context_lens, max_context, partitioned=None
    ):
        """out [n, heads, d] <- decode attention over the paged cache (see module doc)."""
        cp = self.cp
        n, num_heads, head_dim = q.shape
        num_kv_heads, block_size = k_cache.shape[1], k_cache.shape[2]
        names = attention_kernel_names(head_dim)
        tile = attention_tile(block_size)
        scale = np.float32(1.0 / np.sqrt(head_dim))
        if partitioned is None:
            partitioned = use_partitioned(max_context, n, num_heads)
        common = (
            k_cache,
            v_cache,
            block_tables,
            context_lens,
            np.int32(block_tables.shape[1]),
            np.int32(num_kv_heads),
            np.int32(block_size),
            np.int32(tile),
        )
        if not partitioned:
            self.launch(
                "paged_attention.cu",
                names["paged_v1"],
                (num_heads, n),
                (ATTENTION_NUM_THREADS,),
                (out, q, *common, scale),
                4 * tile,
            )
            return out
        part = max(PARTITION_SIZE // tile, 1) * tile
        num_parts = -(-max_context // part)
        tmp = cp.empty((n, num_heads, num_parts, head_dim), dtype=cp.float32)
        max_logits = cp.empty((n, num_heads, num_parts), dtype=cp.float32)
        exp_sums = cp.empty((n, num_heads, num_parts), dtype=cp.float32)
        self.launch(
            "paged_attention.cu",
            names["paged_v2"],
            (num_heads, n, num_parts),
            (ATTENTION_NUM_THREADS,),
            (tmp, max_logits, exp_sums, q, *common, np.int32(part), scale),
            4 * tile,
        )
        self.launch(
            "paged_attention.cu",
            names["reduce_v2"],
            (num_heads, n),
            (ATTENTION_NUM_THREADS,),
            (out, tmp, max_logits, exp_sums, np.int32(num_parts)),
            0,
        )
        return out

    def contiguous_attention(self, out, q, k, v, context_lens):
        """out <- decode attention over k, v [n, max_context, kv_heads, d]."""
        n, num_heads, head_dim = q.shape
        tile = MIN_TILE_TOKENS
        self.launch(
            "paged_attention.cu",
            attention_kernel_names(head_dim)["contiguous"],
            (num_heads, n),
            (ATTENTION_NUM_THREADS,),
            (
                out,
                q,
                k,
                v,
                context_lens,
                np.int32(k.shape[1]),
                np.int32(k.shape[2]),
                np.int32(tile),
                np.float32(1.0 / np.sqrt(head_dim)),
            ),
            4 * tile,
        )
        return out

    def kv_write(self, k_cache, v_cache, key, value, slot_mapping):
        num_tokens, num_kv_heads, head_dim = key.shape
        threads = min(num_kv_heads * head_dim, 512)
        self.launch(
            "kv_cache.cu",
            "reshape_and_cache",
            (num_tokens,),
            (threads,),
            (
                k_cache,
                v_cache,
                key,
                value,
                slot_mapping,
                np.int32(num_kv_heads),
                np.int32(head_dim),
                np.int32(k_cache.shape[2]),
            ),
            0,
        )

    def block_copy(self, k_cache, v_cache, block_pairs):
        elems = int(np.prod(k_cache.shape[1:]))
        self.launch(
            "kv_cache.cu",
            "copy_blocks",
            (block_pairs.shape[0], 2),
            (256,),
            (k_cache, v_cache, block_pairs, np.int64(elems)),
            0,
        )

    def prefill_attention(self, q, k, v):
        """Causal attention, q/k/v [batch, heads or kv_heads, new, d] (no cached prefix).

        Two batched GEMMs (cuBLAS on a GPU) around prefill.cu's causal softmax: a KV head's
        group of query heads is one matrix of group x new rows (heads of a group are
        adjacent), S = Q K^T [batch x kv_heads, group x new, new] in fp16, the softmax in
        place (row r is the query at position r % new), then P V."""
        cp = self.cp
        b, h, t, d = q.shape
        kvh = k.shape[1]
        rows = q.reshape(b * kvh, (h // kvh) * t, d)
        s = cp.matmul(rows, k.reshape(b * kvh, t, d).swapaxes(-1, -2))
        num_rows = s.shape[0] * s.shape[1]
        per_block = SOFTMAX_NUM_THREADS // 32
        self.launch(
            "prefill.cu",
            "causal_softmax",
            (-(-num_rows // per_block),),
            (SOFTMAX_NUM_THREADS,),
            (s, np.int64(num_rows), np.int32(t), np.float32(1.0 / np.sqrt(d))),
            0,
        )
        return cp.matmul(s, v.reshape(b * kvh, t, d)).reshape(b, h, t, d)
