"""`pagesim calibrate link`: nccl-tests' ``all_reduce_perf`` output -> ``hardware.link``.

pagesim prices an all-reduce of B bytes over TP GPUs as ``f x B / bus_bw + latency`` with
``f = 2 (TP - 1) / TP`` (the ring's traffic; :mod:`pagesim.simulator.costmodel.model`).
nccl-tests reports each size's ``time`` (us), ``algbw = B / time`` and ``busbw = algbw x f``
by the same convention, so ``f`` is read off the output itself (busbw / algbw), and the two
figures are fitted on the out-of-place times: ``time = latency + f x B / bus_bw``,
nonnegative least squares on relative errors (a 10 us and a 10 ms all-reduce weigh the
same), over the sizes given (default: 8 KiB to 256 MiB, which covers a step's T x hidden
activations from one token to a few thousand). Each row's error under the fit is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagesim.calibrate.nnls import nnls_relative
from pagesim.errors import DataError

#: the default size range fitted (bytes): one 4,096-hidden bf16 token to 32K such tokens
DEFAULT_MIN_BYTES = 8 << 10
DEFAULT_MAX_BYTES = 256 << 20
#: a result row: size, count, type, redop, [root,] time, algbw, busbw (root since 2.11)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+(?:-?\d+\s+)?([\d.]+)\s+([\d.]+)\s+([\d.]+)\s")


@dataclass(frozen=True)
class LinkFit:
    """The fitted link and the rows it was fitted on."""

    bus_bw_gbps: float
    latency_us: float
    ring_factor: float
    sizes: np.ndarray
    times_us: np.ndarray
    source: str

    def predicted_us(self) -> np.ndarray:
        return self.latency_us + self.ring_factor * self.sizes / (self.bus_bw_gbps * 1e3)

    def yaml_block(self) -> str:
        """The ``hardware.link`` block to paste into an experiment or ``--set``."""
        return (
            "hardware:\n  link:\n"
            f"    bus_bw_gbps: {self.bus_bw_gbps:.4g}\n"
            f"    latency_us: {self.latency_us:.4g}\n"
            f"    source: {self.source!r}\n"
        )

    def report_lines(self) -> list[str]:
        rel = self.predicted_us() / self.times_us - 1
        lines = [
            f"fitted on {len(self.sizes)} sizes, {self.sizes.min():,.0f}-{self.sizes.max():,.0f} "
            f"B; ring factor {self.ring_factor:.3g} (busbw / algbw); mean |error| "
            f"{np.mean(np.abs(rel)):.1%}, worst {np.max(np.abs(rel)):.1%}",
            "",
            "| size (B) | measured (us) | fitted (us) | error |",
            "|---|---|---|---|",
        ]
        for size, meas, pred, err in zip(
            self.sizes, self.times_us, self.predicted_us(), rel, strict=True
        ):
            lines.append(f"| {size:,.0f} | {meas:.2f} | {pred:.2f} | {err:+.1%} |")
        return lines


def read_rows(path: str | Path) -> np.ndarray:
    """(size B, out-of-place time us, algbw, busbw) per result row of an all_reduce_perf log."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from e
    rows = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _ROW.match(line)
        if m:
            rows.append(
                [float(m.group(1)), float(m.group(3)), float(m.group(4)), float(m.group(5))]
            )
    if not rows:
        raise DataError(
            f"{path}: no result rows of nccl-tests' all_reduce_perf (size, count, type, redop, "
            "root, time, algbw, busbw, ...); run e.g. `all_reduce_perf -b 8K -e 256M -f 2 -g 2` "
            "and save its output"
        )
    return np.array(rows)


def fit_link(
    path: str | Path,
    *,
    min_bytes: int = DEFAULT_MIN_BYTES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    source: str | None = None,
) -> LinkFit:
    """Fit ``hardware.link`` on an all_reduce_perf log (module docstring)."""
    rows = read_rows(path)
    keep = (rows[:, 0] >= min_bytes) & (rows[:, 0] <= max_bytes) & (rows[:, 1] > 0)
    if keep.sum() < 2:
        raise DataError(
            f"{path}: {int(keep.sum())} result rows between {min_bytes:,} and {max_bytes:,} B; "
            "the fit needs at least 2 (widen --min-bytes/--max-bytes or the run's -b/-e)"
        )
    sizes, times = rows[keep, 0], rows[keep, 1]
    moving = keep & (rows[:, 2] > 0)
    ratio = rows[moving, 3] / rows[moving, 2]
    if not len(ratio):
        raise DataError(
            f"{path}: every algbw is 0 in the fitted sizes; cannot read the ring factor"
        )
    factor = float(np.median(ratio))
    if factor <= 0:
        raise DataError(f"{path}: busbw is 0 where algbw is not; a one-GPU run has no link")
    # time = latency + slope x size, relative errors, both nonnegative
    latency_us, slope = nnls_relative(np.column_stack([np.ones_like(sizes), sizes]), times)
    if slope <= 0:
        raise DataError(f"{path}: the times do not grow with size; no bandwidth to fit")
    bus_bw_gbps = factor / slope / 1e3  # B/us -> GB/s
    return LinkFit(
        bus_bw_gbps=float(bus_bw_gbps),
        latency_us=float(latency_us),
        ring_factor=factor,
        sizes=sizes,
        times_us=times,
        source=source or f"all_reduce_perf log {Path(path).name}, fitted by pagesim calibrate link",
    )
