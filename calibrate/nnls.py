"""Nonnegative least squares, min ||A x - b|| subject to x >= 0 (Lawson & Hanson, 1974, ch. 23).

The active-set algorithm: move the variable with the largest gradient into the passive
set, solve the unconstrained least squares on the passive set, and step back towards the
previous feasible point whenever a passive variable would turn negative. numpy only.
"""

from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    _, n = a.shape
    max_iter = max_iter or 3 * n + 10
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * np.abs(a).sum(axis=0).max() * max(a.shape)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or w[~passive].max() <= tol:
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if s[passive].min() > 0:
                break
            blocking = passive & (s <= 0)
            alpha = np.min(x[blocking] / (x[blocking] - s[blocking]))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                s = np.zeros(n)
                break
        x = s
        w = a.T @ (b - a @ x)
    return x


def nnls_relative(cols: np.ndarray, y: np.ndarray, base: np.ndarray | float = 0.0) -> np.ndarray:
    """x >= 0 minimising sum(((base + cols x) / y - 1)^2): least squares on relative errors,
    so a small and a large time weigh the same (each column scaled to unit norm first)."""
    a = cols / y[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    return nnls(a / scale, 1.0 - base / y) / scale
