"""Iteration-level cost: one fitted term for a whole engine step, for whole-iteration timings.

Some published measurements time whole engine iterations, not operators (Splitwise's
``perf_model.csv``: a prefill iteration of ``b`` prompts, a decode iteration of ``b``
sequences, everything included: all layers, LM head, all-reduces, sampling, the serving
framework's per-step work). They cannot be split into the operator terms honestly (one
number per step, many terms), so a profile fitted on them has two *iteration-level*
terms instead, each of the same roofline-plus-linear form as every term
(:class:`~pagesim.simulator.costmodel.profile.Term`), over the features of the whole step
on one GPU of the TP group:

- ``prefill_iteration``: a step that prefills (also a mixed prefill + decode step);
- ``decode_iteration``: a step that only decodes.

Features of a step (:func:`step_features`; one GPU, summed over all layers):
bytes and FLOPs of the layer GEMMs over the step's T tokens, of prefill attention and of
decode attention (:mod:`.features`, the per-layer formulas), times ``num_layers``, plus the
LM head over the sequences that emit a token; ``seqs`` = sequences in the step, ``tokens``
= T. So ``const_s`` is the per-step fixed cost (launches, scheduling, sampling),
``s_per_token`` what grows with tokens beyond the roofline (all-reduces, element-wise
kernels), and the roofline side the step's GEMMs and attention together.

:class:`IterationCostModel` evaluates such a profile: ``step = term(step_features) +
transfers`` (copy-on-write copies and swaps from the profile's ``block_copy``/``swap``
terms, which ``make_cost_model`` fills from the analytic profile). Tensor parallelism is in
the features (per-GPU shards); the all-reduces are inside the measured time, so none is
added, unless the profile says its steps hold none (``allreduce_in_steps: no`` in its
``software``: whole steps timed on one GPU by ``calibrate/iterations.py``); then two analytic
NVLink all-reduces per layer are added at TP > 1, as the operator-level model adds them.

A profile fitted on several models' steps per layer (``iteration_scale: per_layer`` in its
``software``, ``calibrate/per_layer_steps.py``) holds one layer's constant, per-sequence and
per-token costs: they are multiplied by the priced model's layer count
(:func:`per_layer_coefs`), so one such profile prices any dense model on its GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from pagesim.simulator.costmodel import features as F
from pagesim.simulator.costmodel.model import (
    ALLREDUCE_LATENCY_S,
    CostModel,
    _Coefs,
    layer_gemm_shapes,
    lm_head_shape,
)
from pagesim.simulator.model_gpu_specs import ModelSpec
from pagesim.simulator.plan import BatchPlan

ITERATION_TERMS = ("prefill_iteration", "decode_iteration")
#: ``Profile.software`` key of a profile fitted on several models' steps per layer
#: (``calibrate/per_layer_steps.py``): its constant, per-sequence and per-token (and
#: per-block) coefficients are one layer's, multiplied here by the model's layer count
ITERATION_SCALE_KEY = "iteration_scale"
PER_LAYER = "per_layer"
#: ``Profile.software`` key of a profile whose steps were timed on one GPU without the
#: all-reduces (``calibrate/iterations.py``): at TP > 1 they are added, analytic, per layer
ALLREDUCE_KEY = "allreduce_in_steps"


def steps_hold_allreduce(profile) -> bool:
    """Whether an iteration-level profile's fitted steps include the TP all-reduces
    (Splitwise's do; pagesim's one-GPU timings say ``allreduce_in_steps: no``)."""
    return str(profile.software.get(ALLREDUCE_KEY, "yes")).lower() != "no"


def is_per_layer(profile) -> bool:
    """Whether an iteration-level profile's coefficients are one layer's
    (:data:`ITERATION_SCALE_KEY`)."""
    return str(profile.software.get(ITERATION_SCALE_KEY, "per_step")) == PER_LAYER


def per_layer_coefs(coefs: _Coefs, num_layers: int) -> _Coefs:
    """One layer's coefficients as a whole model's: ``L x (c + max(a B / L, b F / L) + d S
    + e T)`` = ``c L + max(a B, b F) + d L S + e L T``, so the constant and the per-sequence,
    per-token and per-block costs scale and the roofline ones stay."""
    return _Coefs(
        coefs.const_s * num_layers,
        coefs.s_per_byte,
        coefs.s_per_flop,
        coefs.s_per_block * num_layers,
        coefs.s_per_seq * num_layers,
        coefs.s_per_token * num_layers,
    )


def is_iteration_level(terms) -> bool:
    """Whether a profile's terms are iteration-level (it has both :data:`ITERATION_TERMS`)."""
    return all(name in terms for name in ITERATION_TERMS)


