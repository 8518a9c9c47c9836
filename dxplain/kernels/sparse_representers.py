"""Sample importances for a sparse linear model θ̂ (ℓ1 logistic regression), one column per target.

For θ̂ = argmin (1/n)Σ ℓ(y_i, ⟨x_i,θ⟩ + b) + λ‖θ‖₁ (docs/methods.md §1), with α_i = −ℓ'_i/(nλ):

    ℓ1 representer (Cor. 2)   I(i, x') = α_i ⟨|θ̂| ⊙ x_i, x'⟩          (only the support of θ̂ counts;
                                                                        Σ_i I(i, x') = ⟨x', θ̂⟩ exactly)
    ℓ2 representer            I(i, x') = −ℓ'_i ⟨x_i, x'⟩
    influence function on the active set q (Avella-Medina 2017, Prop. 5.3)
                              I(i, x') = −(∇_{θ_q} ℓ_i / n + λ sign(θ̂)_q)ᵀ H_q⁻¹ x'_q,  H_q = Σ_i ∇²_{θ_q} ℓ_i

Positive importance: the sample pushes the target's score up. X and X_t may be scipy-sparse; each
function returns a dense (n, T) array.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve


def _dense(a) -> np.ndarray:
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def l1_representer(X, alpha: np.ndarray, theta: np.ndarray, X_t) -> np.ndarray:
    q = np.flatnonzero(theta)
    Xq, Xtq = X[:, q], X_t[:, q]
    return alpha[:, None] * _dense(Xq @ (sp.diags(np.abs(theta[q])) @ Xtq.T))


def l2_representer(X, dloss: np.ndarray, X_t) -> np.ndarray:
    return -dloss[:, None] * _dense(X @ X_t.T)


# Relative damping of a restricted Hessian that is not positive definite (more support coordinates than the
# data pins down, or collinear features): H + δI with δ = INFLUENCE_DAMPING·mean(diag H).
INFLUENCE_DAMPING = 1e-6


def _damped_cholesky(H: np.ndarray):
    """Cholesky of H, or of H + δI (δ = INFLUENCE_DAMPING·mean diag, then ×10 up to 1e-2) when H is singular."""
    try:
        return cho_factor(H)
    except np.linalg.LinAlgError:
        scale = float(np.mean(np.diag(H))) or 1.0
        for damping in INFLUENCE_DAMPING * 10.0 ** np.arange(5):
            try:
                return cho_factor(H + damping * scale * np.eye(len(H)))
            except np.linalg.LinAlgError:
                continue
        raise


def influence_active_set(X, dloss: np.ndarray, d2loss: np.ndarray, theta: np.ndarray, lam: float, X_t) -> np.ndarray:
    q = np.flatnonzero(theta)
    n = X.shape[0]
    Xq = X[:, q]
    H = _dense(Xq.T @ (sp.diags(d2loss) @ Xq))
    W = cho_solve(_damped_cholesky(H), _dense(X_t[:, q]).T)  # H_q⁻¹ x'_q for every target, (q, T)
    return -(dloss[:, None] / n) * _dense(Xq @ W) - (lam * np.sign(theta[q]) @ W)[None, :]
