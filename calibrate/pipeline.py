"""Calibrate end to end: plan -> measure -> fit -> validate -> write profile and report.

Files written into the output folder:

- ``measurements.csv``: one row per timed shape (``measure`` lists the columns); with a
  time budget it is also saved while the timing runs (``budget``), so a run stopped from
  outside leaves its timings;
- ``calibration.json``: device, copy bandwidth, command, date, model, timing policy, the
  fit seed, the budget's summary and the kernel check, everything ``rebuild_report`` needs
  besides the CSV;
- ``profile.yaml``: the fitted terms (schema ``pagesim.simulator.costmodel.profile``),
  re-read with ``load_profile`` before returning so a profile that fails the schema is
  never left behind as valid;
- ``report.md``, ``fit_predicted_vs_measured.png`` and ``decode_bandwidth.png``.

Rows timed for the report only (``in_fit`` False) are in the CSV and the report's
comparisons, never in the fit or the targets.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.calibrate.backend import Backend
from pagesim.calibrate.budget import priority_order, run_budgeted
from pagesim.calibrate.fit import TermFit, fit_all
from pagesim.calibrate.grid import FULL_GRID, QUICK_GRID, plan_grid
from pagesim.calibrate.measure import load_measurements, run_plan, save_measurements
from pagesim.calibrate.models import ModelDims, closest_gpu_spec
from pagesim.calibrate.report import count_not_converged, write_report
from pagesim.calibrate.selfcheck import KernelCheck
from pagesim.calibrate.synthetic import SYNTHETIC_GPU_NAME
from pagesim.calibrate.targets import compute_targets
from pagesim.calibrate.timing import QUICK_POLICY, TimingPolicy
from pagesim.errors import ConfigError, DataError
from pagesim.files import atomic_write_text
from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.profile import Profile, load_profile
from pagesim.simulator.model_gpu_specs import GPUS

META_JSON = "calibration.json"
PROFILE_YAML = "profile.yaml"
DEFAULT_PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class CalibrationOutputs:
    measurements: Path
    meta: Path
    profile: Path
    report: Path
    plot: Path


def gpu_dir_name(device_name: str) -> str:
    """A folder name for a device: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return "-".join("".join(ch if ch.isalnum() else " " for ch in device_name.lower()).split())


def build_profile(meta: dict[str, Any], fits: dict[str, TermFit]) -> Profile:
    dev = meta["device"]
    is_synthetic = dev["name"] == SYNTHETIC_GPU_NAME
    budget = meta.get("budget")
    cut = (
        f"; a {budget['budget_s']:.0f} s budget timed {budget['num_timed']} of "
        f"{budget['num_planned']} planned shapes"
        if budget
        else ""
    )
    notes = (
        f"Fitted on {sum(f.num_points for f in fits.values())} measurements "
        f"({'quick' if meta['quick'] else 'full'} grid, model {meta['model']}{cut}); "
        "terms are per layer; step_overhead is not measured by calibrate."
    )
    if is_synthetic:
        notes = (
            "SYNTHETIC: times drawn from a known profile plus noise, not measured on a GPU. "
            + notes
        )
    return Profile(
        kind="synthetic" if is_synthetic else "measured",
        gpu_name=dev["name"],
        gpu_spec=meta["gpu_spec"],
        terms={name: fit.to_term() for name, fit in fits.items()},
        date=meta["date"],
        command=meta["command"],
        software=dict(dev.get("software", {})),
        notes=notes,
    )


def _finish(
    out_dir: Path, df: pd.DataFrame, meta: dict[str, Any]
) -> tuple[dict[str, TermFit], Path, Path]:
    fitted = df[df["in_fit"]]
    fits = fit_all(fitted, np.random.default_rng(meta["fit_seed"]))
    targets = compute_targets(fitted, fits, meta["copy_bandwidth_bytes_per_s"])
    meta = {
        **meta,
        "num_not_converged": count_not_converged(df["is_converged"].to_numpy())
        if "is_converged" in df
        else 0,
    }
    report, plot = write_report(out_dir, meta, fits, targets, df)
    return fits, report, plot


