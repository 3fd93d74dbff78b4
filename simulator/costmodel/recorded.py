"""Step times read off a real run, as a cost model: the scheduler's error alone.

A replay whose every step lasts what the real server's steps lasted at that moment
(:func:`pagesim.calibrate.step_times.reconstruct`) differs from the real run only by what
the scheduler decides: which requests a step admits, chunks and preempts. Its latency
errors are the scheduler's (and the pool's) apart from the cost model's.

Rule: a step starting at time t lasts ``StepTimes.at(t)``, whatever its batch. The engine
prices each step once, in order, when it starts (``Engine._loop`` and its decode spans),
so the start is the end of the step priced before, or the engine's clock when that is
later (the engine waited idle for an arrival): :meth:`RecordedStepCosts.bind_clock` gives
the model the engine's clock (``simulate`` calls it).

``shadow``: a second cost model that prices every step too (its price is logged, never
used): beside the recorded times it is the step cost's own error on the replayed batches
(:attr:`RecordedStepCosts.log`), with the part of that price that is the tensor-parallel
all-reduce (where the shadow has one: ``CostModel.allreduce_time_s``, two per layer). The
log also keeps each step's batch (sequences, their context tokens, prompt tokens
computed): what a serving path is fitted on (``calibrate/serving_v1.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: the columns of :attr:`RecordedStepCosts.log`
LOG_COLUMNS = (
    "start_s",
    "recorded_s",
    "shadow_s",
    "allreduce_s",
    "num_seqs",
    "context_tokens",
    "prefill_tokens",
)


class RecordedStepCosts:
    """Step durations from a run's :class:`~pagesim.calibrate.step_times.StepTimes`."""

    def __init__(self, step_times: Any, description: str, *, shadow: Any = None):
        self.step_times = step_times
        self.description = description
        self.shadow = shadow
        self.arrival_delay_s = 0.0
        self._clock: Any = None
        self._end_s = 0.0
        #: one row per step: (start s, recorded duration s, shadow price s or NaN, the
        #: shadow's all-reduce part s or NaN, sequences, context tokens, prompt tokens)
        self._rows: list[tuple[float, ...]] = []
        self._allreduce = getattr(shadow, "allreduce_time_s", None)
        self._per_step = 2 * shadow.model.num_layers if self._allreduce is not None else 0
        self._shadow_decode: dict[bool, Callable[[int, int, int], float]] = {}
        if shadow is not None:
            self._shadow_decode = {p: shadow.decode_time_fn(is_paged=p) for p in (True, False)}

    def bind_clock(self, env: Any) -> None:
        """Read the engine's clock (a SimPy environment's ``now``) from here on."""
        self._clock = env
        self._end_s = float(env.now)
        self._rows.clear()

    def _allreduce_s(self, num_tokens: int) -> float:
        if self._allreduce is None:
            return float("nan")
        return self._per_step * self._allreduce(num_tokens)

    def _next(
        self, batch: tuple[int, int, int], shadow_s: float, allreduce_s: float = float("nan")
    ) -> float:
        start = self._end_s
        if self._clock is not None and self._clock.now > start:
            start = float(self._clock.now)
        duration = self.step_times.at(start)
        self._end_s = start + duration
        self._rows.append((start, duration, shadow_s, allreduce_s, *batch))
        return duration

    def step_time_s(self, plan) -> float:
        batch = (
            plan.num_seqs,
            plan.prefill_context_sum + plan.decode_context_sum,
            plan.num_prefill_tokens,
        )
        if self.shadow is None:
            return self._next(batch, float("nan"))
        tokens = plan.num_prefill_tokens + plan.num_decode_seqs
        return self._next(batch, self.shadow.step_time_s(plan), self._allreduce_s(tokens))

    def decode_time_fn(self, *, is_paged: bool = True) -> Callable[[int, int, int], float]:
        shadow = self._shadow_decode.get(is_paged)

        def time_s(num_seqs: int, context_sum: int, num_blocks: int) -> float:
            batch = (num_seqs, context_sum, 0)
            if shadow is None:
                return self._next(batch, float("nan"))
            price = shadow(num_seqs, context_sum, num_blocks)
            return self._next(batch, price, self._allreduce_s(num_seqs))

        return time_s

    @property
    def log(self) -> np.ndarray:
        """Every step priced since :meth:`bind_clock`, one row each: columns
        :data:`LOG_COLUMNS` (times in s)."""
        return np.array(self._rows, dtype=float).reshape(-1, len(LOG_COLUMNS))
