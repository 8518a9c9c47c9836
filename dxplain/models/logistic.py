"""ℓ2-regularised logistic regression, trained to a stationary point with scipy's Newton-CG.

    min_θ (1/n) Σ_x c_x [−y log σ(θᵀx̃) − (1−y) log(1 − σ(θᵀx̃))] + (λ/2)‖w‖²,  θ = [w, b], x̃ = [x, 1]

(c_x = 1 unless sample weights are given; the intercept b is not penalised). The model the SBQ
applications explain and retrain (data cleaning, fixing flipped labels, summarisation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from ..kernels.fisher import with_intercept


@dataclass
class LogisticModel:
    theta: np.ndarray  # (p + 1,), intercept last
    lam: float
    n_train: int
    grad_norm: float

    def proba(self, X: np.ndarray) -> np.ndarray:
        return expit(with_intercept(X) @ self.theta)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.proba(X) >= 0.5).astype(np.int64)

    def log_likelihood(self, X: np.ndarray, y: np.ndarray) -> float:
        """Mean log p(y | x) on (X, y)."""
        s = with_intercept(X) @ self.theta
        return float(np.mean(np.where(np.asarray(y) == 1, log_expit(s), log_expit(-s))))

    def hessian(self, X: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        return objective_hessian(with_intercept(X), self.theta, self.lam, weight)


def objective_hessian(Xt: np.ndarray, theta: np.ndarray, lam: float, weight: np.ndarray | None = None) -> np.ndarray:
    """∇²θ of the training objective: (1/n) Σ c p(1−p) x̃x̃ᵀ + λ·diag(1,…,1,0) (the intercept is not penalised)."""
    q = expit(Xt @ theta)
    c = 1.0 if weight is None else weight
    pen = np.ones(Xt.shape[1])
    pen[-1] = 0.0
    return (Xt * (c * q * (1 - q))[:, None]).T @ Xt / len(Xt) + lam * np.diag(pen)


class LogisticRegression:
    def __init__(self, lam: float = 1e-3, gtol: float = 1e-10):
        self.lam, self.gtol = lam, gtol

    def fit(
        self, X: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, theta0: np.ndarray | None = None
    ) -> LogisticModel:
        Xt = with_intercept(X)
        y = np.asarray(y, dtype=np.float64)
        n, p = Xt.shape
        c = np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)
        pen = np.ones(p)
        pen[-1] = 0.0

        def fun(theta):
            s = Xt @ theta
            nll = -np.sum(c * (y * log_expit(s) + (1 - y) * log_expit(-s))) / n
            g = Xt.T @ (c * (expit(s) - y)) / n + self.lam * pen * theta
            return nll + 0.5 * self.lam * float(pen * theta @ theta), g

        res = minimize(
            fun,
            np.zeros(p) if theta0 is None else theta0,
            jac=True,
            method="trust-exact",
            hess=lambda theta: objective_hessian(Xt, theta, self.lam, c),
            options={"gtol": self.gtol, "maxiter": 500},
        )
        return LogisticModel(res.x, self.lam, n, float(np.linalg.norm(res.jac)))
