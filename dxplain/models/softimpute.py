"""SoftImpute (Mazumder, Hastie & Tibshirani 2010): nuclear-norm matrix completion, never users × items.

    min_Z (1/|D|) Σ_{(i,j)∈D} (y_ij − μ − Z_ij)² + λ‖Z‖_*

is solved by proximal gradient with step |D|/2 — exactly SoftImpute's iteration

    Z ← S_τ(P_D(Y − Z) + Z),   S_τ = soft-thresholding of the singular values at τ = λ|D|/2,

with Z kept as U diag(σ) Vᵀ. P_D(Y − Z) is sparse and Z is low-rank, so the SVD runs on a
``LinearOperator`` (scipy's ``svds``) and costs O(|D|·r + (users + items)·r²) per iteration.

The model returned uses Z's SVD directly: Ũ = U√Σ, Ṽ = V√Σ (Corollary 4), so ⟨Ũ_i, Ṽ_j⟩ = Z_ij and the
representer identity holds at convergence with α = −ℓ'/(λ|D|) — the same explainer as ALS-MF.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, svds

from ..interactions import Interactions
from ..kernels.als import Pattern, gradient, pair_scores
from .base import FactorModel

log = logging.getLogger(__name__)


class SoftImpute:
    """Parameters: λ as in the objective above; ``max_rank`` bounds the SVD (an error if the solution
    needs more); stop when the relative change of Z (Frobenius) is below ``tol``, or after ``max_sweeps``
    iterations (each one pass over D and a truncated SVD)."""

    def __init__(self, lam: float, max_rank: int = 64, tol: float = 1e-9, max_sweeps: int = 2000, seed: int = 0):
        self.lam, self.max_rank, self.tol, self.max_sweeps, self.seed = lam, max_rank, tol, max_sweeps, seed

    def fit(self, data: Interactions, init: FactorModel | None = None) -> FactorModel:
        """Fit on ``data``; ``init`` (a SoftImpute model on the same id spaces) warm-starts from its SVD,
        e.g. to retrain after deleting a few ratings."""
        t0 = time.perf_counter()
        u, i = data.user.astype(np.intp), data.item.astype(np.intp)
        mu = float(data.rating.mean())
        y = data.rating - mu
        n = len(y)
        tau = self.lam * n / 2
        shape = (data.n_users, data.n_items)
        U, s, V = np.zeros((shape[0], 0)), np.zeros(0), np.zeros((shape[1], 0))
        if init is not None and init.k:  # Ũ = U√Σ, Ṽ = V√Σ with orthonormal U, V: σ = ‖Ũ column‖²
            s = np.sum(init.U**2, axis=0)
            U, V = init.U / np.sqrt(s), init.V / np.sqrt(s)
        rng = np.random.default_rng(self.seed)
        change = np.inf
        for it in range(1, self.max_sweeps + 1):
            z = pair_scores(U * s, V, u, i) if len(s) else np.zeros(n)
            R = sp.csr_array((y - z, (u, i)), shape=shape)
            Us, Vt = U * s, V.T
            M = LinearOperator(
                shape,
                dtype=np.float64,
                matvec=lambda x, R=R, Us=Us, Vt=Vt: R @ x + Us @ (Vt @ x),
                rmatvec=lambda x, R=R, Us=Us, Vt=Vt: R.T @ x + Vt.T @ (Us.T @ x),
            )
            k = min(self.max_rank, min(shape) - 1)
            P, sig, Qt = svds(M, k=k, v0=rng.normal(size=min(shape)), tol=1e-12)
            keep = sig > tau
            if keep.all() and k == self.max_rank:
                raise RuntimeError(
                    f"SoftImpute needs rank > max_rank={self.max_rank} at λ={self.lam:g}: raise max_rank or λ"
                )
            U_new, s_new, V_new = P[:, keep], sig[keep] - tau, Qt[keep].T
            change = _relative_change(U, s, V, U_new, s_new, V_new)
            U, s, V = U_new, s_new, V_new
            if change < self.tol:
                break
        root = np.sqrt(s)
        Ut, Vt_ = U * root, V * root
        r = y - pair_scores(Ut, Vt_, u, i)
        log.info(
            "SoftImpute λ=%g: rank %d after %d iterations (relative change %.1e) in %.1fs",
            self.lam,
            len(s),
            it,
            change,
            time.perf_counter() - t0,
        )
        return FactorModel(
            Ut,
            Vt_,
            mu,
            self.lam,
            n,
            kind="softimpute",
            grad_norm=_subgradient_gap(Ut, Vt_, r, data, self.lam),
            info={
                "iterations": it,
                "rank": int(len(s)),
                "relative_change": float(change),
                "seconds": time.perf_counter() - t0,
            },
        )


def _relative_change(U, s, V, U2, s2, V2) -> float:
    """‖Z₂ − Z‖_F / max(‖Z‖_F, tiny) for Z = U diag(s) Vᵀ, from r×r products only."""

    def inner(Ua, sa, Va, Ub, sb, Vb):
        return float(np.sum((Ua.T @ Ub) * sa[:, None] * sb[None, :] * (Va.T @ Vb))) if len(sa) and len(sb) else 0.0

    zz, z2, zx = inner(U, s, V, U, s, V), inner(U2, s2, V2, U2, s2, V2), inner(U, s, V, U2, s2, V2)
    return float(np.sqrt(max(zz + z2 - 2 * zx, 0.0)) / np.sqrt(max(zz, 1e-300)))


def _subgradient_gap(Ut, Vt, r, data: Interactions, lam: float) -> float:
    """How far the factor pair is from stationarity of the variational form: ‖∇‖ of
    (1/|D|)Σ(y − ⟨Ũ_i,Ṽ_j⟩)² + (λ/2)(‖Ũ‖² + ‖Ṽ‖²), which is zero at the nuclear-norm optimum."""
    P = Pattern(data.user, data.item, data.user_indptr, data.n_users, data.n_items)
    gU, gV = gradient(Ut, Vt, P, data.rating - data.rating.mean(), lam, r=r)
    return float(np.sqrt(np.sum(gU**2) + np.sum(gV**2)))
