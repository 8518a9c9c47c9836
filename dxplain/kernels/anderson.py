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


def extrapolate(images: list[np.ndarray], residuals: list[np.ndarray]) -> np.ndarray:
    """The next iterate from the last m+1 images g(x_i) and residuals f_i = g(x_i) − x_i (oldest first).

    With one pair it is the plain step g(x_k). γ comes from the m×m normal equations (ΔFᵀΔF) γ = ΔFᵀf_k,
    3× cheaper than a least-squares solve on the tall ΔF at ml-1m size, with a ridge of 1e-10 of their
    trace so that collinear differences (near convergence) give a shorter combination, not a blow-up.
    """
    if len(images) < 2:
        return images[-1]
    dF = np.stack([b - a for a, b in zip(residuals[:-1], residuals[1:])], axis=1)
    A = dF.T @ dF
    A[np.diag_indices_from(A)] += 1e-10 * np.trace(A) + np.finfo(float).tiny
    gamma = np.linalg.solve(A, dF.T @ residuals[-1])
    x = images[-1].copy()
    for c, (a, b) in zip(gamma, zip(images[:-1], images[1:])):
        x -= c * (b - a)
    return x
