"""KV pool sizing: how many token slots of K/V fit on the GPU(s), and in the CPU swap space.

Rule (vLLM v0.1, the paper's system, ``Worker.profile_num_available_blocks``): run one
dummy forward pass of ``max_num_batched_tokens`` tokens over ``max_num_seqs``
sequences, take ``torch.cuda.max_memory_allocated()`` as the peak (weights plus
activations, not the CUDA context), and give the cache::

    per GPU:  kv_budget = gpu_memory_utilization x GPU memory - weights / TP - activation peak
    total:    kv_budget_bytes = TP x per-GPU budget

The activation peak is estimated, not measured (:func:`activation_reserve_bytes`).
A run that names its server's release (``server.vllm_version``) gets that release's rule
instead (:mod:`.vllm_pool`: every term vLLM V1 subtracts, per GPU, ``hardware.
gpu_memory_utilization`` None meaning the release's default); without one this module's
rule, unchanged, with ``gpu_memory_utilization`` None meaning 0.9.

For OPT-13B on one A100-40GB at 0.9 this gives 12.53 GB = 11.67 GiB = 15,296 slots
(the paper's Table 1: 12 GB, 15.7K slots); OPT-66B on 4 x A100-40GB 21.8 GB (paper 21 GB);
OPT-175B on 8 x A100-80GB 266.5 GB (paper 264 GB). Given ``hardware.kv_budget_gib`` (GiB = 2**30) or
``hardware.kv_slots`` the budget is taken as is (the paper's budgets: 12 GiB on
OPT-13B gives 15,728 slots).

Tensor parallelism splits the KV heads over the TP ranks (``kv_heads / TP`` per GPU,
replicated when TP > kv_heads), so a token's K/V over the whole model is
``TP x kv_heads_per_gpu x ...`` and ``capacity_slots = kv_budget_bytes //
kv_bytes_per_token`` overall (equal to the model's ``kv_bytes_per_token`` unless KV
heads are replicated). ``cpu_capacity_slots = swap_space_gib x 2**30 //
kv_bytes_per_token``: vLLM's ``swap_space`` is per GPU in its engine arguments; the
simulator treats it as one pool for the whole model.

``hardware.kv_cache_dtype`` (vLLM's ``--kv-cache-dtype``) sets the bytes of each K/V
element: ``auto`` the model's dtype, the fp8 forms one byte (half of a 16-bit model's),
so a budget holds twice the tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pagesim.errors import ConfigError
from pagesim.simulator.model_gpu_specs import GIB, GPUSpec, ModelSpec, get_gpu, get_model

if TYPE_CHECKING:
    from pagesim.simulator.spec import HardwareSpec, RunSpec
    from pagesim.simulator.vllm_pool import ReleasePool

#: The largest pool (GPU or CPU, in token slots) a run may ask for: checked before
#: anything is allocated, since the allocators keep per-block state. 2**27 slots is
#: 64x the largest real pool (a 125M-parameter model on an 80 GB GPU: ~2M slots).
MAX_POOL_SLOTS = 2**27
#: vLLM v0 defaults of the profiling pass (``SchedulerConfig``).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2560
DEFAULT_MAX_NUM_SEQS = 256
#: ``hardware.gpu_memory_utilization`` when a run names no release and leaves it out
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class KVPool:
    """The KV cache's size: bytes and token slots on the GPUs, and slots in CPU swap space."""

    kv_budget_bytes: int
    kv_bytes_per_token: int
    capacity_slots: int
    cpu_capacity_slots: int
    model: ModelSpec
    gpu: GPUSpec
    #: the named release's pool and its terms (None: no release named, or a budget given)
    release: ReleasePool | None = None

    @property
    def kv_budget_gib(self) -> float:
        return self.kv_budget_bytes / GIB

    def num_blocks(self, block_size: int) -> int:
        """GPU blocks of ``block_size`` slots: floor(capacity_slots / block_size)."""
        return self.capacity_slots // block_size

    def num_cpu_blocks(self, block_size: int) -> int:
        return self.cpu_capacity_slots // block_size


