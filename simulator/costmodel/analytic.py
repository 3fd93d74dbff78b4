"""The analytic (roofline) profile of a GPU spec, for GPUs nobody here has measured.

Every term is ``const_s + max(bytes / (HBM bandwidth x eff_bw), flops / (FP16 peak x
eff_flops)) + per-item costs``, with the efficiencies below. They are estimates of
what the paper-era kernels achieve, written down once; none was tuned by simulating a
paper figure, but one is taken from the paper: the paged decode kernel's overhead over
the contiguous one is set from §7.1's measurement (Figure 18a), so that figure is an input
here, not a result. A measured profile (``pagesim calibrate``) replaces all of them.

- GEMM (cuBLAS, FP16 tensor cores): 70% of peak FLOPs, 80% of HBM bandwidth — large
  cuBLAS GEMMs on A100/H100 run at 70–80% of the dense peak; memory-bound skinny
  GEMMs (decode) stream weights at ~80% of the datasheet bandwidth (STREAM-like
  copies reach 85–90%). 4 µs per launch.
- Prefill attention (xFormers / FlashAttention-style fused kernel): 50% of peak FLOPs
  (FlashAttention-2 reports 50–73% of A100 peak in the forward pass; the paper-era
  xFormers kernel was slower), 80% of bandwidth, 5 µs per launch.
- Decode attention, contiguous (FasterTransformer's masked MHA kernel): 70% of HBM
  bandwidth (one query per sequence: purely K/V-bandwidth bound), 5 µs per launch.
- Decode attention, paged: the paper (§7.1, Fig. 18a) measured its kernel 20–26%
  slower than FasterTransformer's. We split that into a bandwidth penalty of 1/1.15
  (block-table indirection, non-contiguous reads) and 0.5 ns per (block x KV head)
  of fixed per-block work (block-table lookup, a warp's loop iteration). At block
  size 16 on OPT-13B/A100 that is +22% over contiguous; at block size 1 it is 2.2x —
  the "small blocks lose to kernel inefficiency" of §7.2 follows from the per-block
  cost, not from a fitted figure.
- KV write (reshape_and_cache, a scatter): 50% of bandwidth, 3 µs per launch.
- Block copy (copy-on-write): 50% of bandwidth, 0.1 µs per block (one CUDA thread
  block per copied block and layer), 3 µs per launch.
- Swap over PCIe: 80% of the per-direction PCIe bandwidth (pinned-memory
  ``cudaMemcpyAsync`` reaches ~25 of 32 GB/s on Gen4 x16), plus 10 µs per block per
  layer: vLLM v0's ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block for K and
  one for V in every layer, and a small copy costs ~5 µs of driver and DMA setup. So
  per byte, a 16-token OPT-13B block (320 KiB per layer) swaps at 56% of the
  achievable PCIe rate, a 256-token block at 95% and a 1-token block at 7% (§7.3:
  swapping is costly at small block sizes).
- Element-wise kernels (the optional ``pointwise`` term: norms, activation, residual
  adds): no term here — their launches and traffic are folded into the GEMM launch
  constant and the step overhead estimate; profiles fitted on measurements may time them.
- Step overhead: 2 ms + 20 µs per scheduled sequence. The paper-era vLLM (v0.1–v0.2)
  ran scheduling, block-table building, input preparation, sampling and
  detokenisation in Python, and launched every kernel eagerly (no CUDA graphs), each
  step; the vLLM team's v0.6 performance notes (2024) report that such CPU work left
  the GPU idle for most of each decode step on small models. An order-of-magnitude
  estimate, documented as such; it does not depend on the GPU.
"""

from __future__ import annotations

from pagesim.simulator.costmodel.profile import Profile, Term
from pagesim.simulator.model_gpu_specs import GPUSpec

