"""Named reducers: how a run's time series becomes one number per metric, and which way.

pagesim's own summary weights every state by how long it held (``time-weighted``:
slot-seconds over run seconds, idle time included). The PagedAttention paper's
artifact reduces its logs differently (GitHub ``sosp-ae-39/sosp-ae-astra``,
``plot/*.py``): it averages the values logged at scheduler steps, plainly, over a
window of simulated time. A step of 20 ms and one of 200 ms weigh the same, and
idle time does not count. The two differ by several points when step lengths vary
with the state, so every reduced result names the reducer that made it.

Registered in :data:`REDUCERS` (name -> :class:`Reducer`):

- ``time-weighted``: duration-weighted mean of the five memory fractions over the
  whole run (the summary's ``mem_*_frac``), from any time series;
- ``artifact-fig2``: the plain mean over scheduler steps with 300 s <= t <= 900 s of
  the five memory fractions (Figure 2, the memory breakdown);
- ``artifact-fig13``: the plain mean over steps from 600 s to the end of the number
  of request groups in the step's batch (``batch_size``: running groups, prompts
  admitted into the step counted; Figure 13, average batch size);
- ``artifact-fig15``: over steps with 300 s <= t <= 900 s, the sharing saving
  ``1 - 1 / mean(L / P)``, L the logical blocks (the sum of the block tables'
  lengths), P the distinct physical blocks they use (Figure 15). Per step
  L / P = (held + saved) / held, held = token + reserved + internal fractions (the
  physical blocks × block size, for a paged pool) and saved = ``mem_shared_saved_frac``
  (``MemoryUsage.shared_saved_slots``: (L - P) × block size). Steps holding no block
  have no ratio (the artifact would divide by zero) and are left out, counted in
  ``num_skipped``.

The artifact reducers need one row per step (``metrics.every_step: true``); given a
sampled series they raise a :class:`ConfigError` saying so. Idle rows (no step) are
not steps and are skipped. The artifact's window ends at the first step after the
window's end; when no step comes after it, its slice drops the last step (a quirk of
``plot_fig13.py`` and ``plot_fig15.py``); here the window is exactly
``start_s <= t_s <= end_s``, a difference of at most one step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pagesim.errors import ConfigError
from pagesim.simulator.metrics import MEM_FRAC_COLUMNS


@dataclass(frozen=True)
class Reduced:
    """Reduced metrics, with the reducer that made them and how many rows it used."""

    reducer: str
    description: str
    values: dict[str, float]
    num_steps: int
    num_skipped: int = 0

    def as_row(self) -> dict[str, float | str | int]:
        """The values plus ``reducer`` and ``reducer_num_steps`` columns (a results row)."""
        return {**self.values, "reducer": self.reducer, "reducer_num_steps": self.num_steps}

    def as_columns(self) -> dict[str, float]:
        """The values as a run's extra metrics, each named after the reducer
        (``artifact_fig2_mem_token_frac``, ..., ``artifact_fig2_num_steps``)."""
        prefix = self.reducer.replace("-", "_")
        columns = {f"{prefix}_{key}": value for key, value in self.values.items()}
        columns[f"{prefix}_num_steps"] = float(self.num_steps)
        return columns


@dataclass(frozen=True)
class Reducer:
    """A named reduction of a time series (see the module docstring)."""

    name: str
    description: str
    reduce: Callable[[pd.DataFrame], Reduced] = field(repr=False)
    needs_every_step: bool = True


def _step_rows(timeseries: pd.DataFrame, reducer: str) -> pd.DataFrame:
    """The rows that are single steps; ConfigError if the series was sampled in windows."""
    steps = timeseries["num_steps"]
    if (steps > 1).any():
        raise ConfigError(
            f"reducer {reducer!r} averages over scheduler steps: run with metrics.every_step: "
            "true (this time series has sampled windows)"
        )
    return timeseries[steps == 1]


def _window(rows: pd.DataFrame, start_s: float, end_s: float | None) -> pd.DataFrame:
    t = rows["t_s"]
    inside = t >= start_s if end_s is None else (t >= start_s) & (t <= end_s)
    return rows[inside]


def _empty(reducer: str, start_s: float, end_s: float | None) -> ConfigError:
    until = "the end" if end_s is None else f"{end_s:g} s"
    return ConfigError(
        f"reducer {reducer!r}: no scheduler step between {start_s:g} s and {until}; "
        "the run is shorter than the window"
    )


def time_weighted(timeseries: pd.DataFrame) -> Reduced:
    """Duration-weighted mean of the memory fractions over the whole run (the summary's)."""
    duration = timeseries["duration_s"].to_numpy()
    total = float(duration.sum())
    values = {
        col: float(np.dot(timeseries[col].to_numpy(), duration) / total) if total > 0 else 0.0
        for col in MEM_FRAC_COLUMNS
    }
    num_steps = int(timeseries["num_steps"].sum())
    return Reduced("time-weighted", REDUCERS["time-weighted"].description, values, num_steps)


def artifact_fig2(
    timeseries: pd.DataFrame, start_s: float = 300.0, end_s: float = 900.0
) -> Reduced:
    """Plain mean over steps with ``start_s <= t <= end_s`` of the memory fractions."""
    rows = _window(_step_rows(timeseries, "artifact-fig2"), start_s, end_s)
    if rows.empty:
        raise _empty("artifact-fig2", start_s, end_s)
    values = {col: float(rows[col].mean()) for col in MEM_FRAC_COLUMNS}
    return Reduced("artifact-fig2", REDUCERS["artifact-fig2"].description, values, len(rows))


def artifact_fig13(timeseries: pd.DataFrame, start_s: float = 600.0) -> Reduced:
    """Plain mean over steps from ``start_s`` to the end of the groups in each batch."""
    rows = _window(_step_rows(timeseries, "artifact-fig13"), start_s, None)
    if rows.empty:
        raise _empty("artifact-fig13", start_s, None)
    values = {"avg_batch_size": float(rows["batch_size"].mean())}
    return Reduced("artifact-fig13", REDUCERS["artifact-fig13"].description, values, len(rows))


def artifact_fig15(
    timeseries: pd.DataFrame, start_s: float = 300.0, end_s: float = 900.0
) -> Reduced:
    """``1 - 1 / mean(L / P)`` over steps with ``start_s <= t <= end_s`` that hold blocks."""
    rows = _window(_step_rows(timeseries, "artifact-fig15"), start_s, end_s)
    held = (
        rows["mem_token_frac"] + rows["mem_reserved_frac"] + rows["mem_internal_frag_frac"]
    ).to_numpy()
    has_blocks = held > 0
    if not has_blocks.any():
        raise _empty("artifact-fig15", start_s, end_s)
    saved = rows["mem_shared_saved_frac"].to_numpy()[has_blocks]
    ratio = (held[has_blocks] + saved) / held[has_blocks]
    values = {
        "sharing_saved_frac": float(1.0 - 1.0 / ratio.mean()),
        "mean_logical_per_physical_block": float(ratio.mean()),
    }
    return Reduced(
        "artifact-fig15", REDUCERS["artifact-fig15"].description, values,
        int(has_blocks.sum()), int((~has_blocks).sum()),
    )  # fmt: skip


REDUCERS: dict[str, Reducer] = {
    "time-weighted": Reducer(
        "time-weighted",
        "pagesim: duration-weighted mean of the memory fractions over the whole run",
        time_weighted, needs_every_step=False),
    "artifact-fig2": Reducer(
        "artifact-fig2",
        "paper artifact Fig. 2: plain mean over scheduler steps, 300 s <= t <= 900 s",
        artifact_fig2),
    "artifact-fig13": Reducer(
        "artifact-fig13",
        "paper artifact Fig. 13: plain mean over steps of groups batched, 600 s to the end",
        artifact_fig13),
    "artifact-fig15": Reducer(
        "artifact-fig15",
        "paper artifact Fig. 15: 1 - 1/mean(logical/physical blocks) over steps, 300-900 s",
        artifact_fig15),
}  # fmt: skip


def reduce(timeseries: pd.DataFrame, name: str) -> Reduced:
    """Reduce ``timeseries`` with the registered reducer ``name`` (its default window)."""
    if name not in REDUCERS:
        raise ConfigError(f"unknown reducer {name!r}; known: {', '.join(REDUCERS)}")
    return REDUCERS[name].reduce(timeseries)
