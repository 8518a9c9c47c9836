"""The ℓ1 recovery's inner loop, compiled: FISTA on ½‖A x − r‖² + λ‖x‖₁, optionally subject to Σx = 0.

RAIPair solves one small problem per pair (M measurements, D features, both tens) thousands of FISTA
steps deep (a bisection over λ, warm-started): numpy's per-call overhead on vectors that short, not the
arithmetic, bounds it. ``@njit(nogil=True, cache=True)`` as the other kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def soft_threshold(g: np.ndarray, t: float) -> np.ndarray:
    """argmin_x ½‖x − g‖² + t‖x‖₁."""
    return np.sign(g) * np.maximum(np.abs(g) - t, 0.0)


@njit(nogil=True, cache=True)
def _shifted_sum(g: np.ndarray, t: float, nu: float) -> float:
    f = 0.0
    for v in g:
        u = v - nu
        if u > t:
            f += u - t
        elif u < -t:
            f += u + t
    return f


@njit(nogil=True, cache=True)
def soft_threshold_sum_zero(g: np.ndarray, t: float) -> np.ndarray:
    """argmin_x ½‖x − g‖² + t‖x‖₁ subject to Σx = 0: x = S_t(g − ν), ν the root of f(ν) = Σ S_t(g − ν).

    f is continuous, non-increasing and linear between the breakpoints g ± t, f ≥ 0 at the first and
    ≤ 0 at the last: a binary search over the sorted breakpoints brackets the root, and a linear
    interpolation inside the bracket finds it exactly (up to rounding, then spread over the active
    entries so that Σx = 0 holds to the last bits)."""
    D = len(g)
    bp = np.sort(np.concatenate((g - t, g + t)))
    lo, hi = 0, 2 * D - 1  # f(bp[lo]) ≥ 0 ≥ f(bp[hi])
    f_lo, f_hi = _shifted_sum(g, t, bp[lo]), _shifted_sum(g, t, bp[hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        f_mid = _shifted_sum(g, t, bp[mid])
        if f_mid > 0:
            lo, f_lo = mid, f_mid
        else:
            hi, f_hi = mid, f_mid
    if f_lo <= 0.0:
        nu = bp[lo]
    elif f_hi == 0.0 or f_lo == f_hi:
        nu = bp[hi]
    else:
        nu = bp[lo] + (bp[hi] - bp[lo]) * f_lo / (f_lo - f_hi)
    x = soft_threshold(g - nu, t)
    n, s = 0, 0.0
    for d in range(D):
        if x[d] != 0.0:
            n += 1
            s += x[d]
    if n:
        for d in range(D):
            if x[d] != 0.0:
                x[d] -= s / n
    return x


@njit(nogil=True, cache=True)
def fista_loop(
    G: np.ndarray,
    Atr: np.ndarray,
    step: float,
    lam: float,
    x0: np.ndarray,
    iters: int,
    tol: float,
    sum_zero: bool,
) -> np.ndarray:
    """FISTA (Beck & Teboulle 2009) with gradient G y − Aᵀr; stops when an iterate moves less than ``tol``
    (relative), checked every 10 steps. Under ``sum_zero`` every iterate is feasible: the prox keeps
    Σx = 0 and the momentum step is an affine combination of feasible points."""
    x = x0.copy()
    y = x0.copy()
    t, thresh = 1.0, step * lam
    for n in range(iters):
        g = y - step * (G @ y - Atr)
        x_new = soft_threshold_sum_zero(g, thresh) if sum_zero else soft_threshold(g, thresh)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = x_new + ((t - 1.0) / t_new) * (x_new - x)
        if n % 10 == 9 and np.linalg.norm(x_new - x) <= tol * max(1.0, np.linalg.norm(x_new)):
            return x_new
        x, t = x_new, t_new
    return x
