"""What a vLLM V1 release subtracts before its KV cache, term by term, per GPU.

Each rule was read in the release's own code (the PyPI wheels of 0.8.5, 0.10.2, 0.12.0,
0.14.0, 0.15.1, 0.19.0, 0.21.0, 0.22.0 and 0.23.0): ``vllm/v1/worker/gpu_worker.py``
(``init_device``, ``determine_available_memory``), ``vllm/utils/mem_utils.py``
(``MemorySnapshot``, ``memory_profiling``), ``vllm/v1/worker/gpu_model_runner.py`` and, from
0.22.0, ``vllm/v1/worker/gpu/model_runner.py`` (``profile_run``, ``_dummy_run``,
``_dummy_sampler_run``, ``profile_cudagraph_memory``), ``vllm/v1/sample/`` (the sampler),
``vllm/config/cache.py`` and ``vllm/envs.py`` (defaults). Releases between those read take the
rule of the nearest one read below them, except where a boundary is dated by a pull request;
``docs/vllm_versions.md`` has the table.

**What is requested** (``requested_memory``): ``total x gpu_memory_utilization`` (rounded
up from 0.14.0, ``v1/worker/utils.py request_memory``); ``total`` is what
``torch.cuda.mem_get_info`` reports (:data:`CUDA_TOTAL_BYTES`). The default utilisation is
0.9, and 0.92 from 0.21.0 (``config/cache.py``; vLLM PR #38284, which also turned the
CUDA-graph estimate on).

**What is subtracted** (``memory_profiling``: weights + torch peak increase + non-torch
increase, and from 0.21.0 the CUDA-graph estimate):

- weights: the parameters, ``num_params x dtype / TP`` (vLLM measures the bytes torch
  allocated while loading; its rotary cos/sin table, at most ``max_position_embeddings x
  head_dim x 2`` bytes, about 32 MiB for Llama-3.1, is not counted here);
- the torch peak of the profiling pass (:func:`torch_peak_bytes`): one forward of
  ``max_num_batched_tokens`` tokens spread over ``min(max_num_seqs, tokens)`` dummy requests,
  then the sampler over those requests' last tokens;
- non-torch growth (:func:`non_torch_bytes`): what the device lost outside torch's
  allocator between the worker's first memory snapshot and the end of profiling;
- CUDA graphs (:func:`cudagraph_bytes`), from 0.21.0 and only under the V1 model runner.

None of it is fitted to a logged pool; the constants with a figure name where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.model_gpu_specs import GIB, MIB, ModelSpec

Version = tuple[int, int, int]

#: total memory as ``torch.cuda.mem_get_info`` reports it, by pagesim GPU name
CUDA_TOTAL_BYTES = {
    # NVIDIA H100 80GB HBM3: 81,089 MiB (torch prints total_memory=81089MB; vLLM's logs of
    # 2025-2026 print "79.19 GiB"); another driver's deviceQuery prints 85,045,477,376 B
    # (GitHub thamada/nvidia-smi, nvsim/H100SXMx8_deviceQuery.py) and vLLM's logs of January
    # 2025 "79.22 GiB" (vLLM PR #12126): 0.02-0.04% apart, by driver
    "h100-sxm": 85_029_158_912,
    # A100-SXM4-80GB: NVIDIA's deviceQuery, driver and runtime 12.2 (simulator/memory.py)
    "a100-80gb": 84_987_740_160,
    # A100-SXM4-40GB: 42,505,273,344 B, the PagedAttention artifact's memory analyser
    # (simulator/spec.py HardwareSpec)
    "a100-40gb": 42_505_273_344,
    # RTX 4090: the CUDA total vLLM 0.19 recorded (LLMServingSim's RTX 4090 run, meta.json)
    "rtx-4090": 25_250_627_584,
}

#: streaming multiprocessors, for the Triton top-k/top-p buffer of 0.19-0.20 (one row of
#: vocabulary per program, ``min(SMs, rows)`` programs): the vendors' datasheets /
#: whitepapers (A100 108, H100 SXM and H200 132, RTX 4090 128, RTX PRO 6000 Blackwell 188)
NUM_SMS = {"a100-40gb": 108, "a100-80gb": 108, "h100-sxm": 132, "h200": 132, "rtx-4090": 128}
NUM_SMS_DEFAULT = 132

#: non-torch growth of a single-GPU worker from its first snapshot to the end of profiling
#: (kernels loaded on first use, cuBLAS handles): "0.07 GiB for non-torch memory", vLLM's
#: own log in vLLM PR #21489 (one GPU, the V1 worker of July 2025)
LAZY_NON_TORCH_BYTES = int(0.07 * GIB)
#: everything outside torch in a worker that counts it all (0.8.x: the CUDA context too):
#: "non_torch_memory=0.35GiB", vLLM's log in vLLM issue #10517 (RTX 3090, one GPU)
CONTEXT_NON_TORCH_BYTES = int(0.35 * GIB)
#: NCCL's device memory per GPU by TP size, as NVIDIA's aiconfigurator observed it
#: (``systems/h100_sxm.yaml``, ``misc.nccl_mem``, NCCL 2.27): allocated when a collective
#: first needs its channels (NCCL_RUNTIME_CONNECT, on by default since NCCL 2.22), i.e.
#: during the profiling pass's first large all-reduce
NCCL_BYTES = {2: 358_612_992, 4: 411_041_792, 8: 411_041_792}
#: vLLM's floor per captured CUDA graph ("at least 1 MiB per graph for driver overhead",
#: ``gpu_model_runner.profile_cudagraph_memory``)
CUDAGRAPH_MIN_BYTES = MIB

#: the V2 model runner is the default for these families (``config/vllm.py``,
#: ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``): Qwen3 from 0.22.0, Llama and Mistral too from
#: 0.23.0 (dense, unquantized models)
V2_RUNNER_FAMILIES = (((0, 23, 0), ("llama", "mistral", "qwen3")), ((0, 22, 0), ("qwen3",)))


@dataclass(frozen=True)
class Release:
    """The rules one release sizes its pool by (module doc and docs/vllm_versions.md)."""

    version: Version
    #: 0.8.x counts every byte outside torch (the CUDA context too) against the pool
    counts_context: bool
    #: up to 0.10.x the first snapshot precedes NCCL's initialisation
    snapshot_before_nccl: bool
    default_utilization: float
    rounds_up_request: bool
    applies_cudagraph_estimate: bool

    @classmethod
    def of(cls, version: Version) -> Release:
        return cls(
            version=version,
            counts_context=version < (0, 10, 0),
            snapshot_before_nccl=version < (0, 11, 0),
            default_utilization=0.92 if version >= (0, 21, 0) else 0.9,
            rounds_up_request=version >= (0, 14, 0),
            applies_cudagraph_estimate=version >= (0, 21, 0),
        )

    def uses_v2_runner(self, model: ModelSpec) -> bool:
        for since, families in V2_RUNNER_FAMILIES:
            if self.version >= since:
                return model.family in families
        return False

    def sampler(self, model: ModelSpec, num_rows: int) -> tuple[str, float]:
        """(path, bytes per logit) of the profiling pass's sampler, the bf16 logits the
        caller keeps included. Top-k = vocabulary - 1 and top-p = 0.9 on every row
        (``_dummy_sampler_run``), so the V1 runner filters:

        - sort (``apply_top_k_top_p``, 0.12-0.18; 0.8-0.10 without FlashInfer): the fp32
          copy (4), ``logits.sort`` (values 4 + int64 indices 8) and ATen's segmented sort's
          own buffers (``SortStable.cu``: int64 positions 8, cub's alternate keys and
          values 4 + 8; with fewer than 128 rows the full-sort path's two int2 arrays, a
          keys buffer and cub's alternates, 8 + 8 + 4 + 4 + 8): 2 + 4 + 12 + 20 = 38, or 50
          under 128 rows;
        - Triton (``topk_topp_triton.py``, 0.19-0.20, from 8 rows): in place, then softmax
          (4) and the exponential draws (4): 2 + 4 + 4 + 4 = 14, plus its cached buffer of
          ``min(SMs, rows)`` vocabulary rows in fp32 (:func:`torch_peak_bytes`);
        - FlashInfer (0.8-0.10 when installed, as in vLLM's images; the default from
          0.21.0): ``top_k_mask_logits`` (4) then softmax (4): 2 + 4 + 4 + 4 = 14;
        - V2 runner (``gpu/sample/sampler.py``): the fp32 copy only, the dummy batch
          carrying no top-k/top-p: 2 + 4 = 6.
        """
        if self.uses_v2_runner(model):
            return "v2 runner (no top-k/top-p at profiling)", 6.0
        v = self.version
        if v >= (0, 21, 0) or v < (0, 12, 0):
            return "FlashInfer top-k/top-p", 14.0
        if v >= (0, 19, 0) and num_rows >= 8:
            return "Triton top-k/top-p", 14.0
        return "sort top-k/top-p", 38.0 if num_rows >= 128 else 50.0


def forward_bytes(model: ModelSpec, tensor_parallel: int, num_tokens: int) -> int:
    """Live activations of one layer over ``num_tokens`` (the profiling forward's peak):
    the residual and the normalised input (2 h), then the larger of the MLP's (gate-up and
    its activation, 3 f / TP for a SwiGLU MLP; fc1 and its activation, 2 f / TP for OPT and
    GPT-NeoX) and the attention's (q, k, v and the output, (2 heads + 2 kv) d / TP)."""
    h, tp, d = model.hidden_size, tensor_parallel, model.head_dim
    mlp = (3 if model.arch == "llama" else 2) * model.ffn_size // tp
    attn = (2 * model.num_heads // tp + 2 * model.num_kv_heads_per_gpu(tp)) * d
    return num_tokens * (2 * h + max(mlp, attn)) * model.dtype_bytes


@dataclass(frozen=True)
class TorchPeak:
    """The profiling pass's torch peak above what was allocated before it, and its parts."""

    forward_bytes: int
    sampler_bytes: int
    sampler_path: str
    num_rows: int

    @property
    def bytes(self) -> int:
        return max(self.forward_bytes, self.sampler_bytes)


def torch_peak_bytes(
    release: Release,
    model: ModelSpec,
    *,
    gpu_name: str,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> TorchPeak:
    """The larger of the forward and the sampler phase (module doc). The sampler phase holds
    the forward's output (``tokens x hidden``), the rows' last hidden states and the dummy
    sampler's random copy of them (``2 rows x hidden``), and the logits of every row over the
    whole vocabulary (all-gathered on every TP rank) at :meth:`Release.sampler`'s bytes."""
    tokens = max_num_batched_tokens
    rows = min(max_num_seqs, tokens)
    path, per_logit = release.sampler(model, rows)
    h, v, dt = model.hidden_size, model.vocab_size, model.dtype_bytes
    sampler = int((tokens + 2 * rows) * h * dt + rows * v * per_logit)
    if path.startswith("Triton"):
        sms = NUM_SMS.get(gpu_name, NUM_SMS_DEFAULT)
        programs = min(sms, rows)
        sampler += min(1 << (programs - 1).bit_length(), sms) * v * 4
    return TorchPeak(forward_bytes(model, tensor_parallel, tokens), sampler, path, rows)


def non_torch_bytes(release: Release, tensor_parallel: int) -> tuple[int, str]:
    """Non-torch memory counted against the pool, and what it is (module doc's sources)."""
    nccl = NCCL_BYTES.get(tensor_parallel, NCCL_BYTES[8]) if tensor_parallel > 1 else 0
    if release.counts_context:
        return CONTEXT_NON_TORCH_BYTES + nccl, "CUDA context, loaded kernels and NCCL"
    what = "NCCL at its first collective, " if nccl else ""
    return LAZY_NON_TORCH_BYTES + nccl, what + "kernels loaded on first use"


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default capture sizes (``config/vllm.py``): 1, 2, 4, then by 8 to 248, then by
    16 from 256, up to ``min(2 x max_num_seqs, 512, max_num_batched_tokens)``."""
    largest = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(largest + 1, 256), 8)) + list(range(256, largest + 1, 16))
    return sizes


def cudagraph_bytes(
    release: Release, model: ModelSpec, *, tensor_parallel: int, max_num_seqs: int,
    max_num_batched_tokens: int,
) -> int:  # fmt: skip
    """The CUDA-graph estimate subtracted from 0.21.0 under the V1 runner (the V2 runner's
    ``profile_cudagraph_memory`` returns 0 at 0.23.0). vLLM captures the two largest graphs of
    each mode and counts the first capture plus the second one's growth per further graph;
    this takes the first capture as the forward's activations at the largest size and each
    further graph at vLLM's 1 MiB floor: a lower bound (no logged point checks it)."""
    if not release.applies_cudagraph_estimate or release.uses_v2_runner(model):
        return 0
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens)
    full = [s for s in sizes if s <= max_num_seqs]  # FULL_AND_PIECEWISE: decode graphs
    first = forward_bytes(model, tensor_parallel, sizes[-1])
    return first + (len(sizes) - 1 + max(len(full) - 1, 0)) * CUDAGRAPH_MIN_BYTES
