"""vLLM V1's KV pool as a named release sizes it (``server.vllm_version``), with every term.

Rule (``v1/worker/gpu_worker.py determine_available_memory``, ``v1/core/kv_cache_utils.py
get_num_blocks``; the terms and the release each changed in are in :mod:`.vllm_profile` and
``docs/vllm_versions.md``)::

    requested = total x gpu_memory_utilization            (rounded up from 0.14.0)
    available = requested - weights - torch peak - non-torch - CUDA graphs (from 0.21.0)
    num_gpu_blocks = available // (block_size x 2 x kv_heads x head_dim x dtype) // layers

per GPU: every TP rank holds ``1 / TP`` of the weights and of the KV heads and runs the same
profiling pass, so the ranks' pools are equal; the engine keeps the smallest
(``get_kv_cache_configs``), which is that one. The pool's first block is V1's null block
(the allocator's business: ``paged-v1`` makes ``num_gpu_blocks`` blocks, as the server).
``num_gpu_blocks_override`` (not modelled) replaces the count; ``hardware.kv_slots`` is
pagesim's equivalent. A release refuses to start when one request of ``max_model_len``
tokens does not fit (``check_enough_kv_cache_memory``); so does this.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.errors import ConfigError
from pagesim.simulator.model_gpu_specs import GIB, GPUSpec, ModelSpec
from pagesim.simulator.vllm_profile import (
    CUDA_TOTAL_BYTES,
    Release,
    TorchPeak,
    cudagraph_bytes,
    non_torch_bytes,
    torch_peak_bytes,
)
from pagesim.simulator.vllm_releases import parse_version


@dataclass(frozen=True)
class ReleasePool:
    """One GPU's KV pool under a named vLLM release, and each term of it (bytes per GPU)."""

    version: str
    model_name: str
    gpu_name: str
    tensor_parallel: int
    total_memory_bytes: int
    total_memory_source: str
    gpu_memory_utilization: float
    requested_bytes: int
    weight_bytes: int
    torch_peak: TorchPeak
    non_torch_bytes: int
    non_torch_what: str
    cudagraph_bytes: int
    page_bytes: int
    num_layers: int
    block_size: int

    @property
    def available_bytes(self) -> int:
        return (
            self.requested_bytes
            - self.weight_bytes
            - self.torch_peak.bytes
            - self.non_torch_bytes
            - self.cudagraph_bytes
        )

    @property
    def block_bytes(self) -> int:
        """One block over all layers, on one GPU."""
        return self.page_bytes * self.num_layers

    @property
    def num_gpu_blocks(self) -> int:
        return max(self.available_bytes // self.page_bytes // self.num_layers, 0)

    def terms(self) -> list[tuple[str, float, str]]:
        """(term, GiB per GPU, what it is), in the order of the rule."""
        peak = self.torch_peak
        return [
            ("total memory", self.total_memory_bytes / GIB, self.total_memory_source),
            (
                "requested",
                self.requested_bytes / GIB,
                f"x gpu_memory_utilization {self.gpu_memory_utilization}",
            ),
            ("weights", self.weight_bytes / GIB, f"parameters / TP {self.tensor_parallel}"),
            (
                "torch peak",
                peak.bytes / GIB,
                f"max(forward {peak.forward_bytes / GIB:.3f}, sampler "
                f"{peak.sampler_bytes / GIB:.3f} GiB: {peak.num_rows} rows, {peak.sampler_path})",
            ),
            ("non-torch", self.non_torch_bytes / GIB, self.non_torch_what),
            ("CUDA graphs", self.cudagraph_bytes / GIB, "estimate subtracted from 0.21.0"),
            (
                "KV cache",
                self.num_gpu_blocks * self.block_bytes / GIB,
                f"{self.num_gpu_blocks:,} blocks of {self.block_bytes:,} B",
            ),
        ]

    def note(self) -> str:
        """One line for a run's notes: the release, the pool and its terms."""
        parts = "; ".join(f"{name} {gib:.2f} GiB" for name, gib, _ in self.terms())
        return (
            f"vLLM {self.version} pool of {self.model_name} on {self.tensor_parallel} x "
            f"{self.gpu_name}: {self.num_gpu_blocks:,} blocks of {self.block_size} per GPU "
            f"({parts})"
        )


def cuda_total(gpu: GPUSpec, recorded: int | None = None) -> tuple[int, str]:
    """What ``torch.cuda.mem_get_info`` reports as the GPU's total, and whence."""
    if recorded:
        return int(recorded), "as the run recorded it"
    if gpu.name in CUDA_TOTAL_BYTES:
        return CUDA_TOTAL_BYTES[gpu.name], "as CUDA reports it (vllm_profile.CUDA_TOTAL_BYTES)"
    return int(gpu.memory_bytes), "the GPU spec's (CUDA's own figure not known to pagesim)"


def release_pool(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    version: str,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    block_size: int = 16,
    max_model_len: int | None = None,
    total_memory_bytes: int | None = None,
    kv_elem_bytes: int | None = None,
) -> ReleasePool:
    """The pool ``version`` gives itself (module doc); ``gpu_memory_utilization`` None is the
    release's default; ``kv_elem_bytes`` one K or V element's bytes (``--kv-cache-dtype``;
    None: the model's dtype). ConfigError, one line with the arithmetic, when nothing is left for
    the cache or one ``max_model_len`` request does not fit."""
    release = Release.of(parse_version(version))
    tp = tensor_parallel
    util = release.default_utilization if gpu_memory_utilization is None else gpu_memory_utilization
    total, source = cuda_total(gpu, total_memory_bytes)
    requested = total * util
    requested = -int(-requested // 1) if release.rounds_up_request else int(requested)
    elem = model.dtype_bytes if kv_elem_bytes is None else kv_elem_bytes
    page = block_size * 2 * model.num_kv_heads_per_gpu(tp) * model.head_dim * elem
    peak = torch_peak_bytes(
        release, model, gpu_name=gpu.name, tensor_parallel=tp,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
    )  # fmt: skip
    non_torch, what = non_torch_bytes(release, tp)
    graphs = cudagraph_bytes(
        release, model, tensor_parallel=tp, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )  # fmt: skip
    pool = ReleasePool(
        version, model.name, gpu.name, tp, total, source, util, requested,
        int(model.weight_bytes // tp), peak, non_torch, what, graphs, page, model.num_layers,
        block_size,
    )  # fmt: skip
    _check(pool, max_model_len)
    return pool


def _check(pool: ReleasePool, max_model_len: int | None) -> None:
    if pool.num_gpu_blocks < 1:
        raise ConfigError(
            f"hardware: {pool.model_name} does not fit on {pool.tensor_parallel} x "
            f"{pool.gpu_name} under vLLM {pool.version}: per GPU "
            + " - ".join(f"{name} {gib:.2f}" for name, gib, _ in pool.terms()[1:6])
            + f" = {pool.available_bytes / GIB:.2f} GiB of KV cache; raise "
            "hardware.tensor_parallel, use a bigger GPU, or give hardware.kv_budget_gib"
        )
    if max_model_len is not None:
        needed = -(-max_model_len // pool.block_size) * pool.block_bytes
        if needed > pool.available_bytes:
            raise ConfigError(
                f"max_model_len: one request of {max_model_len:,} tokens needs "
                f"{needed / GIB:.2f} GiB of KV cache per GPU, more than the "
                f"{pool.available_bytes / GIB:.2f} GiB vLLM {pool.version} leaves (it would "
                "refuse to start: kv_cache_utils.check_enough_kv_cache_memory); lower "
                "max_model_len or give the server more memory"
            )
