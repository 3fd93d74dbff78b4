"""Model and GPU specs: the published sizes the KV pool and the cost model are built from.

Models are the Hugging Face ``config.json`` values of each checkpoint
(``facebook/opt-*``, ``huggyllama/llama-*``, ``meta-llama/Llama-2-*-hf``,
``meta-llama/Meta-Llama-3-8B``, ``meta-llama/Llama-3.1-8B``, ``Qwen/Qwen3-32B``; the last
two as LLMServingSim ships them verbatim, GitHub ``casys-kaist/LLMServingSim`` commit
5daddb2, ``configs/model/``). ``num_params`` is counted from that config, not typed
in: OPT ties its LM head to the token embedding and has learned positions
(``max_position_embeddings`` + 2 rows); LLaMA has a separate LM head, no biases and
RMSNorm. The counts agree with the published sizes (OPT-13B 12.85 B = 26 GB of fp16
weights, the paper's Table 1; Llama-2-70B 68.98 B; Llama-3-8B 8.03 B; Qwen3-32B 32.8 B,
its model card's "32.8B", 31.2 B without the embeddings).

- Llama-3.1-8B: the shapes of Llama-3-8B (32 layers, hidden 4,096, 32 heads, 8 KV heads,
  ffn 14,336, vocab 128,256, bf16); only its rotary scaling (``rope_type: llama3``,
  factor 8) and context length differ, which neither the KV pool nor the step time sees.
- Qwen3-32B: 64 layers, hidden 5,120, 64 heads of ``head_dim`` 128 (so the query width,
  8,192, is not the hidden size: the config sets ``head_dim`` explicitly), 8 KV heads,
  ffn 25,600, vocab 151,936, untied LM head, bf16, and an RMSNorm over each head's query
  and key (``has_qk_norm``: 2 x 128 weights a layer, and element-wise work the cost model
  charges in ``pointwise``).
- Not modelled: Qwen3-30B-A3B (mixture of experts, 128 experts, 8 routed per token). A
  dense spec would price every token through all experts' weights or none, so there is
  none; its KV size would be 2 x 48 layers x 4 KV heads x 128 x 2 B = 96 KiB a token.

GPUs are the NVIDIA datasheet numbers (SXM parts):

- A100 40GB / 80GB: HBM2 1,555 GB/s / HBM2e 2,039 GB/s; FP16 tensor core 312 TFLOPS
  dense; PCIe Gen4 x16 (datasheet 64 GB/s both ways: 32 GB/s per direction); NVLink 3
  600 GB/s both ways (300 GB/s per direction). "NVIDIA A100 Tensor Core GPU" datasheet.
- H100 SXM: HBM3 3.35 TB/s; FP16 tensor core 989.4 TFLOPS dense (1,979 with sparsity);
  PCIe Gen5 128 GB/s both ways (64 per direction); NVLink 4 900 GB/s both ways
  (450 per direction). "NVIDIA H100 Tensor Core GPU" datasheet.
- H200 (SXM): HBM3e 141 GB at 4.8 TB/s; compute, PCIe and NVLink as the H100 SXM.
  "NVIDIA H200 Tensor Core GPU" datasheet.
- GeForce RTX 4090 (AD102, 128 SMs): 24 GB GDDR6X, 384 bits at 21 Gbps = 1,008 GB/s;
  dense FP16/BF16 tensor core 165.2 TFLOPS with FP32 accumulate (the rate of vLLM's bf16
  GEMMs; 330.3 with FP16 accumulate, which GeForce parts run at twice the rate), "NVIDIA
  Ada GPU Architecture" whitepaper, appendix table of the RTX 4090; PCIe Gen4 x16,
  32 GB/s per direction; no NVLink (the GPU-to-GPU link is PCIe, so that is the rate an
  all-reduce gets). LLMServingSim's RTX 4090 timings (vLLM 0.19) reach 166 TFLOP/s on a
  2,048-token gate/up GEMM and 0.95 TB/s streaming its weights, i.e. these peaks.
- RTX PRO 6000 Blackwell Server Edition (GB202, 188 SMs): 96 GB GDDR7 with ECC,
  512 bits; 1,597 GB/s (the Server Edition's datasheet figure, and the one LLMServingSim's
  cluster configuration of this GPU uses; the Workstation Edition runs the memory at
  28 Gbps, 1,792 GB/s); dense FP16/BF16 tensor core 503.8 TFLOPS with FP32 accumulate
  (188 SMs x 1,024 FLOPs a clock x 2.617 GHz boost, the Blackwell RTX PRO datasheet; the
  Server Edition's sustained clock may be lower); PCIe Gen5 x16, 64 GB/s per direction;
  no NVLink. LLMServingSim's timings on it stream weights at 1.49 TB/s (93% of 1,597, as
  the RTX 4090 reaches 94% of its 1,008) and reach 417 TFLOP/s on a large GEMM.

``memory_bytes`` is the total the device reports (``torch.cuda.mem_get_info()[1]``,
``nvidia-smi``): A100-40GB 40,960 MiB, A100-80GB 81,920 MiB, H100 SXM 81,559 MiB,
H200 143,771 MiB, RTX 4090 25,250,627,584 B (the CUDA total vLLM 0.19 recorded in
LLMServingSim's RTX 4090 run, ``vllm/meta.json``; ``nvidia-smi`` says 24,564 MiB),
RTX PRO 6000 Blackwell Server Edition 97,887 MiB (``nvidia-smi``); vLLM's
``gpu_memory_utilization`` is a fraction of that total.
Link bandwidths are *per direction*, the rate one transfer (a swap, one ring step of an
all-reduce) can use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pagesim.errors import ConfigError

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, as far as memory and step time are concerned."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    num_params: int
    dtype_bytes: int = 2
    arch: Literal["opt", "llama"] = "opt"
    #: an RMSNorm over each head's query and key before rotary (Qwen3)
    has_qk_norm: bool = False
    #: the attention window of every layer, when the model is sliding-window throughout
    #: (Mistral-7B-v0.1: 4096; ``hf_config`` says what pagesim does with it); None: full
    sliding_window: int | None = None
    #: the Hugging Face ``model_type`` where ``arch`` does not imply it (``mistral``,
    #: ``qwen2``, ``gpt_neox``); empty: ``llama`` (``qwen3`` with q/k norms) or ``opt``
    model_type: str = ""

    @property
    def family(self) -> str:
        """The Hugging Face ``model_type``: vLLM picks its model runner by it."""
        if self.model_type:
            return self.model_type
        if self.arch == "opt":
            return "opt"
        return "qwen3" if self.has_qk_norm else "llama"

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers: 2 x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.dtype_bytes

    def num_kv_heads_per_gpu(self, tensor_parallel: int) -> int:
        """KV heads each GPU holds: split by TP, or replicated when TP > num_kv_heads.

        vLLM shards attention heads over the TP ranks; with fewer KV heads than ranks
        (GQA, e.g. Llama-2-70B's 8 on 16 GPUs) each KV head is replicated on
        ``TP / num_kv_heads`` ranks. Raises ConfigError when heads do not divide.
        """
        tp = tensor_parallel
        if tp < 1 or self.num_heads % tp:
            raise ConfigError(
                f"hardware.tensor_parallel={tp} must divide {self.name}'s {self.num_heads} attention heads"
            )
        if self.num_kv_heads % tp == 0:
            return self.num_kv_heads // tp
        if tp % self.num_kv_heads == 0:
            return 1
        raise ConfigError(
            f"hardware.tensor_parallel={tp} must divide, or be a multiple of, "
            f"{self.name}'s {self.num_kv_heads} KV heads"
        )


@dataclass(frozen=True)
class GPUSpec:
    """One GPU: memory, HBM bandwidth, dense FP16 tensor-core peak, link bandwidths (per direction).

    ``hbm_bw_bytes_s`` is the device memory's bandwidth whatever the memory (GDDR on the
    RTX parts); ``nvlink_bw_bytes_s`` is the GPU-to-GPU link, which is PCIe on GPUs without
    NVLink (the RTX parts)."""

    name: str
    memory_bytes: int
    hbm_bw_bytes_s: float
    fp16_flops: float
    pcie_bw_bytes_s: float
    nvlink_bw_bytes_s: float


def _opt(
    name: str, layers: int, hidden: int, heads: int, ffn: int, embed_dim: int | None = None
) -> ModelSpec:
    """OPT config: MHA, head_dim = hidden / heads, vocab 50,272, 2,048 positions, tied LM head.

    Per layer: QKV and out projections with biases (4 h^2 + 4 h), fc1/fc2 with biases
    (2 h ffn + ffn + h), two LayerNorms (4 h); plus token and position embeddings and
    the final LayerNorm. OPT-350M embeds in 512 dims and projects to/from the hidden
    size (``embed_dim``).
    """
    vocab, positions = 50272, 2048 + 2
    e = embed_dim or hidden
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * ffn + ffn + hidden + 4 * hidden
    params = vocab * e + positions * hidden + layers * per_layer + 2 * hidden
    if embed_dim is not None:
        params += 2 * embed_dim * hidden  # project_in / project_out
    return ModelSpec(
        name, layers, hidden, heads, heads, hidden // heads, ffn, vocab, params, 2, "opt"
    )


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    head_dim: int | None = None,
    has_qk_norm: bool = False,
) -> ModelSpec:
    """LLaMA config: no biases, RMSNorm, SwiGLU (gate, up, down), separate LM head, GQA when
    kv_heads < heads. ``head_dim`` defaults to hidden / heads (a config that sets it, like
    Qwen3's, may differ); ``has_qk_norm`` adds one RMSNorm weight vector of ``head_dim``
    for the queries and one for the keys per layer (Qwen3)."""
    head_dim = head_dim or hidden // heads
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    per_layer = attn + 3 * hidden * ffn + 2 * hidden + (2 * head_dim if has_qk_norm else 0)
    params = 2 * vocab * hidden + layers * per_layer + hidden
    return ModelSpec(
        name,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        ffn,
        vocab,
        params,
        2,
        "llama",
        has_qk_norm,
    )


def _models() -> dict[str, ModelSpec]:
    specs = [
        _opt("opt-125m", 12, 768, 12, 3072),
        _opt("opt-350m", 24, 1024, 16, 4096, embed_dim=512),
        _opt("opt-1.3b", 24, 2048, 32, 8192),
        _opt("opt-2.7b", 32, 2560, 32, 10240),
        _opt("opt-6.7b", 32, 4096, 32, 16384),
        _opt("opt-13b", 40, 5120, 40, 20480),
        _opt("opt-30b", 48, 7168, 56, 28672),
        _opt("opt-66b", 64, 9216, 72, 36864),
        _opt("opt-175b", 96, 12288, 96, 49152),
        _llama("llama-7b", 32, 4096, 32, 32, 11008, 32000),
        _llama("llama-13b", 40, 5120, 40, 40, 13824, 32000),
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000),
        # codellama/CodeLlama-34b-Instruct-hf's config.json: 48 layers, hidden 8192, 64 heads,
        # 8 KV heads, intermediate 22016, vocabulary 32000
        _llama("codellama-34b", 48, 8192, 64, 8, 22016, 32000),
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256),
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256),
        _llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, head_dim=128, has_qk_norm=True),
    ]
    return {s.name: s for s in specs}


def _gpus() -> dict[str, GPUSpec]:
    specs = [
        GPUSpec("a100-40gb", 40960 * MIB, 1555e9, 312e12, 32e9, 300e9),
        GPUSpec("a100-80gb", 81920 * MIB, 2039e9, 312e12, 32e9, 300e9),
        GPUSpec("h100-sxm", 81559 * MIB, 3.35e12, 989.4e12, 64e9, 450e9),
        GPUSpec("h200", 143771 * MIB, 4.8e12, 989.4e12, 64e9, 450e9),
        GPUSpec("rtx-4090", 25_250_627_584, 1008e9, 165.2e12, 32e9, 32e9),
        GPUSpec("rtx-pro-6000-server", 97887 * MIB, 1597e9, 503.8e12, 64e9, 64e9),
    ]
    return {s.name: s for s in specs}


#: Model name -> spec (read-only by convention: specs are frozen; do not add at run time).
MODELS: dict[str, ModelSpec] = _models()
#: GPU name -> spec.
GPUS: dict[str, GPUSpec] = _gpus()


def get_model(name: str) -> ModelSpec:
    """The spec ``hardware.model`` names: a shipped name (this table or a shipped config),
    a Hugging Face id, or the path of a config.json (``model_catalog.get_model``)."""
    if name in MODELS:
        return MODELS[name]
    from pagesim.simulator.model_catalog import get_model as from_catalog

    return from_catalog(name)


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise ConfigError(
            f"hardware.gpu: unknown GPU {name!r}; known GPUs: {sorted(GPUS)}"
        ) from None
