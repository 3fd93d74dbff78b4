"""A tuned reference beside pagesim's own kernels: PyTorch's attention and matmul on this GPU.

    python benchmarks/gpu_reference.py [--out reference.csv] [--model opt-13b] [--repeats 20]

Needs a CUDA GPU and PyTorch (not a pagesim dependency; the GPU machines have it). Times,
with CUDA events around each call and the L2 cache flushed before it as `pagesim
calibrate` does, at the model's attention shapes (heads, KV heads, head dim, fp16):

- decode attention, one query token per sequence over a contiguous K/V of ``context``
  tokens, every sequence the same length, through ``scaled_dot_product_attention``
  restricted to FlashAttention (else the memory-efficient kernel; the CSV names which), at the batch
  sizes and contexts of the calibration's ``opt-13b's shapes`` table;
- causal prefill attention of one sequence of ``length`` tokens;
- the model's four GEMMs (QKV, output projection, FFN up and down) at several token counts
  through ``torch.matmul`` (cuBLAS, as CuPy's matmul).

Prints one line per shape (µs, K/V GB/s or TFLOP/s) and writes them as CSV: the figures
docs/calibration.md sets beside the measured profile's. Nothing here is fitted.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DECODE_BATCHES = (1, 4, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (64, 256, 1024, 2048, 4096)
PREFILL_LENGTHS = (128, 512, 1024, 2048, 4096)
GEMM_TOKENS = (1, 16, 64, 256, 1024, 4096)
#: bytes of the buffer written to evict the L2 cache before each timed call (H100: 50 MiB)
FLUSH_BYTES = 256 * 2**20


def model_dims(name: str) -> dict[str, int]:
    """Heads, KV heads, head dim, hidden and FFN size of a model in pagesim's catalogue
    (imported from the sources, as ``tasks.py gpu-calibrate`` runs them: no install)."""
    sys.path.insert(0, str(ROOT))
    import pagesim

    if str(ROOT) not in pagesim.__path__:
        pagesim.__path__.append(str(ROOT))
    from pagesim.simulator.model_gpu_specs import get_model

    m = get_model(name)
    return {"heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
            "hidden": m.hidden_size, "ffn": m.ffn_size}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reference.csv"))
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention
    except ImportError:
        sys.exit("gpu_reference: needs PyTorch (pip install torch), which pagesim does not")
    if not torch.cuda.is_available():
        sys.exit("gpu_reference: no CUDA GPU visible to PyTorch")
    dims = model_dims(args.model)
    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=dev)

    def time_us(fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.repeats):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)

    h, kvh, d = dims["heads"], dims["kv_heads"], dims["head_dim"]
    gqa = {"enable_gqa": True} if kvh != h else {}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attention(q, k, v, causal: bool) -> tuple[float, str]:
        """Time SDPA restricted to FlashAttention, else to the memory-efficient kernel."""
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)  # noqa: E731
                    return time_us(fn), backend.name.lower()
            except RuntimeError:
                continue
        return time_us(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
        ), "default"

    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        rate = f"{row['GBs']:.0f} GB/s" if row["GBs"] else f"{row['TFLOPs']:.1f} TFLOP/s"
        print(
            f"{row['op']:9} {row['shape']:24} {row['backend']:19} {row['us']:10.1f} us  {rate}",
            flush=True,
        )

    print(f"gpu_reference: {torch.cuda.get_device_name()} torch {torch.__version__}, "
          f"model {args.model} {dims}", flush=True)  # fmt: skip
    for batch in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            q = torch.randn(batch, h, 1, d, dtype=torch.float16, device=dev)
            k = torch.randn(batch, kvh, ctx, d, dtype=torch.float16, device=dev)
            v = torch.randn_like(k)
            us, backend = attention(q, k, v, causal=False)
            kv_bytes = 2 * batch * kvh * ctx * d * 2
            emit({"op": "decode", "shape": f"batch {batch} context {ctx}", "backend": backend,
                  "batch": batch, "tokens": ctx, "us": us, "GBs": kv_bytes / us / 1e3, "TFLOPs": 0.0})  # fmt: skip
            del q, k, v
    for length in PREFILL_LENGTHS:
        q = torch.randn(1, h, length, d, dtype=torch.float16, device=dev)
        k = torch.randn(1, kvh, length, d, dtype=torch.float16, device=dev)
        v = torch.randn_like(k)
        us, backend = attention(q, k, v, causal=True)
        flops = 4 * h * d * length * length / 2  # QK^T and PV over the causal half
        emit({"op": "prefill", "shape": f"length {length}", "backend": backend, "batch": 1, "tokens": length,
              "us": us, "GBs": 0.0, "TFLOPs": flops / us / 1e6})  # fmt: skip
    hid, ffn = dims["hidden"], dims["ffn"]
    gemms = {
        "qkv": (hid, hid + 2 * kvh * d),
        "out": (hid, hid),
        "up": (hid, ffn),
        "down": (ffn, hid),
    }
    for tokens in GEMM_TOKENS:
        for name, (kdim, ndim) in gemms.items():
            a = torch.randn(tokens, kdim, dtype=torch.float16, device=dev)
            b = torch.randn(kdim, ndim, dtype=torch.float16, device=dev)
            us = time_us(lambda a=a, b=b: torch.matmul(a, b))
            emit({"op": f"gemm_{name}", "shape": f"{tokens}x{kdim}x{ndim}", "backend": "cublas",
                  "batch": tokens,
                  "tokens": tokens, "us": us, "GBs": 0.0,
                  "TFLOPs": 2 * tokens * kdim * ndim / us / 1e6})  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"gpu_reference: {len(rows)} shapes -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
