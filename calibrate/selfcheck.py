"""Check every kernel against its numpy reference before anything is timed.

A calibration that times a wrong kernel fits a profile of the wrong thing, and one that
faults (an illegal address) leaves the CUDA context unusable for the rest of the run. So
``pagesim calibrate`` first runs each kernel once on small inputs chosen to reach its
corners (partial last blocks, context 1, grouped-query heads, three 512-token
partitions, block size 1 and 256, the vector and scalar copy paths) and compares it with
``reference``: fp16 outputs within 2e-3 absolute + 2% relative, KV write and block copy
exactly. The same code runs on a GPU (CuPy arrays, NVRTC modules) and, in a dry run, on
the CPU (numpy arrays, the unmodified sources on the host shim of ``host_kernels``).

A check that raises is recorded with its error; the caller stops before timing (the
device may be unusable), while a numeric mismatch is reported and the timing goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pagesim.calibrate import reference as ref
from pagesim.calibrate.cupy_ops import Kernels
from pagesim.calibrate.reference import paged_inputs
from pagesim.errors import PagesimError

ATOL, RTOL = 2e-3, 2e-2


class KernelCheckError(PagesimError, RuntimeError):
    """A kernel raised in the check (the device may be unusable): nothing is timed."""


@dataclass(frozen=True)
class KernelCheck:
    name: str
    max_abs_err: float | None
    passed: bool
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: (name, context lengths, heads, kv heads, head dim, block size, partitioned)
PAGED_CASES = (
    ("paged_v1 gqa 8/2 d128 bs16", (300, 17, 1), 8, 2, 128, 16, False),
    ("paged_v2 gqa 8/2 d128 bs16, 3 partitions", (1100, 17, 1), 8, 2, 128, 16, True),
    ("paged_v1 mha 4/4 d80 bs256", (300, 40), 4, 4, 80, 256, False),
    ("paged_v2 mqa 4/1 d64 bs1", (600, 3), 4, 1, 64, 1, True),
)


def _compare(name: str, got: np.ndarray, want: np.ndarray, exact: bool = False) -> KernelCheck:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    ok = bool(np.array_equal(got, want) if exact else np.allclose(got, want, ATOL, RTOL))
    return KernelCheck(name, err, ok)


def _paged(kernels: Kernels, xp: Any, to_numpy: Callable, rng: np.random.Generator, case):
    name, lens, nh, nkv, hd, bs, partitioned = case
    q, kc, vc, table = paged_inputs(rng, list(lens), nh, nkv, hd, bs, False)
    out = xp.empty(q.shape, dtype=xp.float16)
    ctx = np.asarray(lens, dtype=np.int32)
    args = (xp.asarray(q), xp.asarray(kc), xp.asarray(vc), xp.asarray(table), xp.asarray(ctx))
    kernels.paged_attention(out, *args, max(lens), partitioned=partitioned)
    want = ref.paged_attention(q, kc, vc, table.tolist(), list(lens), 1 / np.sqrt(hd))
    return _compare(name, to_numpy(out), want)


def _contiguous(kernels: Kernels, xp: Any, to_numpy: Callable, rng: np.random.Generator):
    lens, nh, nkv, hd = [130, 64, 3], 8, 2, 128
    k = rng.standard_normal((len(lens), max(lens), nkv, hd)).astype(np.float16)
    v = rng.standard_normal((len(lens), max(lens), nkv, hd)).astype(np.float16)
    q = rng.standard_normal((len(lens), nh, hd)).astype(np.float16)
    out = xp.empty(q.shape, dtype=xp.float16)
    ctx = xp.asarray(np.asarray(lens, dtype=np.int32))
    kernels.contiguous_attention(out, xp.asarray(q), xp.asarray(k), xp.asarray(v), ctx)
    want = ref.contiguous_attention(q, k, v, lens, 1 / np.sqrt(hd))
    return _compare("contiguous gqa 8/2 d128", to_numpy(out), want)


def _kv_write_and_copy(kernels: Kernels, xp: Any, to_numpy: Callable, rng: np.random.Generator):
    checks = []
    # (kv heads, block size, head dim): 16-byte vectors; 9 halves a block (scalar path)
    for nkv, bs, hd in ((2, 16, 128), (1, 3, 3)):
        kc = rng.standard_normal((6, nkv, bs, hd)).astype(np.float16)
        vc = rng.standard_normal((6, nkv, bs, hd)).astype(np.float16)
        key = rng.standard_normal((5, nkv, hd)).astype(np.float16)
        value = rng.standard_normal((5, nkv, hd)).astype(np.float16)
        slots = rng.permutation(6 * bs)[:5].astype(np.int64)
        kd, vd = xp.asarray(kc), xp.asarray(vc)
        kernels.kv_write(kd, vd, xp.asarray(key), xp.asarray(value), xp.asarray(slots))
        wk, wv = ref.kv_write(kc, vc, key, value, slots)
        got = np.stack([to_numpy(kd), to_numpy(vd)])
        checks.append(_compare(f"kv_write bs{bs} d{hd}", got, np.stack([wk, wv]), exact=True))
        pairs = np.array([[0, 4], [2, 5]], dtype=np.int64)
        kernels.block_copy(kd, vd, xp.asarray(pairs))
        wk, wv = ref.block_copy(wk, wv, [tuple(p) for p in pairs])
        got = np.stack([to_numpy(kd), to_numpy(vd)])
        checks.append(_compare(f"block_copy bs{bs} d{hd}", got, np.stack([wk, wv]), exact=True))
    return checks


def _prefill(kernels: Kernels, xp: Any, to_numpy: Callable, rng: np.random.Generator):
    nh, nkv, t, hd = 8, 2, 37, 64
    q = rng.standard_normal((2, nh, t, hd)).astype(np.float16)
    k = rng.standard_normal((2, nkv, t, hd)).astype(np.float16)
    v = rng.standard_normal((2, nkv, t, hd)).astype(np.float16)
    got = to_numpy(kernels.prefill_attention(xp.asarray(q), xp.asarray(k), xp.asarray(v)))
    want = np.stack(
        [
            ref.prefill_attention(
                q[b].transpose(1, 0, 2), k[b].transpose(1, 0, 2), v[b].transpose(1, 0, 2), 1 / 8
            ).transpose(1, 0, 2)
            for b in range(2)
        ]
    )
    return _compare("prefill gqa 8/2 d64 t37", got, want)


def check_kernels(
    kernels: Kernels, xp: Any, to_numpy: Callable[[Any], np.ndarray], seed: int = 0
) -> list[KernelCheck]:
    """Every kernel once against its reference; a check that raises is recorded and ends
    the checks (later launches on a faulted device would only repeat the error)."""
    rng = np.random.default_rng(seed)
    steps: list[tuple[str, Callable[[], KernelCheck | list[KernelCheck]]]] = [
        (c[0], lambda c=c: _paged(kernels, xp, to_numpy, rng, c)) for c in PAGED_CASES
    ]
    steps += [
        ("contiguous", lambda: _contiguous(kernels, xp, to_numpy, rng)),
        ("kv_write, block_copy", lambda: _kv_write_and_copy(kernels, xp, to_numpy, rng)),
        ("prefill", lambda: _prefill(kernels, xp, to_numpy, rng)),
    ]
    checks: list[KernelCheck] = []
    for name, step in steps:
        try:
            result = step()
        except Exception as exc:  # noqa: BLE001 - recorded and reported: the run stops on it
            checks.append(KernelCheck(name, None, False, f"{type(exc).__name__}: {exc}"))
            break
        checks += result if isinstance(result, list) else [result]
    return checks


def summary_line(checks: list[KernelCheck]) -> str:
    failed = [c for c in checks if not c.passed]
    if not failed:
        return f"kernel check: {len(checks)} of {len(checks)} match their references"
    first = failed[0]
    why = first.error or f"max abs error {first.max_abs_err:.3g}"
    return f"kernel check: {len(failed)} of {len(checks)} FAILED, first {first.name}: {why}"