GEMM_EFF_FLOPS = 0.70
GEMM_EFF_BW = 0.80
GEMM_LAUNCH_S = 4e-6
PREFILL_ATTN_EFF_FLOPS = 0.50
PREFILL_ATTN_EFF_BW = 0.80
PREFILL_ATTN_LAUNCH_S = 5e-6
DECODE_ATTN_EFF_BW = 0.70
DECODE_ATTN_LAUNCH_S = 5e-6
PAGED_BW_PENALTY = 1.15
PAGED_S_PER_BLOCK_HEAD = 0.5e-9
KV_WRITE_EFF_BW = 0.50
KV_WRITE_LAUNCH_S = 3e-6
BLOCK_COPY_EFF_BW = 0.50
BLOCK_COPY_S_PER_BLOCK = 0.1e-6
BLOCK_COPY_LAUNCH_S = 3e-6
SWAP_EFF_PCIE = 0.80
SWAP_S_PER_BLOCK = 2 * 5e-6
STEP_OVERHEAD_S = 2e-3
STEP_OVERHEAD_S_PER_SEQ = 20e-6


def _term(**coefficients: float) -> Term:
    return Term(coefficients={k: v for k, v in coefficients.items() if v})


def analytic_profile(gpu: GPUSpec) -> Profile:
    """The roofline profile of ``gpu`` (kind "analytic"; see the module docstring)."""
    bw, peak, pcie = gpu.hbm_bw_bytes_s, gpu.fp16_flops, gpu.pcie_bw_bytes_s
    terms = {
        "gemm": _term(
            const_s=GEMM_LAUNCH_S,
            s_per_byte=1 / (bw * GEMM_EFF_BW),
            s_per_flop=1 / (peak * GEMM_EFF_FLOPS),
        ),
        "prefill_attention": _term(
            const_s=PREFILL_ATTN_LAUNCH_S,
            s_per_byte=1 / (bw * PREFILL_ATTN_EFF_BW),
            s_per_flop=1 / (peak * PREFILL_ATTN_EFF_FLOPS),
        ),
        "contiguous_decode_attention": _term(
            const_s=DECODE_ATTN_LAUNCH_S,
            s_per_byte=1 / (bw * DECODE_ATTN_EFF_BW),
        ),
        "paged_decode_attention": _term(
            const_s=DECODE_ATTN_LAUNCH_S,
            s_per_byte=PAGED_BW_PENALTY / (bw * DECODE_ATTN_EFF_BW),
            s_per_block=PAGED_S_PER_BLOCK_HEAD,
        ),
        "kv_write": _term(const_s=KV_WRITE_LAUNCH_S, s_per_byte=1 / (bw * KV_WRITE_EFF_BW)),
        "block_copy": _term(
            const_s=BLOCK_COPY_LAUNCH_S,
            s_per_byte=1 / (bw * BLOCK_COPY_EFF_BW),
            s_per_block=BLOCK_COPY_S_PER_BLOCK,
        ),
        "swap": _term(s_per_byte=1 / (pcie * SWAP_EFF_PCIE), s_per_block=SWAP_S_PER_BLOCK),
        "step_overhead": _term(const_s=STEP_OVERHEAD_S, s_per_seq=STEP_OVERHEAD_S_PER_SEQ),
    }
    notes = (
        f"roofline of the {gpu.name} datasheet: GEMM {GEMM_EFF_FLOPS:.0%} of FP16 peak / "
        f"{GEMM_EFF_BW:.0%} of HBM bandwidth; decode attention {DECODE_ATTN_EFF_BW:.0%} of "
        f"bandwidth, paged x{PAGED_BW_PENALTY} + {PAGED_S_PER_BLOCK_HEAD * 1e9:.1f} ns per "
        f"block and KV head; swap {SWAP_EFF_PCIE:.0%} of PCIe + "
        f"{SWAP_S_PER_BLOCK * 1e6:.0f} us per block and layer; step overhead "
        f"{STEP_OVERHEAD_S * 1e3:.0f} ms + {STEP_OVERHEAD_S_PER_SEQ * 1e6:.0f} us per sequence. "
        "Estimates, not measurements."
    )
    return Profile(kind="analytic", gpu_name=gpu.name, gpu_spec=gpu.name, terms=terms, notes=notes)
