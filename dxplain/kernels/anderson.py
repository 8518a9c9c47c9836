"""Anderson acceleration of a fixed-point iteration x ← g(x) (Walker & Ni 2011, "type II").

ALS is such an iteration, V ← items(users(V)), and it converges linearly with a rate near 1 at the
small λ where factor models are accurate (docs/methods.md §1). Anderson's step combines the last m images
so as to cancel their residuals f = g(x) − x in the least-squares sense,

    γ = argmin ‖f_k − ΔF γ‖,   x_{k+1} = g(x_k) − ΔG γ,

with ΔF, ΔG the differences of consecutive residuals and images: m small least-squares columns
against one more vector, nothing like a Hessian.
"""

from __future__ import annotations

import numpy as np
from numba import njit


class ArrayVectors:
    """The vector operations ``Anderson`` needs, on numpy arrays in this process: differences stored in
    ``dtype`` in what ``store()`` makes (a list, or ``io.spill.SpillList`` to keep them in files)."""

    def __init__(self, store=list, dtype=np.float32):
        self.store, self.dtype = store, dtype

    def residual(self, image, iterate):
        return np.asarray(image, np.float64) - iterate

    def difference(self, a, b):
        return (a - b).astype(self.dtype)

    def dots(self, items, d) -> np.ndarray:
        return dots(d, items)

    def combine(self, g, gamma, items):
        return combine(g, gamma, items)

    def copy(self, g):
        return g  # never changed in place: training maps it to new arrays

    def history(self):
        return self.store()


class Anderson:
    """The last m differences ΔF, ΔG and the latest (image, residual), and ΔFᵀΔF kept as they come.

    The differences are stored in float32: at 50M interactions (k = 64) the history is m = 10 pairs of
    125k × 64 factors, 1.3 GB in float64, 0.6 GB so. The combination only chooses the next iterate,
    which the exact half-steps then map; rounding it to float32 perturbs that start by ~1e-7 of a step
    that shrinks with the residual, and the stationarity the sweeps stop on is measured in float64 at
    the half-steps' output. The latest image and residual, which every new difference and ΔFᵀf_k take,
    stay float64. ΔFᵀΔF gains one row per push (m dot products), never a pass over the whole history.

    The vectors are whatever ``vectors`` operates on: arrays here (``ArrayVectors``), or row blocks on
    a cluster's workers (``models.blocks.BlockVectors``); the m × m algebra is the same.
    """

    def __init__(self, m: int, dtype=np.float32, store=list, vectors=None):
        """``store()`` makes each of the two histories: a list, or anything with ``append``, ``pop(0)``,
        ``len`` and iteration (``io.spill.SpillList`` keeps them in files, out of the process).
        ``vectors`` replaces both with other vector operations (``ArrayVectors``' methods)."""
        self.m = m
        self.ops = vectors if vectors is not None else ArrayVectors(store, dtype)
        self.dF, self.dG = self.ops.history(), self.ops.history()
        self.reset()

    def reset(self) -> None:
        while len(self.dF):
            self.dF.pop(0), self.dG.pop(0)
        self.last, self.A = None, np.zeros((0, 0))

    def push(self, image, iterate) -> None:
        """Add g(x_k) (``image``) for the iterate x_k, whose residual is f_k = g(x_k) − x_k. The image is
        kept by reference until the next push: do not change it."""
        residual = self.ops.residual(image, iterate)
        if self.last is not None:
            g, f = self.last
            df = self.ops.difference(residual, f)
            self.dF.append(df)
            self.dG.append(self.ops.difference(image, g))
            if len(self.dF) > self.m:
                self.dF.pop(0), self.dG.pop(0)
                self.A = self.A[1:, 1:]
            row = self.ops.dots(self.dF, df)
            A = np.empty((len(row), len(row)))
            A[:-1, :-1], A[-1, :], A[:, -1] = self.A, row, row
            self.A = A
        self.last = (image, residual)

    def extrapolate(self):
        """The next iterate: g(x_k) − ΔG γ, γ from the normal equations (ΔFᵀΔF) γ = ΔFᵀf_k with a
        ridge of 1e-10 of their trace, so that collinear differences (near convergence) give a shorter
        combination, not a blow-up. With no difference yet it is the plain step g(x_k)."""
        g, f = self.last
        if not len(self.dF):
            return self.ops.copy(g)
        A = self.A.copy()
        A[np.diag_indices_from(A)] += 1e-10 * np.trace(A) + np.finfo(float).tiny
        gamma = np.linalg.solve(A, self.ops.dots(self.dF, f))
        return self.ops.combine(g, gamma, self.dG)


def dots(d: np.ndarray, items) -> np.ndarray:
    """⟨x, d⟩ for every x in ``items``: a row of ΔFᵀΔF, or ΔFᵀf."""
    return np.array([dot(x, d) for x in items])


def combine(g: np.ndarray, gamma: np.ndarray, items) -> np.ndarray:
    """g − Σ γ_i ΔG_i."""
    x = np.array(g, np.float64, order="C")  # C order: its flat view below is x itself, not a copy
    flat = x.reshape(-1)
    for c, d in zip(gamma, items):
        d = np.ravel(d)
        _check_length(flat, d)
        _subtract_scaled(flat, float(c), d)
    return x


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """⟨a, b⟩ accumulated in float64 (float32 inputs would otherwise be summed in float32)."""
    a, b = np.ravel(a), np.ravel(b)
    _check_length(a, b)
    return float(_dot64(a, b))


def _check_length(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:  # the compiled loops below would read past the shorter one
        raise ValueError(f"vectors of {a.size} and {b.size} elements")


# Compiled (serial, so fastmath keeps one summation order): the history is float32 and the latest vectors float64,
# and numpy would widen a float32 operand into a temporary copy first.
@njit(nogil=True, cache=True, fastmath=True)
def _dot64(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += np.float64(a[i]) * np.float64(b[i])
    return s


@njit(nogil=True, cache=True, fastmath=True)
def _subtract_scaled(x, c, d):
    """x −= c·d in place (x float64, d float32 or float64)."""
    for i in range(x.shape[0]):
        x[i] -= c * np.float64(d[i])
