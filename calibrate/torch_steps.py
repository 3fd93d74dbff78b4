"""Whole engine steps of real model shapes on this GPU, through PyTorch and CUDA graphs.

``pagesim calibrate steps`` (and ``benchmarks/gpu_iterations.py``, the same code; the
options are ``calibrate.cli.steps_arguments``). Needs PyTorch, which pagesim does not
depend on (``pip install torch``; GPU machines with a serving stack have it). For each model entry (``NAME`` or ``NAME@tpN``: one GPU's shard of
a TP-N group, which runs no all-reduce) it builds the shard with random fp16 weights and
times whole forward passes at the step shapes of :func:`pagesim.calibrate.iterations.plan_steps`
(what each row of the table means: that module's docstring). Each step is captured as a
CUDA graph once (after one uncaptured run) and replayed between CUDA events (three
replays first, the last one timed to size the count; then at least five timed, at most
``--repeats``); the median and interquartile range go to the CSV, one line per shape is
printed. A model whose weights do not fit, or a shape that fails, is
reported and skipped; the budget stops a model's grid (``--budget-s`` over all models,
split evenly), so the table always holds what was timed.

``--compile`` is a diagnostic: a few Llama-shaped steps (every planned one with
``--full-grid``), each timed twice, with the layer as written and through
``torch.compile`` (element-wise kernels fused, as vLLM V1 compiles its models); the
``attention`` column then says ``eager`` or ``compiled``.

``--device cpu`` runs the same forward passes without graphs or CUDA events (wall-clock
times, a handful of small shapes): a check of the code on a machine without a GPU, whose
times mean nothing.

Nothing here is fitted: ``pagesim calibrate iterations TABLE --gpu SPEC`` fits an
iteration-level profile on the table (its TP-1 rows, or ``--model``'s at its TP).
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import statistics
import time
import traceback

from pagesim.calibrate import iterations
from pagesim.errors import ConfigError


class Shard:
    """One GPU's shard of a Llama-architecture model: weights per layer, the forward pass."""

    def __init__(self, torch, model, tp: int, device: str, num_layers: int | None = None):
        self.torch, self.dev = torch, device
        self.h = model.hidden_size
        self.nh = model.num_heads // tp
        self.nkv = model.num_kv_heads_per_gpu(tp)
        self.d = model.head_dim
        self.ffn = model.ffn_size // tp
        self.vocab = -(-model.vocab_size // tp)
        self.layers = num_layers or model.num_layers
        half = torch.float16

        def weight(*shape):
            w = torch.empty(*shape, dtype=half, device=device)
            return w.normal_(0.0, 1.0 / math.sqrt(shape[0]))

        qkv = (self.nh + 2 * self.nkv) * self.d
        self.w = [
            {
                "norm1": torch.ones(self.h, dtype=half, device=device),
                "qkv": weight(self.h, qkv),
                "o": weight(self.nh * self.d, self.h),
                "norm2": torch.ones(self.h, dtype=half, device=device),
                "gate_up": weight(self.h, 2 * self.ffn),
                "down": weight(self.ffn, self.h),
            }
            for _ in range(self.layers)
        ]
        self.final_norm = torch.ones(self.h, dtype=half, device=device)
        self.layer = self._layer
        self.lm_head = weight(self.h, self.vocab)

    def weight_bytes(self) -> int:
        per_layer = sum(t.numel() for t in self.w[0].values()) * 2
        return per_layer * self.layers + self.lm_head.numel() * 2

    def kv_cache(self, batch: int, context: int):
        """Per layer, K and V [batch, kv_heads, context, head_dim] (random: values do not
        change the time)."""
        t = self.torch
        shape = (batch, self.nkv, context, self.d)
        return [
            (t.randn(shape, dtype=t.float16, device=self.dev), t.randn(shape, dtype=t.float16, device=self.dev))
            for _ in range(self.layers)
        ]  # fmt: skip

    def rotary(self, positions):
        t = self.torch
        inv = 1.0 / (10000 ** (t.arange(0, self.d, 2, device=self.dev, dtype=t.float32) / self.d))
        freqs = positions.to(t.float32)[:, None] * inv[None, :]
        return t.cos(freqs).to(t.float16), t.sin(freqs).to(t.float16)

    def _rope(self, x, cos, sin):
        # x [tokens, heads, d]; rotate halves (GPT-NeoX style, as vLLM's Llama)
        x1, x2 = x.chunk(2, dim=-1)
        c, s = cos[:, None, :], sin[:, None, :]
        return self.torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def _layer(self, x, w, kc, vc, cos, sin, batch, new, start, context, sdpa):
        """One decoder layer (the body ``forward`` runs per layer; compiled with --compile)."""
        F = self.torch.nn.functional  # noqa: N806 - PyTorch's convention
        eps = 1e-5
        hs = F.rms_norm(x, (self.h,), w["norm1"], eps)
        qkv = hs @ w["qkv"]
        q, k, v = qkv.split([self.nh * self.d, self.nkv * self.d, self.nkv * self.d], dim=-1)
        q = self._rope(q.view(-1, self.nh, self.d), cos, sin)
        k = self._rope(k.view(-1, self.nkv, self.d), cos, sin)
        v = v.view(-1, self.nkv, self.d)
        # [batch, kv_heads, new, d] into the cache
        kc[:, :, start:context].copy_(k.view(batch, new, self.nkv, self.d).transpose(1, 2))
        vc[:, :, start:context].copy_(v.view(batch, new, self.nkv, self.d).transpose(1, 2))
        qh = q.view(batch, new, self.nh, self.d).transpose(1, 2)
        attn = sdpa(qh, kc[:, :, :context], vc[:, :, :context], new > 1)
        attn = attn.transpose(1, 2).reshape(batch * new, self.nh * self.d)
        x = x + attn @ w["o"]
        hs = F.rms_norm(x, (self.h,), w["norm2"], eps)
        gate, up = (hs @ w["gate_up"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ w["down"]

    def forward(self, x, cos, sin, caches, batch: int, new: int, context: int, sdpa):
        """One step: ``x`` [batch * new, hidden]; K/V of the new tokens written at
        positions context - new .. context - 1; attention over the first ``context``."""
        F = self.torch.nn.functional  # noqa: N806 - PyTorch's convention
        eps = 1e-5
        start = context - new
        for w, (kc, vc) in zip(self.w, caches, strict=True):
            x = self.layer(x, w, kc, vc, cos, sin, batch, new, start, context, sdpa)
        last = x.view(batch, new, self.h)[:, -1]
        logits = F.rms_norm(last, (self.h,), self.final_norm, eps) @ self.lm_head
        return logits.argmax(dim=-1)


def plain_sdpa(torch, q, k, v, causal: bool, gqa: bool):
    """SDPA with PyTorch's own choice of backend (traceable by torch.compile)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=gqa
    )


def make_sdpa(torch, nh: int, nkv: int):
    """SDPA restricted to FlashAttention where it takes the call, else PyTorch's choice;
    a decode step's query heads of one KV head go in as that head's queries (FlashAttention
    runs grouped decode so), a prefill's through ``enable_gqa``. Returns (fn, name)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional  # noqa: N806
    group = nh // nkv
    #: per phase, the backend that ran (flash_attention until it refuses a call)
    state = {"prefill": "flash_attention", "decode": "flash_attention"}

    def attend(q, k, v, causal: bool):
        if not causal and group > 1:  # decode: [b, nh, 1, d] -> [b, nkv, group, d]
            b, _, _, d = q.shape
            out = call("decode", q.reshape(b, nkv, group, d), k, v, False, {})
            return out.reshape(b, nh, 1, d)
        phase = "prefill" if causal else "decode"
        return call(phase, q, k, v, causal, {"enable_gqa": True} if group > 1 else {})

    def call(phase, q, k, v, causal, extra):
        if state[phase] == "flash_attention":
            try:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
            except RuntimeError:
                state[phase] = "default"
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)

    return attend, state


def time_step(torch, shard, shape, sdpa, repeats: int, on_gpu: bool) -> tuple[float, float, int]:
    """Median and IQR (s) of ``repeats`` replays of one captured step."""
    tokens = shape.batch * shape.new_tokens
    dev = shard.dev
    x = torch.randn(tokens, shard.h, dtype=torch.float16, device=dev)
    pos = torch.arange(shape.context - shape.new_tokens, shape.context, device=dev)
    cos, sin = shard.rotary(pos.repeat(shape.batch))
    caches = shard.kv_cache(shape.batch, shape.context)
    run = lambda: shard.forward(  # noqa: E731
        x, cos, sin, caches, shape.batch, shape.new_tokens, shape.context, sdpa
    )
    times: list[float] = []
    if on_gpu:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        for _ in range(2):
            graph.replay()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        first = start.elapsed_time(end) / 1e3
        # at least 5 replays, at most --repeats, about a second and a half of them
        for _ in range(max(5, min(repeats, int(1.5 / max(first, 1e-6))))):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        del graph
    else:
        run()
        for _ in range(repeats):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0], len(times)


def run(args: argparse.Namespace, name: str = "calibrate steps") -> int:
    """Time the steps (module docstring) into ``args.out``; a bad option raises ConfigError."""
    entries = args.models or list(iterations.DEFAULT_MODELS)
    try:  # every entry checked before a GPU second is spent
        models = [(entry, *iterations.parse_model(entry)) for entry in entries]
    except Exception as exc:  # noqa: BLE001 - the catalogue's message names the known models
        raise ConfigError(f"{name}: --models: {exc}") from None
    other = [entry for entry, model, _ in models if model.arch != "llama"]
    if other:
        raise ConfigError(
            f"{name}: --models: {other[0]} is not of the Llama architecture (RMSNorm, gated "
            "MLP), the only one this forward builds"
        )
    try:
        import torch
    except ImportError:
        raise ConfigError(
            f"{name}: needs PyTorch (pip install torch), which pagesim does not depend on"
        ) from None
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise ConfigError(f"{name}: no CUDA GPU visible to PyTorch (--device cpu checks the code)")
    if on_gpu:
        print(f"{name}: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}", flush=True)  # fmt: skip
        free, total = torch.cuda.mem_get_info()
        print(f"{name}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free", flush=True)
        shapes = iterations.plan_steps()
        if args.compile and not args.full_grid:
            shapes = iterations.plan_steps((1, 8, 32, 64), (512,), (1,), (512,))
        if args.compile:  # one compiled graph per shape: past the limit Dynamo runs eager
            for key in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, key):
                    setattr(torch._dynamo.config, key, 4 * len(shapes))
    else:
        shapes = iterations.plan_steps((1, 2), (8, 16), (1, 2), (4, 8))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    per_model = args.budget_s / len(models)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(iterations.COLUMNS))
        writer.writeheader()
        for entry, model, tp in models:
            started = time.perf_counter()
            try:
                shard = Shard(torch, model, tp, args.device, None if on_gpu else 2)
            except Exception as exc:  # noqa: BLE001 - out of memory: say so, go on
                print(f"{entry}: not built ({' '.join(str(exc).split())[:200]})", flush=True)
                continue
            sdpa, backend = make_sdpa(torch, shard.nh, shard.nkv)
            print(f"{entry}: {shard.layers} layers, {shard.nh}/{shard.nkv} heads, "
                  f"{shard.weight_bytes() / 1e9:.1f} GB of weights", flush=True)  # fmt: skip
            timed = failures = 0
            for shape in shapes:
                if time.perf_counter() - started > per_model:
                    print(f"{entry}: budget of {per_model:.0f} s spent after {timed} of "
                          f"{len(shapes)} shapes", flush=True)  # fmt: skip
                    break
                for variant in ("eager", "compiled") if args.compile else ("",):
                    attend = sdpa
                    if variant:  # plain SDPA: PyTorch picks FlashAttention for these shapes
                        shard.layer = shard._layer
                        attend = functools.partial(plain_sdpa, torch, gqa=shard.nh != shard.nkv)
                    if variant == "compiled":
                        shard.layer = torch.compile(shard._layer, dynamic=False)
                    timed, failures = _one(
                        torch, shard, shape, attend, args, on_gpu, writer, f, entry, model, tp,
                        backend, variant, timed, failures,
                    )  # fmt: skip
            del shard
            if on_gpu:
                torch.cuda.empty_cache()
    print(f"{name}: table -> {args.out}", flush=True)
    return 0


