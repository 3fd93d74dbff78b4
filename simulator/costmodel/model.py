"""CostModel: the duration of one engine step, from a BatchPlan and a profile.

Rule (one step of a vLLM/Orca-style engine, eager PyTorch, one GPU or a TP group)::

    step = num_layers x [ sum of the layer's GEMMs over the step's T tokens
                          + prefill attention + decode attention (paged | contiguous)
                          [+ mixed_decode_attention(the decodes), paged steps that also prefill]
                          + kv_write(T) + pointwise(T) + 2 all-reduces (TP > 1) ]
         + LM head GEMM over the sequences that emit a token this step
         + num_layers x block_copy(copied blocks)
         + num_layers x (swap(in) + swap(out))
         + step_overhead(sequences, tokens)

Layer GEMMs (the TP shard one GPU runs; h = hidden, f = ffn, d = head dim):
OPT: QKV h -> 3h/TP, out h/TP -> h, fc1 h -> f/TP, fc2 f/TP -> h.
LLaMA (vLLM's fused layers): QKV h -> (heads + 2 kv_heads) d / TP, o heads d / TP -> h,
gate+up h -> 2f/TP, down f/TP -> h. LM head h -> vocab/TP (OPT's is tied to the
embedding; OPT-350M's 512-dim projection is ignored). Element-wise kernels (norms,
activation, residual adds, rotary embedding) are the ``pointwise`` term over the bytes
they move (:func:`.features.pointwise_elems_per_token`), an optional term: a profile
without it (the analytic one: there they sit in the GEMM launch constant and the step
overhead) charges nothing for it; the external profiles fit it on Vidur's tables. The
embedding lookup is not charged. ``mixed_decode_attention`` is optional too: vLLM V1 runs
a step's prompt chunks and decodes in one attention call, whose decodes run slower than
in a decode-only call; profiles imported from tables that time such calls
(``calibrate import --llmservingsim``) carry it, priced on the decodes' features; without
it a mixed step is the two attention terms' sum.

Every term's features come from :mod:`.features` and its time from the profile's
term (:meth:`Term.time_s`); a term whose work is zero (no prefill, no copies) is not
launched and costs nothing. An empty plan costs 0 s.

Tensor parallelism: heads and GEMM widths are sharded, and each layer adds two ring
all-reduces of the T x h activations over NVLink, analytic (no profile term):
``2 (TP - 1) / TP x bytes / nvlink_bw + ALLREDUCE_LATENCY_S`` (NCCL's ring bus
bandwidth; ~10 µs is NCCL's small-message all-reduce latency within a node). A server's
measured link (``hardware.link``: nccl-tests' bus bandwidth and small-message time) replaces
both (``link_bw_bytes_s``, ``allreduce_latency_s``).

Speed: :meth:`CostModel.step_time_s` runs once per simulated step. The plan carries
only totals (``BatchPlan``), so a step costs O(1) whatever its batch. The layer GEMM
total depends only on T and is memoised per T on the instance; a pure decode step
(most steps) takes a precomputed formula of the number of sequences, sum(context) and
sum(ceil(context / block)), bit-identical to the general sum; a step that only
prefills (vLLM's admissions) takes another, of the prompts' sufficient statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from mypy_extensions import mypyc_attr

from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.profile import COEFFICIENT_NAMES, Profile, Term
from pagesim.simulator.model_gpu_specs import GPUSpec, ModelSpec
from pagesim.simulator.plan import BatchPlan

ALLREDUCE_LATENCY_S: Final = 10e-6
#: most (sequences, tokens) pairs whose step overhead is memoised (prefills make many)
MAX_MEMO: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class _Coefs:
    """A Term's coefficients as attributes (no dict look-ups per call); same formula as Term.time_s."""

    const_s: float
    s_per_byte: float
    s_per_flop: float
    s_per_block: float
    s_per_seq: float
    s_per_token: float

    @classmethod
    def of(cls, term: Term) -> _Coefs:
        return cls(*(term.coef(name) for name in COEFFICIENT_NAMES))

    def time_s(self, f: F.Features) -> float:
        return (
            self.const_s
            + max(self.s_per_byte * f.bytes_, self.s_per_flop * f.flops)
            + self.s_per_block * f.blocks
            + self.s_per_seq * f.seqs
            + self.s_per_token * f.tokens
        )