def step_features(model: ModelSpec, tensor_parallel: int, plan: BatchPlan) -> F.Features:
    """The whole step's features on one GPU of a TP group (module docstring)."""
    tp, dt = tensor_parallel, model.dtype_bytes
    heads, kv_heads = model.num_heads // tp, model.num_kv_heads_per_gpu(tp)
    num_tokens = plan.num_tokens
    bytes_ = flops = 0.0
    if num_tokens:
        for k, n in layer_gemm_shapes(model, tp):
            g = F.gemm(num_tokens, k, n, dt)
            bytes_ += model.num_layers * g.bytes_
            flops += model.num_layers * g.flops
    if plan.num_prefill_seqs:
        a = F.prefill_attention_totals(
            plan.num_prefill_seqs,
            plan.num_prefill_tokens,
            plan.prefill_context_sum,
            plan.prefill_scores,
            heads,
            kv_heads,
            model.head_dim,
            dt,
        )
        bytes_ += model.num_layers * a.bytes_
        flops += model.num_layers * a.flops
    if plan.num_decode_seqs:
        a = F.decode_attention_totals(
            plan.num_decode_seqs,
            plan.decode_context_sum,
            plan.decode_num_blocks,
            heads,
            kv_heads,
            model.head_dim,
            dt,
        )
        bytes_ += model.num_layers * a.bytes_
        flops += model.num_layers * a.flops
    if plan.num_seqs:
        g = F.gemm(plan.num_seqs, *lm_head_shape(model, tp), dt)
        bytes_ += g.bytes_
        flops += g.flops
    return F.Features(
        bytes_=bytes_, flops=flops, seqs=float(plan.num_seqs), tokens=float(num_tokens)
    )


class IterationCostModel(CostModel):
    """Step durations from an iteration-level profile (module docstring)."""

    def __init__(
        self,
        model,
        gpu,
        profile,
        *,
        tensor_parallel=1,
        description="",
        link_bw_bytes_s=0.0,
        allreduce_latency_s=ALLREDUCE_LATENCY_S,
    ):
        self._iteration = {name: _Coefs.of(profile.term(name)) for name in ITERATION_TERMS}
        if is_per_layer(profile):
            self._iteration = {
                name: per_layer_coefs(c, model.num_layers) for name, c in self._iteration.items()
            }
        super().__init__(
            model,
            gpu,
            profile,
            tensor_parallel=tensor_parallel,
            description=description,
            link_bw_bytes_s=link_bw_bytes_s,
            allreduce_latency_s=allreduce_latency_s,
        )
        #: the steps were timed without communication: add the analytic all-reduces
        self._add_allreduce = tensor_parallel > 1 and not steps_hold_allreduce(profile)

    def step_time_s(self, plan: BatchPlan) -> float:
        return self.summed_step_time_s(plan)

    def summed_step_time_s(self, plan: BatchPlan) -> float:
        if plan.is_empty:
            return 0.0
        t = self._transfer_time_s(plan)
        if plan.num_seqs:
            name = "prefill_iteration" if plan.num_prefill_seqs else "decode_iteration"
            t += self._iteration[name].time_s(step_features(self.model, self.tensor_parallel, plan))
            if self._add_allreduce:
                t += 2 * self.model.num_layers * self.allreduce_time_s(plan.num_tokens)
        return t

    def _decode_step_time_fn(self, *, is_paged: bool) -> Callable[[int, int, int], float]:
        def time_s(num_seqs: int, total_ctx: int, num_blocks: int) -> float:
            plan = BatchPlan(
                num_decode_seqs=num_seqs,
                decode_context_sum=total_ctx,
                decode_num_blocks=num_blocks if is_paged else num_seqs,
                is_paged=is_paged,
            )
            return self.summed_step_time_s(plan)

        return time_s


def uniform_prefill_features(
    model: ModelSpec, tensor_parallel: int, num_seqs: int, prompt_len: int
) -> F.Features:
    """:func:`step_features` of a step prefilling ``num_seqs`` prompts of ``prompt_len`` tokens."""
    plan = BatchPlan.from_lens(prefill_new_lens=(prompt_len,) * num_seqs)
    return step_features(model, tensor_parallel, plan)


def uniform_decode_features(
    model: ModelSpec, tensor_parallel: int, num_seqs: int, context_len: int
) -> F.Features:
    """:func:`step_features` of a step decoding ``num_seqs`` sequences at ``context_len``."""
    plan = BatchPlan.from_lens(decode_context_lens=(context_len,) * num_seqs)
    return step_features(model, tensor_parallel, plan)
