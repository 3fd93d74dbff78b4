"""SchedulerSpec: the batching policy's settings, beside the schedulers that read them.

Part of a RunSpec (``simulator/spec.py`` assembles the sections), kept here as
``allocators/spec.py`` is beside the allocators, so that a scheduler imports its own
settings without the whole RunSpec (and no import circle runs through the specs).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pagesim.specbase import Registered
from pagesim.specbase import StrictSpec as _Spec


class SchedulerSpec(_Spec):
    """The batching policy.

    vllm: vLLM v0 (max_num_seqs, max_num_batched_tokens, preemption ``auto`` = recompute
    single-sequence groups and swap multi-sequence ones). vllm-paper: the PagedAttention
    paper's prototype (its artifact's scheduler, ``schedulers/vllm_paper.py``): prefill
    and decode mixed in one step, the token budget counting running sequences plus
    admitted prompts, and ``max_num_seqs`` counting running groups plus the candidate's
    sequences (the artifact ran 2560 and 2048). orca: iteration-level,
    prefill and decode mixed, no preemption; its ``admission`` is ``default`` (a cap of
    ``max_num_seqs`` running sequences, no token budget) or ``artifact`` (the paper
    artifact's Orca: memory first, then the token budget ``max_num_batched_tokens``
    counting running sequences plus admitted prompts, then ``max_num_seqs`` counting
    running groups plus the candidate's sequences; it ran 2560 and 256). static:
    request-level batches of up to ``max_batch_size`` (None: as many as memory allows).

    ``beam_keep_prob`` (0 to 1) is the beam ancestry model of every scheduler
    (``schedulers/ancestry.py``): no model scores the beams, so the parent of each of a
    step's ``beam_width`` candidates is drawn; with probability ``beam_keep_prob`` the
    i-th candidate continues the i-th beam, otherwise its parent is drawn uniformly among
    the current beams. 0 (the default) is the uniform draw; the larger it is, the longer
    beams stay apart and the less they share.

    ``prefill_padding`` and ``max_paddings`` (``vllm`` only) are vLLM v0.2's prefill rule
    (``schedulers/vllm.py``): a prefill batch is padded to its longest prompt, its tokens
    count as prompts x longest in the budget, and its padding (those tokens less the
    prompts' own) may not exceed ``max_paddings`` (v0.2's ``--max-paddings``, default 256;
    None: no cap). Off by default (vLLM v0.3 and later pack prompts without padding).

    vllm-v1: vLLM's V1 engine (``schedulers/vllm_v1.py``, on allocator ``paged-v1``): one
    budget of ``max_num_batched_tokens`` tokens per step, spent on the running requests
    first, then on admitting waiting ones (at most ``max_num_seqs`` running); prompts
    are computed in chunks; preemption recomputes (``preemption_mode`` ``auto`` or
    ``recompute``). ``long_prefill_token_threshold`` (V1's, default 0: off) caps the
    tokens one request computes in a step. ``reserve_full_prompt`` (v0.19's
    ``scheduler_reserve_full_isl``) admits a request only if all its tokens fit the free
    blocks; false is v0.15.1, which asks only for its first chunk; None (the default): the
    release's rule where ``server.vllm_version`` names one (on from v0.19.0), on without one.
    ``async_scheduling`` (vLLM's ``--async-scheduling``): the engine
    schedules each step while the one before it runs, so a request that arrives while a
    step runs joins the step after next (``schedulers/vllm_v1.py``, rule 6). None (the
    default): the release's default where ``server.vllm_version`` names one (on from
    v0.14.0, ``simulator/vllm_releases.py``), off where it names none.
    ``chunked_prefill`` (vLLM's ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill``):
    None (the default) is the scheduler's own way: vllm-v1 chunks prompts, the others never
    do; false on vllm-v1 is V1 without chunking (a prompt is computed whole or waits:
    ``schedulers/vllm_v1.py``, rule 7); true on a scheduler that does not chunk is refused.
    V1's own budget defaults are 2048 tokens and 256 requests on GPUs under 70 GiB
    and on A100s, 8192 and 1024 on larger ones (``vllm serve``).
    """

    kind: Annotated[str, Registered("pagesim.simulator.schedulers", "SCHEDULERS", "scheduler")] = (
        "vllm"
    )
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=2560, ge=1)
    preemption_mode: Literal["auto", "recompute", "swap"] = "auto"
    max_batch_size: int | None = Field(default=None, ge=1)
    admission: Literal["default", "artifact"] = "default"
    beam_keep_prob: float = Field(default=0.0, ge=0, le=1)
    prefill_padding: bool = False
    max_paddings: int | None = Field(default=None, ge=0)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    reserve_full_prompt: bool | None = None
    async_scheduling: bool | None = None
    chunked_prefill: bool | None = None

    @model_validator(mode="after")
    def _check_v1(self) -> SchedulerSpec:
        if self.chunked_prefill and self.kind != "vllm-v1":
            raise ValueError(
                f"scheduler.chunked_prefill: {self.kind!r} computes each prompt whole (no "
                "chunked prefill); vLLM V1's scheduler (kind 'vllm-v1') chunks prompts"
            )
        # a value other than the default (a dumped spec carries the defaults too)
        for key, is_set in (
            ("long_prefill_token_threshold", self.long_prefill_token_threshold != 0),
            ("reserve_full_prompt", self.reserve_full_prompt is False),
            ("async_scheduling", self.async_scheduling),
        ):
            if is_set and self.kind != "vllm-v1":
                raise ValueError(
                    f"scheduler.{key} is a rule of vLLM V1's scheduler (kind 'vllm-v1'), "
                    f"not of {self.kind!r}"
                )
        if self.kind == "vllm-v1" and self.preemption_mode == "swap":
            raise ValueError(
                "scheduler.preemption_mode: vLLM V1 preempts by recompute only; "
                "allowed for kind 'vllm-v1': auto, recompute"
            )
        return self

    @model_validator(mode="after")
    def _check_padding(self) -> SchedulerSpec:
        if self.max_paddings is not None and not self.prefill_padding:
            raise ValueError(
                "scheduler.max_paddings caps the padding of prefill batches: it needs "
                "scheduler.prefill_padding: true"
            )
        if self.prefill_padding and self.kind != "vllm":
            raise ValueError(
                f"scheduler.prefill_padding is a rule of vLLM v0.2's scheduler (kind 'vllm'), "
                f"not of {self.kind!r}"
            )
        return self