def layer_gemm_shapes(model: ModelSpec, tensor_parallel: int) -> tuple[tuple[int, int], ...]:
    """(in, out) features of one layer's four GEMMs on one GPU of a TP group (module docstring)."""
    tp = tensor_parallel
    h, f, d = model.hidden_size, model.ffn_size, model.head_dim
    if model.arch == "opt":
        return ((h, 3 * h // tp), (h // tp, h), (h, f // tp), (f // tp, h))
    heads, kv_heads = model.num_heads // tp, model.num_kv_heads_per_gpu(tp)
    qkv = (heads + 2 * kv_heads) * d
    return ((h, qkv), (heads * d, h), (h, 2 * f // tp), (f // tp, h))


def lm_head_shape(model: ModelSpec, tensor_parallel: int) -> tuple[int, int]:
    """(in, out) features of the LM head GEMM on one GPU (vocabulary sharded over TP)."""
    return (model.hidden_size, -(-model.vocab_size // tensor_parallel))


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass it
class CostModel:
    """Step durations for one model on one GPU type (TP-sharded) under one profile."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        profile: Profile,
        *,
        tensor_parallel: int = 1,
        description: str = "",
        link_bw_bytes_s: float = 0.0,
        allreduce_latency_s: float = ALLREDUCE_LATENCY_S,
    ) -> None:
        tp = tensor_parallel
        self.model, self.gpu, self.profile, self.tensor_parallel = model, gpu, profile, tp
        #: the all-reduce's bus bandwidth and latency (0: the GPU spec's link)
        self.link_bw_bytes_s = link_bw_bytes_s or gpu.nvlink_bw_bytes_s
        self.allreduce_latency_s = allreduce_latency_s
        self.description = description or f"{profile.kind} profile of {profile.gpu_name}"
        self._num_heads = model.num_heads // tp
        self._num_kv_heads = model.num_kv_heads_per_gpu(tp)  # raises ConfigError if TP does not fit
        self._c = {name: _Coefs.of(profile.term(name)) for name in NEEDED_TERMS}
        for name in OPTIONAL_TERMS:
            self._c[name] = _Coefs.of(profile.terms.get(name, Term({})))
        self._has_mixed = "mixed_decode_attention" in profile.terms
        h, f, d = model.hidden_size, model.ffn_size, model.head_dim
        self._layer_gemm_shapes = layer_gemm_shapes(model, tp)
        self._lm_head_shape = lm_head_shape(model, tp)
        self._allreduce_bytes_per_token = h * model.dtype_bytes
        self._pointwise_elems_per_token = F.pointwise_elems_per_token(
            model.arch, h, f // tp, self._num_heads * d, self._num_kv_heads * d, model.has_qk_norm
        )
        self._kv_bytes_per_slot_layer = 2 * self._num_kv_heads * d * model.dtype_bytes
        self._layer_linear_cache: dict[int, float] = {}
        self._lm_head_cache: dict[int, float] = {}
        self._overhead_cache: dict[tuple[int, int], float] = {}
        self._decode_time_paged = self._decode_step_time_fn(is_paged=True)
        self._decode_time_contiguous = self._decode_step_time_fn(is_paged=False)
        self._prefill_time = self._prefill_step_time_fn()

    # ---- pieces ------------------------------------------------------------------------

    def layer_linear_time_s(self, num_tokens: int) -> float:
        """One layer's GEMMs, kv_write, element-wise kernels and all-reduces (memoised per T)."""
        cached = self._layer_linear_cache.get(num_tokens)
        if cached is not None:
            return cached
        dt = self.model.dtype_bytes
        gemm = self._c["gemm"]
        t = sum(gemm.time_s(F.gemm(num_tokens, k, n, dt)) for k, n in self._layer_gemm_shapes)
        t += self._c["kv_write"].time_s(
            F.kv_write(num_tokens, self._num_kv_heads, self.model.head_dim, dt)
        )
        t += self._c["pointwise"].time_s(
            F.pointwise(num_tokens, self._pointwise_elems_per_token, dt)
        )
        t += 2 * self.allreduce_time_s(num_tokens)
        self._layer_linear_cache[num_tokens] = t
        return t

    def allreduce_time_s(self, num_tokens: int) -> float:
        """One ring all-reduce of ``num_tokens`` x hidden activations over the link (0 without
        TP)."""
        tp = self.tensor_parallel
        if tp == 1:
            return 0.0
        num_bytes = num_tokens * self._allreduce_bytes_per_token
        return 2 * (tp - 1) / tp * num_bytes / self.link_bw_bytes_s + self.allreduce_latency_s

    def lm_head_time_s(self, num_seqs: int) -> float:
        """The LM head's GEMM over ``num_seqs`` rows (memoised per count)."""
        cached = self._lm_head_cache.get(num_seqs)
        if cached is None:
            k, n = self._lm_head_shape
            gemm = F.gemm(num_seqs, k, n, self.model.dtype_bytes)
            cached = self._lm_head_cache[num_seqs] = self._c["gemm"].time_s(gemm)
        return cached

    def step_overhead_time_s(self, num_seqs: int, num_tokens: int) -> float:
        """The per-step host overhead for ``num_seqs`` sequences and ``num_tokens`` tokens
        (memoised, up to ``MAX_MEMO`` pairs)."""
        key = (num_seqs, num_tokens)
        cached = self._overhead_cache.get(key)
        if cached is None:
            cached = self._c["step_overhead"].time_s(F.step_overhead(num_seqs, num_tokens))
            if len(self._overhead_cache) < MAX_MEMO:
                self._overhead_cache[key] = cached
        return cached

    def block_bytes_per_layer(self, block_size: int) -> int:
        """K and V of one block in one layer, on one GPU."""
        return block_size * self._kv_bytes_per_slot_layer

    def _decode_attention_features(self, num_seqs, total_ctx, num_blocks) -> F.Features:
        m = self.model
        return F.decode_attention_totals(
            num_seqs,
            total_ctx,
            num_blocks,
            self._num_heads,
            self._num_kv_heads,
            m.head_dim,
            m.dtype_bytes,
        )

    def _transfer_time_s(self, plan: BatchPlan) -> float:
        """Copy-on-write copies and swaps, all layers."""
        if not (
            plan.num_copied_blocks or plan.num_swapped_in_blocks or plan.num_swapped_out_blocks
        ):
            return 0.0
        t = 0.0
        block_bytes = self.block_bytes_per_layer(plan.block_size)
        if plan.num_copied_blocks:
            f = F.block_copy(plan.num_copied_blocks, block_bytes)
            t += self._c["block_copy"].time_s(f)
        for num_blocks in (plan.num_swapped_in_blocks, plan.num_swapped_out_blocks):
            if num_blocks:
                t += self._c["swap"].time_s(F.swap(num_blocks, block_bytes))
        return self.model.num_layers * t

    # ---- the step ----------------------------------------------------------------------

    def step_time_s(self, plan: BatchPlan) -> float:
        """Seconds one engine step takes (see the module docstring for the sum)."""
        if not (
            plan.num_copied_blocks or plan.num_swapped_in_blocks or plan.num_swapped_out_blocks
        ):
            num_prefill_seqs = plan.num_prefill_seqs
            num_decode = plan.num_decode_seqs
            if not num_prefill_seqs:
                if not num_decode:
                    return 0.0
                decode = self._decode_time_paged if plan.is_paged else self._decode_time_contiguous
                return decode(num_decode, plan.decode_context_sum, plan.decode_num_blocks)
            if not num_decode:
                return self._prefill_time(
                    num_prefill_seqs,
                    plan.num_prefill_tokens,
                    plan.prefill_context_sum,
                    plan.prefill_scores,
                )
        return self.summed_step_time_s(plan)

    def decode_time_fn(self, *, is_paged: bool = True) -> Callable[[int, int, int], float]:
        """``f(num_seqs, context_sum, num_blocks)``: ``step_time_s`` of a plan that only
        decodes ``num_seqs`` sequences over ``context_sum`` tokens in ``num_blocks``
        blocks (the same value, bit for bit), without building the plan; the engine's
        steady decode runs call it once a step."""
        return self._decode_time_paged if is_paged else self._decode_time_contiguous

    def summed_step_time_s(self, plan: BatchPlan) -> float:
        """The module docstring's sum, term by term (``step_time_s`` takes a precomputed
        formula for pure decode steps, equal to this bit for bit)."""
        if plan.is_empty:
            return 0.0
        m = self.model
        num_prefill_seqs = plan.num_prefill_seqs
        num_decode = plan.num_decode_seqs
        num_tokens = plan.num_prefill_tokens + num_decode
        layer = self.layer_linear_time_s(num_tokens) if num_tokens else 0.0
        if num_prefill_seqs:
            f = F.prefill_attention_totals(
                num_prefill_seqs,
                plan.num_prefill_tokens,
                plan.prefill_context_sum,
                plan.prefill_scores,
                self._num_heads,
                self._num_kv_heads,
                m.head_dim,
                m.dtype_bytes,
            )
            layer += self._c["prefill_attention"].time_s(f)
        if num_decode:
            if plan.is_paged:
                num_blocks = plan.decode_num_blocks
                coefs = self._c["paged_decode_attention"]
            else:
                num_blocks = num_decode  # one contiguous region per sequence
                coefs = self._c["contiguous_decode_attention"]
            f = self._decode_attention_features(num_decode, plan.decode_context_sum, num_blocks)
            layer += coefs.time_s(f)
            if num_prefill_seqs and plan.is_paged and self._has_mixed:
                # vLLM V1 runs the prompt chunks and the decodes in one attention call, in
                # which the decodes run slower (``mixed_decode_attention``, optional)
                layer += self._c["mixed_decode_attention"].time_s(f)
        t = m.num_layers * layer
        num_emitting = num_prefill_seqs + num_decode
        if num_emitting:
            t += self.lm_head_time_s(num_emitting)
        t += self._transfer_time_s(plan)
        t += self.step_overhead_time_s(plan.num_seqs, num_tokens)
        return t

    def _prefill_step_time_fn(self) -> Callable[[int, int, int, float], float]:
        """``f(num_seqs, num_tokens, context_sum, scores)``: the time of a step that only
        prefills (a plan's prefill fields; nothing decoded, copied or swapped), equal bit
        for bit to the general sum: the same operations in the same order on the same
        values (the attention's byte count is an integer, so its factors can be grouped;
        a prefill touches no blocks, a term the sum adds as ``s_per_block * 0.0``).
        vLLM's prefill steps take it."""
        m = self.model
        h, kvh = self._num_heads, self._num_kv_heads
        c = self._c["prefill_attention"]
        const, s_byte, s_flop = c.const_s, c.s_per_byte, c.s_per_flop
        no_blocks, s_seq, s_tok = c.s_per_block * 0.0, c.s_per_seq, c.s_per_token
        bytes_per_elem = m.head_dim * m.dtype_bytes
        flops_per_score = 4.0 * m.head_dim * h
        num_layers = m.num_layers
        layer_linear, lm_head, step_overhead = (
            self.layer_linear_time_s,
            self.lm_head_time_s,
            self.step_overhead_time_s,
        )

        def time_s(num_seqs: int, num_tokens: int, context_sum: int, scores: float) -> float:
            # F.prefill_attention_totals and _Coefs.time_s, inlined
            memory = s_byte * float((2 * num_tokens * h + 2 * context_sum * kvh) * bytes_per_elem)
            compute = s_flop * (flops_per_score * scores)
            attn = (
                const
                + (memory if memory >= compute else compute)
                + no_blocks
                + s_seq * float(num_seqs)
                + s_tok * float(num_tokens)
            )
            layer = layer_linear(num_tokens) if num_tokens else 0.0
            layer += attn
            t = num_layers * layer
            t += lm_head(num_seqs)
            t += 0.0  # no copies or swaps (_transfer_time_s)
            t += step_overhead(num_seqs, num_tokens)
            return t

        return time_s

    def _decode_step_time_fn(self, *, is_paged: bool) -> Callable[[int, int, int], float]:
        """``f(num_seqs, total_ctx, num_blocks)``: the time of a pure-decode step.

        Equal, bit for bit, to the general sum for a plan that only decodes (nothing
        prefilled, copied or swapped): the same operations in the same order (every
        feature is an integer-valued float, exact below 2**53, so precomputing their
        integer factors changes no rounding), with the per-``num_seqs`` terms memoised.
        Most steps of a run are pure decodes, so this is the cost model's hot path.
        """
        m = self.model
        h, kvh, d, dt = self._num_heads, self._num_kv_heads, m.head_dim, m.dtype_bytes
        c = self._c["paged_decode_attention" if is_paged else "contiguous_decode_attention"]
        const, s_byte, s_flop = c.const_s, c.s_per_byte, c.s_per_flop
        s_block, s_seq, s_tok = c.s_per_block, c.s_per_seq, c.s_per_token
        kv_per_ctx, qo_per_seq, flops_per_ctx = 2 * kvh * d * dt, 2 * h * d * dt, 4 * h * d
        num_layers = m.num_layers
        per_seqs: dict[int, tuple[float, float, float, int, float, float]] = {}

        def fixed_terms(num_seqs: int) -> tuple[float, float, float, int, float, float]:
            """What depends on ``num_seqs`` alone: the GEMMs, the LM head, the step
            overhead, and the attention's per-sequence bytes, sequence term and (for a
            contiguous cache, one region per sequence) block term."""
            fixed = per_seqs[num_seqs] = (
                self.layer_linear_time_s(num_seqs),
                self.lm_head_time_s(num_seqs),
                self.step_overhead_time_s(num_seqs, num_seqs),
                qo_per_seq * num_seqs,
                s_seq * float(num_seqs * h),
                s_block * float(num_seqs * kvh),
            )
            return fixed

        def time_s(num_seqs: int, total_ctx: int, num_blocks: int) -> float:
            linear, lm_head, step, qo_bytes, seq_term, region_term = per_seqs.get(
                num_seqs
            ) or fixed_terms(num_seqs)
            # max(memory, compute) as _Coefs.time_s takes it (the first of equal values)
            memory = s_byte * float(kv_per_ctx * total_ctx + qo_bytes)
            compute = s_flop * float(flops_per_ctx * total_ctx)
            attn = (
                const
                + (memory if memory >= compute else compute)
                + (s_block * float(num_blocks * kvh) if is_paged else region_term)
                + seq_term
                + s_tok * float(total_ctx)
            )
            return num_layers * (linear + attn) + lm_head + step

        return time_s


#: Terms every step may need; a profile must have them all (make_cost_model fills gaps).
NEEDED_TERMS = (
    "gemm",
    "prefill_attention",
    "paged_decode_attention",
    "contiguous_decode_attention",
    "kv_write",
    "block_copy",
    "swap",
    "step_overhead",
)

#: Terms a profile may leave out, at zero cost (the analytic profile folds the element-wise
#: kernels into its GEMM launch constant and step overhead; measured ones may not time them;
#: only profiles imported from tables that time mixed prefill + decode calls have
#: ``mixed_decode_attention``).
OPTIONAL_TERMS = ("pointwise", "mixed_decode_attention")
