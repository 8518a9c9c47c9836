"""Inexact Newton with preconditioned conjugate gradients, for polishing factor models to a stationary point.

scipy's trust-ncg takes no preconditioner, and at the small λ where factor models are accurate its CG
needs hundreds of Hessian-vector products per step (docs/model.md has the measurement). The
Hessian of a factor model is dominated by its per-row blocks — user i's k×k block Σ_j c ℓ''_ij V_j V_jᵀ/|D| + λI,
and item j's mirror — so a block-Jacobi preconditioner built from those blocks makes CG converge in a
handful of products. Globalised by an Armijo backtracking line search (or, where f's decrease is below its
rounding, Hager & Zhang's approximate Wolfe conditions); a direction of negative
curvature found by CG is cut off there (Steihaug), so every step is a descent direction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

log = logging.getLogger(__name__)


def block_jacobi(
    blocks, shift: float = 0.0, out: np.ndarray | None = None
) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """z = M⁻¹ r for M = blockdiag(blocks) + shift·I with symmetric k×k blocks (an (n, k, k) array, or a sequence
    of them stacked in order). Each block's Cholesky factor is formed once (compiled, ``als_fused.cholesky_blocks``:
    numpy's batched inverse calls LAPACK once a block) in ``out`` (an (n, k, k) buffer, reused across Newton
    steps: a fresh one costs its page faults every step), then two triangular sweeps a block per application.
    Blocks that are not all positive definite (a damped step of an indefinite problem) are inverted instead.
    Returns (the application, the buffer)."""
    from .als_fused import cholesky_blocks, cholesky_solve_blocks

    pieces = [blocks] if isinstance(blocks, np.ndarray) else list(blocks)
    n, k = sum(len(b) for b in pieces), pieces[0].shape[1]
    L = out if out is not None and out.shape == (n, k, k) else np.empty((n, k, k))
    a = 0
    for b in pieces:
        L[a : a + len(b)] = b
        a += len(b)
    diagonal = np.arange(k)
    L[:, diagonal, diagonal] += shift
    if cholesky_blocks(L) >= 0:
        L[:] = np.concatenate(pieces)
        L[:, diagonal, diagonal] += shift
        inv = np.linalg.inv(L)
        return (lambda r: np.einsum("nkl,nl->nk", inv, r.reshape(n, k)).ravel()), L

    def apply(r: np.ndarray) -> np.ndarray:
        z = np.empty((n, k))
        cholesky_solve_blocks(L, np.ascontiguousarray(r.reshape(n, k), np.float64), z)
        return z.ravel()

    return apply, L


def pcg(hessp: Callable, g: np.ndarray, precond: Callable, rtol: float, maxiter: int) -> tuple[np.ndarray, int, bool]:
    """Approximately solve H p = −g to ‖r‖ ≤ rtol‖g‖. Returns (p, products, negative curvature met).

    On negative curvature p is the iterate so far (Steihaug), or, met at the first product, the
    preconditioned steepest-descent direction M⁻¹(−g): either way a descent direction."""
    p = np.zeros_like(g)
    r = -g
    z = precond(r)
    d = z.copy()
    rz = r @ z
    target = rtol * np.linalg.norm(g)
    for it in range(1, maxiter + 1):
        Hd = hessp(d)
        curv = d @ Hd
        if curv <= 0:
            return (p if it > 1 else d), it, True
        step = rz / curv
        p += step * d
        r -= step * Hd
        if np.linalg.norm(r) <= target:
            return p, it, False
        z = precond(r)
        rz_new = r @ z
        d = z + (rz_new / rz) * d
        rz = rz_new
    return p, maxiter, False


# Hager & Zhang's (2005) approximate Wolfe conditions: where f's decrease along p is below its rounding, the
# step is taken when f rises by at most F_ROUNDING·|f| and the directional derivative has shrunk as a Wolfe step's.
F_ROUNDING = 1e-10
WOLFE_CURVATURE = 0.9
ARMIJO = 1e-4


def _approximate_wolfe(f: float, slope: float, f_new: float, slope_new: float) -> bool:
    """Whether a step with f(x + tp) = f_new and ∇f(x + tp)·p = slope_new meets the approximate Wolfe conditions
    (slope = ∇f(x)·p < 0): (2·ARMIJO − 1)·slope ≥ slope_new ≥ WOLFE_CURVATURE·slope and f_new ≤ f + F_ROUNDING·|f|.
    Near a minimum f falls by less than its own rounding (iALS's f sums |D|-sized terms), so Armijo's test on f
    refuses every step there and the damping grows without bound; the derivative still says where the minimum is."""
    return f_new <= f + F_ROUNDING * abs(f) and WOLFE_CURVATURE * slope <= slope_new <= (2 * ARMIJO - 1) * slope


def newton_pcg(
    fun_grad: Callable,
    hessp: Callable,
    blocks_at: Callable,
    x: np.ndarray,
    tol: float,
    mu0: float,
    maxiter: int = 100,
    cg_maxiter: int = 250,
    callback: Callable[[int, float], None] | None = None,
    stop: Callable[[np.ndarray, np.ndarray], bool] | None = None,
) -> tuple[np.ndarray, float, int, int]:
    """Minimise f from x until ‖∇f‖ ≤ tol, by Levenberg–Marquardt-damped Newton steps (H + μI) p = −g.

    Factor models are non-convex and their Hessian is singular along the rotations U→UR, V→VR, so
    plain Newton-CG keeps meeting negative or zero curvature and takes tiny steps. The damping μ shrinks
    ÷10 after a full step (to 0 below μ0·10⁻⁶), and when CG meets negative curvature or the line search
    has to cut the step it grows to max(10μ, μ0): back to at least the start's damping, whatever it had
    shrunk to. Far from the optimum the steps are gradient-like, near it they are Newton steps. A
    step that met negative curvature is still taken (``pcg``'s descent direction, line-searched):
    discarding it leaves the polish alternating between μ and 10μ without moving.

    ``fun_grad(x) -> (f, g)``, ``hessp(x, v) -> Hv``, ``blocks_at(x) -> (n, k, k)`` the Hessian's
    diagonal blocks (the preconditioner; or a sequence of such arrays, stacked in order, and not modified),
    ``mu0`` the smallest positive damping tried (e.g. λ).
    ``callback(steps, ‖∇f‖)`` after each step (progress). ``stop(x, g)``: a stopping rule of the caller's
    besides ‖∇f‖ ≤ tol, checked at the start and after each step (e.g. the identity bound, which a row's share of
    ∇f decides: ‖∇f‖ over all rows meets it late).
    Returns (x, ‖∇f‖, Newton steps, Hessian-vector products).
    """
    f, g = fun_grad(x)
    gnorm = g0 = float(np.linalg.norm(g))
    products, steps, mu = 0, 0, mu0
    blocks, blocks_x, factors = None, None, None
    while steps < maxiter and gnorm > tol and not (stop is not None and stop(x, g)):
        steps += 1
        if blocks_x is not x:
            blocks, blocks_x = blocks_at(x), x
        precond, factors = block_jacobi(blocks, mu, factors)
        # Forcing term: loose CG far away, tight near the optimum (superlinear once μ → 0).
        rtol = max(1e-10, min(0.1, np.sqrt(gnorm / g0)))
        p, n, negative = pcg(lambda v: hessp(x, v) + mu * v, g, precond, rtol, cg_maxiter)
        products += n
        slope = g @ p
        t, moved = 1.0, True
        while True:
            f_new, g_new = fun_grad(x + t * p)
            if f_new <= f + ARMIJO * t * slope or _approximate_wolfe(f, slope, f_new, g_new @ p):
                break
            t *= 0.5
            if t < 1e-8:  # no decrease along p (rounding, or a gradient out of step with f): stay, damp more
                moved = False
                break
        mu = mu / 10 if t == 1.0 and not negative else max(10 * mu, mu0)
        if mu < mu0 * 1e-6:
            mu = 0.0
        if moved:
            x, f, g = x + t * p, f_new, g_new
            gnorm = float(np.linalg.norm(g))
        log.debug(
            "Newton step %d: ‖∇f‖=%.2e, step %.2g%s, %d CG products%s, μ=%.1e",
            steps,
            gnorm,
            t,
            "" if moved else " refused (no decrease)",
            n,
            " (negative curvature met)" if negative else "",
            mu,
        )
        if callback is not None:
            callback(steps, gnorm)
    return x, gnorm, steps, products
