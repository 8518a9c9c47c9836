"""Anderson acceleration of a fixed-point iteration x ← g(x) (Walker & Ni 2011, "type II").

ALS is such an iteration, V ← items(users(V)), and it converges linearly with a rate near 1 at the
small λ where factor models are accurate (docs/methods.md §1: ~0.9 a sweep after a dozen sweeps at
ml-1m size). Anderson's step combines the last m images so as to cancel their residuals
f = g(x) − x in the least-squares sense,

    γ = argmin ‖f_k − ΔF γ‖,   x_{k+1} = g(x_k) − ΔG γ,

with ΔF, ΔG the differences of consecutive residuals and images: m small least-squares columns
against one more vector, nothing like a Hessian.
"""

from __future__ import annotations

import numpy as np


class Anderson:
    """The last m differences ΔF, ΔG and the latest (image, residual), and ΔFᵀΔF kept as they come.

    The differences are stored in float32: at 50M interactions (k = 64) the history is m = 10 pairs of
    125k × 64 factors, 1.3 GB in float64, 0.6 GB so. The combination only chooses the next iterate,
    which the exact half-steps then map; rounding it to float32 perturbs that start by ~1e-7 of a step
    that shrinks with the residual, and the stationarity the sweeps stop on is measured in float64 at
    the half-steps' output. The latest image and residual, which every new difference and ΔFᵀf_k take,
    stay float64. ΔFᵀΔF gains one row per push (m dot products), never a pass over the whole history.
    """

    def __init__(self, m: int, dtype=np.float32, store=list):
        """``store()`` makes each of the two histories: a list, or anything with ``append``, ``pop(0)``,
        ``len`` and iteration (``io.spill.SpillList`` keeps them in files, out of the process)."""
        self.m, self.dtype = m, dtype
        self.dF, self.dG = store(), store()
        self.reset()

    def reset(self) -> None:
        while len(self.dF):
            self.dF.pop(0), self.dG.pop(0)
        self.last, self.A = None, np.zeros((0, 0))

    def push(self, image: np.ndarray, residual: np.ndarray) -> None:
        """Add g(x_k) and f_k = g(x_k) − x_k. Both are kept by reference until the next push: do not change them."""
        image, residual = np.asarray(image, np.float64).ravel(), np.asarray(residual, np.float64).ravel()
        if self.last is not None:
            g, f = self.last
            df = (residual - f).astype(self.dtype)
            self.dF.append(df)
            self.dG.append((image - g).astype(self.dtype))
            if len(self.dF) > self.m:
                self.dF.pop(0), self.dG.pop(0)
                self.A = self.A[1:, 1:]
            row = np.array([_dot(d, df) for d in self.dF])
            A = np.empty((len(row), len(row)))
            A[:-1, :-1], A[-1, :], A[:, -1] = self.A, row, row
            self.A = A
        self.last = (image, residual)

    def extrapolate(self) -> np.ndarray:
        """The next iterate (flat): g(x_k) − ΔG γ, γ from the normal equations (ΔFᵀΔF) γ = ΔFᵀf_k with a
        ridge of 1e-10 of their trace, so that collinear differences (near convergence) give a shorter
        combination, not a blow-up. With no difference yet it is the plain step g(x_k)."""
        g, f = self.last
        if not self.dF:
            return g.copy()
        A = self.A.copy()
        A[np.diag_indices_from(A)] += 1e-10 * np.trace(A) + np.finfo(float).tiny
        gamma = np.linalg.solve(A, np.array([_dot(d, f) for d in self.dF]))
        x = g.copy()
        for c, d in zip(gamma, self.dG):
            x -= c * d
        return x


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """⟨a, b⟩ accumulated in float64 over blocks (float32 inputs would otherwise be summed in float32)."""
    step = 1 << 20
    return float(sum(np.dot(a[s:s + step].astype(np.float64), b[s:s + step].astype(np.float64))
                     for s in range(0, len(a), step)))