def run_kv_pool(spec: RunSpec) -> KVPool:
    """The pool of one run: :func:`kv_pool` with the run's scheduler budget, block size,
    ``max_model_len`` and named release."""
    return kv_pool(
        spec.hardware,
        swap_space_gib=spec.allocator.swap_space_gib,
        max_num_batched_tokens=spec.scheduler.max_num_batched_tokens,
        max_num_seqs=spec.scheduler.max_num_seqs,
        vllm_version=spec.server.vllm_version,
        block_size=spec.allocator.block_size,
        max_model_len=spec.max_model_len,
    )


#: bytes of one K or V element per ``hardware.kv_cache_dtype`` (vLLM's ``--kv-cache-dtype``,
#: ``vllm/config/cache.py`` ``CacheDType``; ``vllm/utils/torch_utils.py``
#: ``STR_DTYPE_TO_TORCH_DTYPE``: the fp8 forms are one-byte ``uint8`` / ``float8`` storage);
#: ``auto`` is the model's own dtype
KV_CACHE_DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
}


def kv_bytes_per_token_overall(
    model: ModelSpec, tensor_parallel: int, kv_cache_dtype: str = "auto"
) -> int:
    """K and V of one token summed over all TP ranks (replicated KV heads counted per copy),
    each element of ``kv_cache_dtype``'s size (``auto``: the model's dtype)."""
    per_gpu = model.num_kv_heads_per_gpu(tensor_parallel)
    elem = KV_CACHE_DTYPE_BYTES.get(kv_cache_dtype, model.dtype_bytes)
    return 2 * model.num_layers * tensor_parallel * per_gpu * model.head_dim * elem


