"""ℓ1-regularised logistic regression, the sparse model of the representer paper (Cor. 2).

    min_{θ,b} (1/n) Σ_i ℓ(y_i, ⟨x_i,θ⟩ + b) + λ‖θ‖₁,   ℓ(y, s) = log(1 + eˢ) − y·s,  y ∈ {0, 1}

(the intercept b is not penalised). Solved with scipy's L-BFGS-B on the split θ = θ⁺ − θ⁻, θ± ≥ 0:
the bound-constrained problem is smooth, and coordinates that end on a bound are exactly zero, so the
support the ℓ1 representer uses is exact. X may be dense or scipy-sparse (p ≥ 50,000 features).

On raw, badly scaled features (values in the hundreds, p ≫ n) L-BFGS-B stalls far from the optimum, so
proximal Newton finishes (glmnet's and liblinear's newGLMNET: a weighted-lasso model of the loss solved by
coordinate descent over the working set, then a line search), which is indifferent to feature scale. The
fit reports its KKT violation and warns (``ConvergenceWarning``) when it stays above ``kkt_tol``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit

from ..errors import ConvergenceWarning


@dataclass
class SparseLinearModel:
    theta: np.ndarray  # (p,), exactly sparse
    b: float
    lam: float
    n_train: int
    kkt_violation: float  # max over coordinates of the distance of −∇ℓ̄ from λ∂‖θ‖₁

    def decision(self, X) -> np.ndarray:
        return np.asarray(X @ self.theta).ravel() + self.b

    def predict(self, X) -> np.ndarray:
        return (self.decision(X) >= 0).astype(np.int64)

    @property
    def support(self) -> np.ndarray:
        return np.flatnonzero(self.theta)


def loss_derivatives(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ℓ'(y, s) = σ(s) − y and ℓ''(y, s) = σ(s)(1 − σ(s))."""
    q = expit(s)
    return q - y, q * (1 - q)


def kkt_violation(X, y, theta, b, lam) -> float:
    """max_j dist(−(1/n)Σ ℓ'_i x_ij, λ∂|θ_j|): zero exactly at the optimum."""
    g = np.asarray(X.T @ loss_derivatives(y, np.asarray(X @ theta).ravel() + b)[0]).ravel() / X.shape[0]
    on = theta != 0
    v = np.where(on, np.abs(g + lam * np.sign(theta)), np.maximum(np.abs(g) - lam, 0.0))
    return float(v.max(initial=0.0))


def _objective(X, y, theta, b, lam) -> float:
    s = np.asarray(X @ theta).ravel() + b
    return float(np.mean(np.logaddexp(0, s) - y * s) + lam * np.abs(theta).sum())


def _weighted_lasso_step(
    A: np.ndarray, w: np.ndarray, g: np.ndarray, theta: np.ndarray, lam: float, sweeps: int = 200, tol: float = 1e-13
) -> np.ndarray:
    """Δ minimising gᵀΔ + ½ΔᵀAᵀWAΔ/n + λ‖θ + Δ‖₁ over the columns of A (the last one the unpenalised
    intercept), by cyclic coordinate descent keeping r = AΔ: the inner solve of proximal Newton."""
    n, q = A.shape
    a = (w[:, None] * A * A).sum(axis=0) / n + 1e-12
    delta, r = np.zeros(q), np.zeros(n)
    for _ in range(sweeps):
        biggest = 0.0
        for j in range(q):
            col = A[:, j]
            c = g[j] + (w * col) @ r / n - a[j] * delta[j]  # gradient of the model at Δ_j = 0, others fixed
            if j == q - 1:
                new = -c / a[j]
            else:
                z = theta[j] - c / a[j]  # soft-threshold in θ + Δ
                new = np.sign(z) * max(abs(z) - lam / a[j], 0.0) - theta[j]
            if new != delta[j]:
                r += (new - delta[j]) * col
                biggest = max(biggest, abs(new - delta[j]))
                delta[j] = new
        if biggest <= tol * (1.0 + np.abs(theta).max()):
            break
    return delta


