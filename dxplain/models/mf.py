"""Matrix factorisation with squared loss and ℓ2 on the factors — the nuclear-norm model in variational form.

    min_{U,V} (1/|D|) Σ_{(i,j)∈D} (y_ij − μ − ⟨U_i,V_j⟩)² + (λ/2)(‖U‖²_F + ‖V‖²_F)

Ratings are centred by their global mean μ, which the model keeps: the predicted rating is
μ + ⟨U_i,V_j⟩, and the factor part ⟨U_i,V_j⟩ (the *score*) carries the personal signal that the
representer decomposes. At a stationary point UᵀU = VᵀV and every user's score is exactly the sum of
its representer attributions (docs/methods.md §1), so training stops on the gradient norm, not a count.

Solver: ALS sweeps (batched ridge solves) while they make fast progress, then a trust-region Newton
polish with exact Hessian-vector products, which converges where ALS crawls at accurate (small) λ.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from ..interactions import Interactions
from .base import FactorModel
from ..kernels import als
from ..kernels.newton import newton_pcg
from .. import progress
from ..progress import newton_progress

log = logging.getLogger(__name__)

# Defaults picked on a validation split of ml-100k (benchmarks/select_lambda.py, docs/model.md).
# The loss is an average over D, so the ridge in every ALS solve is λ|D|/2: a fixed λ regularises a
# light user ever harder as the data grows. The default therefore fixes the ridge, not λ:
# λ = 2·DEFAULT_RIDGE/|D|, which is the validated λ = 3e-4 on ml-100k.
DEFAULT_K = 32
DEFAULT_RIDGE = 15.0
# Block-Jacobi preconditioning stores (n_users + n_items)·k² floats: up to 1 GB, else plain trust-ncg.
PRECOND_ELEMENTS = 1 << 27


def default_lam(n_train: int) -> float:
    return 2.0 * DEFAULT_RIDGE / n_train


MFModel = FactorModel  # the squared-loss model's factors: the common base, under the name the explainers use


class HalfSteps:
    """The two ALS half-steps: every user's ridge solve given V, every item's given U."""

    def users(self, V: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def items(self, U: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def csr_view(data: Interactions, y: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, columns, values) of the by-user or by-item view, the input of one half-step."""
    if side == "user":
        return data.user_indptr, data.item, y
    order = data.item_order
    return data.item_indptr, data.user[order], y[order]


class LocalHalfSteps(HalfSteps):
    """Both half-steps in this process, over the whole table (the in-memory twin of the Dask ones)."""

    def __init__(self, data: Interactions, mu: float, ridge: float):
        self.views = {side: csr_view(data, data.rating - mu, side) for side in ("user", "item")}
        self.ridge = ridge

    def users(self, V):
        return als.ridge_solve_rows(*self.views["user"], V, self.ridge)

    def items(self, U):
        return als.ridge_solve_rows(*self.views["item"], U, self.ridge)


def _load_part(parts, side: str, p: int, mu: float):
    """(indptr, columns, y − μ) of the rows in part p of ``parts`` (``io.partitions.Partitions``): users
    for ``user``, items for ``item``."""
    if side == "user":
        a, b = int(parts.user_cuts[p]), int(parts.user_cuts[p + 1])
        d = parts.read_users(a, b).data
    else:
        a, b = parts.item_range(p)
        d = parts.read_items(p).data
    indptr, cols, y = csr_view(d, d.rating - mu, side)  # the part's rows are already the only ones there
    return indptr[a:b + 1] - indptr[a], cols, y


def _solve_part(part, F, ridge):
    indptr, cols, y = part
    return als.ridge_solve_rows(indptr, cols, y, F, ridge)


class PartHalfSteps(HalfSteps):
    """Half-steps mapped over the partitioned interactions, one task per part.

    Each part is read once (``mapper.persist``) and kept where it was read for every sweep; per
    half-step only the fixed factor matrix travels, and each task returns its rows of the new factors.
    On a cluster, a worker lost mid-training loses nothing: the scheduler re-reads its parts elsewhere.
    Use as ``ALSMF.fit(data, half_steps=functools.partial(PartHalfSteps, mapper, parts))``.
    """

    def __init__(self, mapper, parts, data: Interactions, mu: float, ridge: float):
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        self.mapper, self.ridge = mapper, ridge
        cuts = {"user": parts.user_cuts, "item": parts.item_cuts}
        self.parts = {side: mapper.persist(_load_part, [(parts, side, p, mu) for p in range(len(cuts[side]) - 1)],
                                           name=f"als-load-{side}") for side in cuts}

    def _half(self, side: str, F: np.ndarray) -> np.ndarray:
        # To one worker every half-step; the others fetch it from their peer (see ``distributed.cluster.scatter``).
        F_h = self.mapper.put(F)
        return np.vstack(self.mapper.map(_solve_part, [(p, F_h, self.ridge) for p in self.parts[side]],
                                         name=f"als-{side}"))

    def users(self, V):
        return self._half("user", V)

    def items(self, U):
        return self._half("item", U)


