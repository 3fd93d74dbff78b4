"""A small bounded nonlinear least-squares solver (Levenberg-Marquardt), for fits of a few
parameters whose residuals are not linear in them (``calibrate/serving.py``).

:func:`least_squares` minimises ``sum(residuals(x) ** 2)`` over ``x >= lower`` from ``x0``:
a forward-difference Jacobian (step ``rel_step`` x max(|x|, ``scale``)), the damped
Gauss-Newton step, projected onto the bound; a step is taken when it lowers the cost
(the damping then shrinks) and refused otherwise (the damping grows). It stops when the
relative decrease of the cost or the step is below ``tol``, or after ``max_iter``
iterations. Deterministic: no random start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LsqResult:
    x: np.ndarray
    cost: float
    num_iter: int
    converged: bool


def least_squares(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    lower: float = 0.0,
    scale: float = 1.0,
    rel_step: float = 1e-4,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> LsqResult:
    x = np.maximum(np.asarray(x0, dtype=float), lower)
    r = residuals(x)
    cost = float(r @ r)
    damping = 1e-3
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = rel_step * max(abs(x[j]), scale)
            xj = x.copy()
            xj[j] += h
            jac[:, j] = (residuals(xj) - r) / h
        jtj = jac.T @ jac
        grad = jac.T @ r
        improved = False
        while damping < 1e12:
            step = np.linalg.solve(jtj + damping * np.diag(np.diag(jtj) + 1e-12), -grad)
            x_new = np.maximum(x + step, lower)
            r_new = residuals(x_new)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                improved = True
                break
            damping *= 4.0
        if not improved:
            converged = True
            break
        dx = float(np.max(np.abs(x_new - x) / np.maximum(np.abs(x), scale)))
        rel = (cost - cost_new) / max(cost, 1e-300)
        x, r, cost = x_new, r_new, cost_new
        damping = max(damping / 4.0, 1e-9)
        if rel < tol or dx < tol:
            converged = True
            break
    return LsqResult(x=x, cost=cost, num_iter=it, converged=converged)