def proximal_newton(
    X, y, theta: np.ndarray, b: float, lam: float, tol: float, max_steps: int = 50
) -> tuple[np.ndarray, float]:
    """Polish (θ, b) to KKT ≤ ``tol`` by proximal Newton (glmnet's newGLMNET outer loop).

    Each step solves the weighted-lasso model of the loss (``_weighted_lasso_step``) over the working set
    (the support and every zero coordinate whose |g_j| > λ, i.e. would move), then backtracks on the true
    objective. Feature scale does not matter to it: each coordinate's curvature is its own.
    """
    n = X.shape[0]
    theta = theta.copy()
    F = _objective(X, y, theta, b, lam)
    for _ in range(max_steps):
        if kkt_violation(X, y, theta, b, lam) <= tol:
            break
        d, w = loss_derivatives(y, np.asarray(X @ theta).ravel() + b)
        g = np.asarray(X.T @ d).ravel() / n
        S = np.flatnonzero((theta != 0) | (np.abs(g) > lam))
        XS = X[:, S]
        A = np.asfortranarray(np.column_stack([XS.toarray() if sp.issparse(XS) else XS, np.ones(n)]))
        step = _weighted_lasso_step(A, w, np.concatenate([g[S], [d.mean()]]), np.append(theta[S], 0.0), lam)
        # Predicted decrease of the model (negative): the Armijo reference.
        decrease = float(
            np.concatenate([g[S], [d.mean()]]) @ step
            + lam * (np.abs(theta[S] + step[:-1]).sum() - np.abs(theta[S]).sum())
        )
        t = 1.0
        while t > 1e-10:
            new = theta.copy()
            new[S] += t * step[:-1]
            F_new = _objective(X, y, new, b + t * step[-1], lam)
            if F_new <= F + 1e-4 * t * decrease:
                theta, b, F = new, b + t * step[-1], F_new
                break
            t /= 2
        else:
            break  # no decrease left at rounding level
    return theta, b


class L1Logistic:
    """ℓ1 logistic regression (module docstring): ``max_iter`` L-BFGS-B iterations get close, the proximal
    Newton polish reaches the optimum.
    ``kkt_tol`` is the KKT violation the fit must reach before it stops quietly."""

    def __init__(self, lam: float, gtol: float = 1e-12, max_iter: int = 200, kkt_tol: float = 1e-8):
        self.lam, self.gtol, self.max_iter, self.kkt_tol = lam, gtol, max_iter, kkt_tol

    def fit(self, X, y) -> SparseLinearModel:
        X = sp.csr_array(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        n, p = X.shape
        lam = self.lam

        def fun(z):
            theta, b = z[:p] - z[p : 2 * p], z[-1]
            s = np.asarray(X @ theta).ravel() + b
            loss = np.mean(np.logaddexp(0, s) - y * s)
            d, _ = loss_derivatives(y, s)
            g = np.asarray(X.T @ d).ravel() / n
            grad = np.concatenate([g + lam, -g + lam, [d.mean()]])
            return loss + lam * z[: 2 * p].sum(), grad

        bounds = [(0, None)] * (2 * p) + [(None, None)]
        # The same initialisation (zeros) and solver for every fit: retraining after a deletion differs
        # from the original fit only in the data.
        res = minimize(
            fun,
            np.zeros(2 * p + 1),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={
                "maxiter": self.max_iter,
                "maxfun": 2 * self.max_iter,
                "gtol": self.gtol,
                "ftol": 1e-15,
                "maxcor": 20,
            },
        )
        theta, b = res.x[:p] - res.x[p : 2 * p], float(res.x[-1])
        kkt = kkt_violation(X, y, theta, b, lam)
        if kkt > self.kkt_tol:
            theta, b = proximal_newton(X, y, theta, b, lam, self.kkt_tol / 10)
            kkt = kkt_violation(X, y, theta, b, lam)
        if kkt > self.kkt_tol:
            warnings.warn(
                ConvergenceWarning(
                    f"ℓ1 logistic regression stopped at a KKT violation of {kkt:.1e}, above {self.kkt_tol:.0e} "
                    f"(λ = {lam:g}, n = {n}, p = {p}): its explanations are approximate; standardise the features "
                    "or raise λ"
                ),
                stacklevel=2,
            )
        return SparseLinearModel(theta, b, lam, n, kkt)