def _one(torch, shard, shape, sdpa, args, on_gpu, writer, f, entry, model, tp, backend,
         variant, timed, failures):  # fmt: skip
    """Time one shape (one variant), write its row; (shapes timed, failures) after it."""
    try:
        med, iqr, n = time_step(torch, shard, shape, sdpa, args.repeats, on_gpu)
    except Exception as exc:  # noqa: BLE001 - reported; the next shape may run
        if not failures:
            traceback.print_exc()
        print(f"{entry} {variant} {shape}: failed ({' '.join(str(exc).split())[:200]})",
              flush=True)  # fmt: skip
        if on_gpu:
            torch.cuda.empty_cache()
        return timed, failures + 1
    label = variant or backend[shape.phase]
    writer.writerow({
        "model": model.name, "tensor_parallel": tp, "phase": shape.phase,
        "batch": shape.batch, "new_tokens": shape.new_tokens,
        "context": shape.context, "median_s": f"{med:.9g}", "iqr_s": f"{iqr:.9g}",
        "repeats": n, "attention": label,
    })  # fmt: skip
    f.flush()
    print(f"{entry} {shape.phase:7} b{shape.batch:<4} new {shape.new_tokens:<5} "
          f"ctx {shape.context:<5} {med * 1e3:9.3f} ms  iqr {iqr * 1e6:7.1f} us  "
          f"{label}", flush=True)  # fmt: skip
    return timed + 1, failures