def activation_reserve_bytes(
    model: ModelSpec,
    tensor_parallel: int = 1,
    *,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> int:
    """Estimated peak activation memory of vLLM's profiling pass, per GPU.

    Within one layer the live tensors of a T-token forward are at most the residual
    stream and its normalised copy (2 h), the QKV output (3 h / TP) and the attention
    output (h / TP), or the MLP's input and intermediate (h + ffn / TP, doubled for
    LLaMA's gate and up): we take T x (2 h + max(4 h, 2 ffn) / TP) x dtype bytes.
    The sampler then holds fp32 logits of every sequence and two same-sized copies
    (probabilities, log-probabilities): 3 x seqs x vocab x 4 bytes. OPT-13B, TP 1:
    2560 x (10,240 + 40,960) x 2 + 3 x 256 x 50,272 x 4 = 416 MB.
    """
    h, f, tp = model.hidden_size, model.ffn_size, tensor_parallel
    num_ffn = 2 if model.arch == "llama" else 1
    per_token = 2 * h + max(4 * h, (num_ffn + 1) * f) // tp
    hidden = max_num_batched_tokens * per_token * model.dtype_bytes
    logits = 3 * min(max_num_seqs, max_num_batched_tokens) * model.vocab_size * 4
    return hidden + logits


def kv_pool(
    hardware: HardwareSpec,
    *,
    swap_space_gib: float,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    vllm_version: str | None = None,
    block_size: int = 16,
    max_model_len: int | None = None,
) -> KVPool:
    """Size the KV pool for ``hardware`` (see the module docstring for the rule); with
    ``vllm_version`` as that release does (``block_size`` and ``max_model_len`` then matter:
    the pool is whole blocks, and the release refuses a ``max_model_len`` it cannot hold).

    Raises ConfigError when the weights and activations leave no room (with the
    arithmetic), or when TP does not divide the model's heads.
    """
    model, gpu, tp = get_model(hardware.model), get_gpu(hardware.gpu), hardware.tensor_parallel
    if swap_space_gib < 0:
        raise ConfigError(f"allocator.swap_space_gib must be >= 0, got {swap_space_gib}")
    kv_per_token = kv_bytes_per_token_overall(model, tp, hardware.kv_cache_dtype)
    release = None
    if hardware.kv_slots is not None:
        budget = hardware.kv_slots * kv_per_token
    elif hardware.kv_budget_gib is not None:
        budget = int(hardware.kv_budget_gib * GIB)
    elif vllm_version is not None:
        from pagesim.simulator.vllm_pool import release_pool

        release = release_pool(
            model, gpu, version=vllm_version, tensor_parallel=tp,
            gpu_memory_utilization=hardware.gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            block_size=block_size, max_model_len=max_model_len,
            kv_elem_bytes=KV_CACHE_DTYPE_BYTES.get(hardware.kv_cache_dtype),
        )  # fmt: skip
        budget = tp * release.num_gpu_blocks * release.block_bytes
    else:
        util = hardware.gpu_memory_utilization
        util = DEFAULT_GPU_MEMORY_UTILIZATION if util is None else util
        usable = util * gpu.memory_bytes
        weights = model.weight_bytes / tp
        act = activation_reserve_bytes(
            model, tp, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        )
        per_gpu = usable - weights - act
        if per_gpu <= 0:
            raise ConfigError(
                f"hardware: {model.name} does not fit on {tp} x {gpu.name}: per GPU "
                f"{util} x {gpu.memory_bytes / GIB:.2f} GiB "
                f"- weights {weights / GIB:.2f} GiB - activations {act / GIB:.2f} GiB "
                f"= {per_gpu / GIB:.2f} GiB of KV cache; raise hardware.tensor_parallel, "
                f"use a bigger GPU, or give hardware.kv_budget_gib"
            )
        budget = int(tp * per_gpu)
    slots = budget // kv_per_token if release is None else release.num_gpu_blocks * block_size
    if slots < 1:
        raise ConfigError(
            f"hardware: a KV budget of {budget} bytes holds no token of {model.name} "
            f"({kv_per_token} bytes per token)"
        )
    cpu_slots = int(swap_space_gib * GIB) // kv_per_token
    for name, count, keys in (
        ("KV pool", slots, "hardware.kv_slots / hardware.kv_budget_gib"),
        ("CPU swap space", cpu_slots, "allocator.swap_space_gib"),
    ):
        if count > MAX_POOL_SLOTS:
            raise ConfigError(
                f"hardware: a {name} of {count:,} token slots is too large to simulate "
                f"(limit {MAX_POOL_SLOTS:,}); lower {keys}"
            )
    return KVPool(
        kv_budget_bytes=budget,
        kv_bytes_per_token=kv_per_token,
        capacity_slots=slots,
        cpu_capacity_slots=int(swap_space_gib * GIB) // kv_per_token,
        model=model,
        gpu=gpu,
        release=release,
    )


#: What CUDA reports as a GPU's total memory (``torch.cuda.get_device_properties().total_memory``),
#: which vLLM v0.2 multiplies by ``gpu_memory_utilization``; less than the datasheet's.
#: A100-SXM4-80GB: 84,987,740,160 B (81,051 MiB), as NVIDIA's deviceQuery prints it (driver
#: and runtime 12.2; another driver reports 85,100,068,864 B, 0.13% more).
CUDA_TOTAL_MEMORY_BYTES = {"a100-80gb": 84_987_740_160}


@dataclass(frozen=True)
class ProfiledPool:
    """vLLM v0.2's KV pool and the terms of its profiling pass (:func:`vllm_v02_pool`)."""

    total_memory_bytes: int
    total_memory_source: str
    usable_bytes: float
    weight_bytes: int
    layer_transient_bytes: int
    sampler_transient_bytes: int
    peak_bytes: int
    block_bytes: int
    num_gpu_blocks: int
    num_cpu_blocks: int

    def terms(self) -> list[tuple[str, float, str]]:
        """(term, GiB, what it is) in the order of the formula."""
        return [
            ("total memory", self.total_memory_bytes / GIB, self.total_memory_source),
            ("x gpu_memory_utilization", self.usable_bytes / GIB, "what vLLM may use"),
            ("weights", self.weight_bytes / GIB, "the model's parameters, fp16"),
            (
                "largest layer transient",
                self.layer_transient_bytes / GIB,
                "one decoder layer's live tensors over the profiling tokens",
            ),
            (
                "sampler transient",
                self.sampler_transient_bytes / GIB,
                "the top-p/top-k sort over max_num_seqs x vocabulary, plus the last hidden states",
            ),
            (
                "peak (max_memory_allocated)",
                self.peak_bytes / GIB,
                "weights + the larger transient",
            ),
            (
                "KV cache",
                (self.num_gpu_blocks * self.block_bytes) / GIB,
                f"{self.num_gpu_blocks:,} blocks of {self.block_bytes:,} B",
            ),
        ]


def vllm_v02_pool(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    block_size: int,
    swap_space_gib: float,
) -> ProfiledPool:
    """The KV pool vLLM v0.2.3 gives itself (``Worker.profile_num_available_blocks``)::

        num_gpu_blocks = (total_memory x gpu_memory_utilization - peak) // block_bytes
        num_cpu_blocks = swap_space_bytes // block_bytes

    ``peak`` is ``torch.cuda.max_memory_allocated()`` after a profiling forward pass of
    ``max_num_seqs`` dummy prompts of ``max_num_batched_tokens // max_num_seqs`` tokens
    each, sampled with ``top_p = 0.99, top_k = vocabulary - 1`` (``ModelRunner.profile_run``),
    estimated here as the weights plus the larger of two transients (T tokens, N = max_num_seqs
    rows, V vocabulary, h hidden, f FFN width; OPT's layer, v0.2.3's ``sampler.py``):

    - a layer: the residual, fc1's output and the ReLU's output, ``T (h + 2 f)`` fp16
      values (the attention block's ``T (2 h + 3 h + h)`` when larger);
    - the sampler: at the sort's peak, the logits, their sorted copy, probabilities and
      their running sum (fp16), the sort's int64 indices and two boolean masks alive
      (``18 N V`` bytes), and ``argsort`` of the int64 indices (its sorted keys, its
      output indices, the original positions and the sort's alternate buffers: four int64
      arrays, ``32 N V`` bytes), plus the last layer's hidden states (``2 T h``).

    The CUDA context and what the allocator caches but has not allocated are not in
    ``max_memory_allocated``, as they are not in v0.2.3's formula. Only OPT's layer
    shape is modelled (the model this applies to); other architectures raise.
    """
    if model.arch != "opt":
        raise ConfigError(
            f"vLLM v0.2's profiling pass is modelled for OPT models, not {model.name!r}"
        )
    total = CUDA_TOTAL_MEMORY_BYTES.get(gpu.name)
    source = (
        "as CUDA reports it (deviceQuery)"
        if total is not None
        else "the datasheet's (CUDA's figure unknown)"
    )
    total = total if total is not None else int(gpu.memory_bytes)
    dt = model.dtype_bytes
    h, f, v = model.hidden_size, model.ffn_size, model.vocab_size
    tokens = max_num_seqs * (max_num_batched_tokens // max_num_seqs)
    rows = max_num_seqs
    layer = tokens * max(h + 2 * f, 6 * h) * dt
    sampler = rows * v * (18 + 32) + tokens * h * dt
    weights = int(model.weight_bytes)
    peak = weights + max(layer, sampler)
    block_bytes = block_size * kv_bytes_per_token_overall(model, 1)
    usable = total * gpu_memory_utilization
    blocks = int((usable - peak) // block_bytes)
    if blocks < 1:
        raise ConfigError(
            f"vLLM v0.2's profiling pass leaves no KV cache: {usable / GIB:.2f} GiB usable, "
            f"peak {peak / GIB:.2f} GiB"
        )
    return ProfiledPool(
        total_memory_bytes=total,
        total_memory_source=source,
        usable_bytes=usable,
        weight_bytes=weights,
        layer_transient_bytes=layer,
        sampler_transient_bytes=sampler,
        peak_bytes=peak,
        block_bytes=block_bytes,
        num_gpu_blocks=blocks,
        num_cpu_blocks=int(swap_space_gib * GIB) // block_bytes,
    )


@dataclass(frozen=True)
class V1Pool:
    """vLLM V1's KV pool (0.15, 0.19) and the terms of its profiling (:func:`vllm_v1_pool`)."""

    total_memory_bytes: int
    total_memory_source: str
    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    block_bytes: int
    num_gpu_blocks: int

    def terms(self) -> list[tuple[str, float, str]]:
        return [
            ("total memory (per GPU)", self.total_memory_bytes / GIB, self.total_memory_source),
            ("requested", self.requested_bytes / GIB, "ceil(total x gpu_memory_utilization)"),
            ("weights (per GPU)", self.weight_bytes / GIB, "the model's parameters / TP"),
            (
                "activation peak",
                self.activation_bytes / GIB,
                "a dummy forward of max_num_batched_tokens tokens, and the sampler over max_num_seqs",
            ),
            (
                "KV cache",
                self.num_gpu_blocks * self.block_bytes / GIB,
                f"{self.num_gpu_blocks:,} blocks of {self.block_bytes:,} B (all layers, per GPU)",
            ),
        ]


def vllm_v1_pool(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    tensor_parallel: int,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    block_size: int,
    total_memory_bytes: int | None = None,
) -> V1Pool:
    """The KV pool vLLM V1 gives itself, as the LLMServingSim validation page prints it (a run
    that names its release gets every term instead: :func:`pagesim.simulator.vllm_pool.
    release_pool`, which also counts the sampler's copies, non-torch memory and, from 0.21.0,
    CUDA graphs) (``Worker.determine_available_memory``,
    ``vllm/v1/worker/gpu_worker.py``; 0.19 and 0.15 alike by default)::

        available = ceil(total x gpu_memory_utilization) - weights - torch peak - non-torch
        num_gpu_blocks = available // (block bytes of one layer) // layers

    (usable blocks are one fewer: block 0 is V1's null block, the allocator's business).
    The torch peak of the profiling forward (``max_num_batched_tokens`` tokens, then the
    sampler over ``max_num_seqs`` rows) is estimated as the larger of a LLaMA layer's live
    tensors, ``T (2 h + 3 f / TP)`` values (the residual, the normalised copy, gate-up and
    the activation), and the sampler's logits, probabilities and log-probabilities,
    ``3 x seqs x vocab / TP`` fp32; the non-torch growth (NCCL, cuBLAS workspaces) is not
    estimated (0): the pool is an upper bound by that much. CUDA graphs are captured after
    the cache is allocated and are not subtracted (unless an environment variable asks).
    ``total_memory_bytes``: what CUDA reports, when the run recorded it."""
    tp = tensor_parallel
    total = int(total_memory_bytes) if total_memory_bytes else int(gpu.memory_bytes)
    source = (
        "as the run recorded it"
        if total_memory_bytes
        else "the GPU spec's (CUDA's figure not recorded)"
    )
    requested = math.ceil(total * gpu_memory_utilization)
    weights = int(model.weight_bytes // tp)
    h, f, dt = model.hidden_size, model.ffn_size, model.dtype_bytes
    layer = max_num_batched_tokens * (2 * h + 3 * f // tp) * dt
    sampler = 3 * max_num_seqs * (-(-model.vocab_size // tp)) * 4
    activation = max(layer, sampler)
    per_layer_block = block_size * 2 * model.num_kv_heads_per_gpu(tp) * model.head_dim * dt
    available = requested - weights - activation
    blocks = available // per_layer_block // model.num_layers
    if blocks < 1:
        raise ConfigError(
            f"vLLM V1's profiling leaves no KV cache: {requested / GIB:.2f} GiB requested, "
            f"{weights / GIB:.2f} GiB of weights, {activation / GIB:.2f} GiB of activations"
        )
    return V1Pool(
        total_memory_bytes=total,
        total_memory_source=source,
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=activation,
        block_bytes=per_layer_block * model.num_layers,
        num_gpu_blocks=int(blocks),
    )