def calibrate(
    dims: ModelDims,
    backend: Backend,
    out_dir: Path,
    rng: np.random.Generator,
    quick: bool = False,
    command: str = "",
    on_progress: Callable[[int, int], None] | None = None,
    *,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    checks: Sequence[KernelCheck] = (),
    checked_on: str = "device",
) -> CalibrationOutputs:
    """Plan the grid, time it on ``backend``, fit and write the folder (module docstring).

    ``budget_s``: time the shapes in ``budget.priority_order`` until that many seconds of
    ``clock`` are spent (None: every shape, in plan order). ``checks``: the kernel check
    run before (``selfcheck``), recorded with where it ran (``device`` or ``host``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = QUICK_POLICY if quick else TimingPolicy()
    info = backend.device_info()
    gpu_spec = info.gpu_spec or closest_gpu_spec(info.name, info.memory_bytes)
    copy_bw = backend.copy_bandwidth_bytes_per_s(policy)
    cases = plan_grid(dims, QUICK_GRID if quick else FULL_GRID, rng)
    meta = {
        "device": info.as_dict(),
        "gpu_spec": gpu_spec,
        "copy_bandwidth_bytes_per_s": copy_bw,
        "command": command,
        "date": datetime.date.today().isoformat(),
        "model": asdict(dims),
        "quick": quick,
        "timing": asdict(policy),
        "fit_seed": int(rng.integers(2**31)),
        **({"checks": [c.as_dict() for c in checks], "checked_on": checked_on} if checks else {}),
    }
    meta_path = out_dir / META_JSON
    if budget_s is None:
        df = run_plan(cases, backend, policy, on_progress)
    else:
        # written before the timing too: a run stopped from outside leaves a folder that
        # `pagesim calibrate report` fits (the rows of the last checkpoint)
        atomic_write_text(meta_path, json.dumps(meta, indent=2, sort_keys=True))
        df, summary = run_budgeted(
            priority_order(cases, rng),
            backend,
            policy,
            budget_s,
            analytic_profile(GPUS[gpu_spec]),
            clock=clock,
            on_progress=on_progress,
            checkpoint=lambda rows: save_measurements(rows, out_dir),
        )
        meta["budget"] = summary.as_dict()
        if df.empty:
            raise ConfigError(
                f"calibrate: a {budget_s:g} s budget timed no shape (the first was estimated "
                "to take longer); give a larger --budget-s"
            )
    meas_path = save_measurements(df, out_dir)
    atomic_write_text(meta_path, json.dumps(meta, indent=2, sort_keys=True))
    meta = json.loads(meta_path.read_text())
    # fit what was saved, so that `rebuild_report` on the folder reproduces it exactly
    fits, report, plot = _finish(out_dir, load_measurements(meas_path), meta)
    profile_path = build_profile(meta, fits).save(out_dir / PROFILE_YAML)
    load_profile(profile_path)  # validate against the simulator's schema
    return CalibrationOutputs(meas_path, meta_path, profile_path, report, plot)


def rebuild_report(out_dir: Path) -> tuple[Path, Path]:
    """Refit (same seed) and redraw report.md and the plots from a saved calibration folder."""
    out_dir = Path(out_dir)
    meta_path = out_dir / META_JSON
    if not meta_path.is_file():
        raise DataError(
            f"{meta_path} not found: {out_dir} is not a calibration folder (run `pagesim calibrate` first)"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{meta_path}: not valid JSON: {exc}") from None
    missing = [
        k
        for k in (
            "device",
            "command",
            "date",
            "model",
            "quick",
            "timing",
            "fit_seed",
            "copy_bandwidth_bytes_per_s",
        )
        if k not in meta
    ]
    if missing:
        raise DataError(f"{meta_path}: missing key {missing[0]!r}")
    df = load_measurements(out_dir / "measurements.csv")
    _, report, plot = _finish(out_dir, df, meta)
    return report, plot