@dataclass
class ALSMF:
    """ALS matrix factorisation trained to a stationary point.

    Parameters
    ----------
    k : rank
    lam : λ in the objective above (the ridge in each solve is λ|D|/2); None = ``default_lam(|D|)``
    tol : stop when ‖∇f‖ (Frobenius over U and V) ≤ tol
    max_sweeps : ALS sweeps at most before the polish
    polish_iters : trust-region Newton iterations at most
    seed : initialisation seed (deterministic for a seed)
    """

    k: int = DEFAULT_K
    lam: float | None = None
    tol: float = 1e-9
    max_sweeps: int = 60
    polish_iters: int = 200
    seed: int = 0

    def fit(self, data: Interactions, half_steps=None, init: tuple[np.ndarray, np.ndarray] | None = None) -> MFModel:
        """Train on ``data``.

        ``half_steps(data, mu, ridge) -> HalfSteps`` runs the two ridge half-steps elsewhere, e.g.
        ``functools.partial(PartHalfSteps, mapper, parts)`` maps them over partitions; by default they run here.
        ``init=(U, V)`` starts from given factors instead of the seeded random ones (e.g. a retraining
        after deleting a few ratings, started from the original optimum).
        """
        t0 = time.perf_counter()
        u, i = data.user, data.item
        mu = float(data.rating.mean())
        y = data.rating - mu
        n = len(y)
        lam = self.lam if self.lam is not None else default_lam(n)
        ridge = lam * n / 2.0
        rng = np.random.default_rng(self.seed)
        U = rng.normal(scale=0.1, size=(data.n_users, self.k)) if init is None else init[0].copy()
        V = rng.normal(scale=0.1, size=(data.n_items, self.k)) if init is None else init[1].copy()
        P = als.Pattern(u, i, data.user_indptr, data.n_users, data.n_items)
        half_steps = (half_steps or LocalHalfSteps)(data, mu, ridge)
        gnorm, history = np.inf, []
        for sweep in range(1, self.max_sweeps + 1):
            U = half_steps.users(V)
            V = half_steps.items(U)
            gU, gV = als.gradient(U, V, P, y, lam)
            gnorm = float(np.sqrt(np.sum(gU * gU) + np.sum(gV * gV)))
            history.append(gnorm)
            log.debug("ALS sweep %d: ‖∇f‖=%.2e (%.1fs)", sweep, gnorm, time.perf_counter() - t0)
            progress.update("train: ALS sweeps", sweep, self.max_sweeps, f"‖∇f‖={gnorm:.1e}")
            if gnorm <= self.tol:
                break
            # ALS is linear-rate: once a sweep gains < 10%, Newton's quadratic rate wins.
            if sweep >= 5 and history[-1] > 0.9 * history[-2]:
                break
        sweeps = len(history)
        newton = 0
        if gnorm > self.tol and self.polish_iters > 0:
            U, V, gnorm, newton = self._polish(U, V, P, y, lam)
        log.info("ALS-MF k=%d λ=%g: %d sweeps + %d Newton steps, ‖∇f‖=%.2e, %.1fs",
                 self.k, lam, sweeps, newton, gnorm, time.perf_counter() - t0)
        model = MFModel(U, V, mu, lam, n, grad_norm=gnorm,
                       info={"sweeps": sweeps, "newton_iters": newton, "seed": self.seed,
                             "objective": als.objective(U, V, P, y, lam),
                             "seconds": time.perf_counter() - t0})
        model.check_not_degenerate(data)
        return model

    def _polish(self, U, V, P, y, lam):
        """Newton polish on f with exact Hessian-vector products: block-Jacobi-preconditioned, damped
        Newton-CG when the k×k blocks fit in PRECOND_ELEMENTS, else scipy trust-ncg."""
        nU = U.size
        shapeU, shapeV = U.shape, V.shape
        cache, calls = {}, {"hessp": 0}

        def split(x):
            return x[:nU].reshape(shapeU), x[nU:].reshape(shapeV)

        def fun_grad(x):
            Ux, Vx = split(x)
            r = y - als.pair_scores(Ux, Vx, P.u, P.i)
            cache["x"], cache["r"] = x, r
            f = r @ r / len(y) + 0.5 * lam * (x @ x)
            gU, gV = als.gradient(Ux, Vx, P, y, lam, r=r)
            return f, np.concatenate([gU.ravel(), gV.ravel()])

        def hessp(x, p):
            Ux, Vx = split(x)
            r = cache["r"] if cache.get("x") is x else y - als.pair_scores(Ux, Vx, P.u, P.i)
            dU, dV = split(p)
            calls["hessp"] += 1
            hU, hV = als.hessian_vector(Ux, Vx, dU, dV, P, r, lam)
            return np.concatenate([hU.ravel(), hV.ravel()])

        x0 = np.concatenate([U.ravel(), V.ravel()])
        t0 = time.perf_counter()
        if (U.shape[0] + V.shape[0]) * self.k ** 2 <= PRECOND_ELEMENTS:
            # Damped Newton-CG with the per-row k×k blocks as preconditioner (kernels/newton.py).
            def blocks_at(x):
                A, B = als.curvature_grams(*split(x), P, len(y))
                return np.concatenate([A, B]) + lam * np.eye(self.k)

            x, gnorm, steps, products = newton_pcg(fun_grad, hessp, blocks_at, x0, self.tol, lam,
                                                   self.polish_iters, callback=newton_progress(self.polish_iters))
            Ux, Vx = split(x)
            log.debug("Newton polish: %d steps, %d Hessian-vector products", steps, products)
            return Ux.copy(), Vx.copy(), gnorm, steps

        def report_step(xk):
            log.debug("Newton step: %d Hessian-vector products so far (%.1fs)", calls["hessp"], time.perf_counter() - t0)

        res = minimize(fun_grad, x0, jac=True, hessp=hessp, method="trust-ncg", callback=report_step,
                       options={"gtol": self.tol, "maxiter": self.polish_iters})
        Ux, Vx = split(res.x)
        gU, gV = als.gradient(Ux, Vx, P, y, lam)
        log.debug("Newton polish: %d iterations, %d Hessian-vector products", res.nit, calls["hessp"])
        return Ux.copy(), Vx.copy(), float(np.sqrt(np.sum(gU * gU) + np.sum(gV * gV))), int(res.nit)
