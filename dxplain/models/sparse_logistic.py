"""ℓ1-regularised logistic regression, the sparse model of the representer paper (Cor. 2).

    min_{θ,b} (1/n) Σ_i ℓ(y_i, ⟨x_i,θ⟩ + b) + λ‖θ‖₁,   ℓ(y, s) = log(1 + eˢ) − y·s,  y ∈ {0, 1}

(the intercept b is not penalised). Solved with scipy's L-BFGS-B on the split θ = θ⁺ − θ⁻, θ± ≥ 0:
the bound-constrained problem is smooth, and coordinates that end on a bound are exactly zero, so the
support the ℓ1 representer uses is exact. X may be dense or scipy-sparse (p ≥ 50,000 features).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit


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


class L1Logistic:
    def __init__(self, lam: float, gtol: float = 1e-12, max_iter: int = 5000):
        self.lam, self.gtol, self.max_iter = lam, gtol, max_iter

    def fit(self, X, y) -> SparseLinearModel:
        X = sp.csr_array(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        n, p = X.shape
        lam = self.lam

        def fun(z):
            theta, b = z[:p] - z[p:2 * p], z[-1]
            s = np.asarray(X @ theta).ravel() + b
            loss = np.mean(np.logaddexp(0, s) - y * s)
            d, _ = loss_derivatives(y, s)
            g = np.asarray(X.T @ d).ravel() / n
            grad = np.concatenate([g + lam, -g + lam, [d.mean()]])
            return loss + lam * z[:2 * p].sum(), grad

        bounds = [(0, None)] * (2 * p) + [(None, None)]
        # The same initialisation (zeros) and solver for every fit: retraining after a deletion differs
        # from the original fit only in the data.
        res = minimize(fun, np.zeros(2 * p + 1), jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": self.max_iter, "maxfun": 2 * self.max_iter, "gtol": self.gtol,
                                "ftol": 1e-15, "maxcor": 20})
        theta, b = res.x[:p] - res.x[p:2 * p], float(res.x[-1])
        return SparseLinearModel(theta, b, lam, n, kkt_violation(X, y, theta, b, lam))
