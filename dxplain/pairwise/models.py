"""Pairwise models to explain: any batched ζ(X_i, X_j) → scores, and three that come with the family.

* ``OPAUC`` (Gao et al., ICML 2013): one-pass AUC maximisation with the square loss, keeping each class's
  running mean and covariance; the pairwise score is ζ(x_i, x_j) = wᵀ(x_i − x_j).
* ``LowRank`` metric learning: ζ(x_i, x_j) = (x_i − x_j)ᵀ L Lᵀ (x_i − x_j), L ∈ ℝ^{D×r}, learnt from similar
  (same label) and dissimilar pairs with the logistic loss log(1 + exp(s_ij (ζ − 1))), s = +1 similar,
  −1 dissimilar (a distance is small for similar pairs; the paper's sign is the other way round, which
  would reward large distances between similar points).
* ``DotProduct``: ζ(a, b) = aᵀb, the project's MF and two-tower models seen as pairwise models over
  (user embedding, item embedding): ``factor_pairs`` gives the model and the two reference sets.

Both trained models standardise the features with the training mean and spread and fold that scaling
into their parameters, so ζ is stated (and explained) in the raw features. Each has ``expectation``,
the weighted double sum of eq. 6 in O(K) instead of O(K²) (see ``dxplain.kernels.pairwise``), and
``auc(X, y)`` for the masking curves.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from ..errors import InputError


def two_classes(y: np.ndarray, label: str = "label") -> np.ndarray:
    """y as 0/1 (the larger value is the positive class); InputError unless there are exactly two."""
    classes = np.unique(y)
    if len(classes) != 2:
        shown = ", ".join(map(str, classes[:6])) + (", …" if len(classes) > 6 else "")
        raise InputError(
            f"label column {label!r} has {len(classes)} classes ({shown}); OPAUC needs exactly two: "
            "give a binary label column"
        )
    return (y == classes[1]).astype(np.int64)


def auc_scores(s: np.ndarray, y: np.ndarray) -> float:
    """P(s_pos > s_neg) + ½ P(tie) (Mann–Whitney) for 0/1 labels y."""
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def _scale(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = X.mean(0), X.std(0)
    return mu, np.where(sd > 0, sd, 1.0)  # a constant feature keeps scale 1 (it never moves ζ)


class OPAUC:
    """One-pass AUC optimisation (Gao et al. 2013, Algorithm 1, full covariance), ζ = wᵀ(x_i − x_j).

    Per example x_t of class y: update that class's count, mean c_y and covariance Γ_y, then step
    w ← w − η_t ∇L_t(w) with ∇L_t = λw − y(x_t − c_ȳ) + (x_t − c_ȳ)(x_t − c_ȳ)ᵀw + Γ_ȳ w against the other
    class ȳ seen so far. ``epochs`` passes (1 = the paper's one pass), η_t = eta0 / √t.
    """

    def __init__(self, lam: float = 1e-4, eta0: float = 0.1, epochs: int = 5, seed: int = 0):
        self.lam, self.eta0, self.epochs, self.seed = lam, eta0, epochs, seed

    def fit(self, X: np.ndarray, y: np.ndarray, label: str = "label") -> OPAUC:
        y = two_classes(y, label)
        mu, sd = _scale(X)
        Z = (X - mu) / sd
        D = Z.shape[1]
        n, c, G = np.zeros(2), np.zeros((2, D)), np.zeros((2, D, D))
        w = np.zeros(D)
        rng = np.random.default_rng(self.seed)
        t = 0
        for _ in range(self.epochs):
            for k in rng.permutation(len(Z)):
                x, cls = Z[k], y[k]
                n[cls] += 1
                old = c[cls].copy()
                c[cls] += (x - old) / n[cls]
                G[cls] += (np.outer(x - old, x - c[cls]) - G[cls]) / n[cls]  # Welford covariance
                other = 1 - cls
                if n[other] == 0:
                    continue
                t += 1
                d = x - c[other]
                sign = 1.0 if cls == 1 else -1.0
                grad = self.lam * w - sign * d + d * (d @ w) + G[other] @ w
                w -= self.eta0 / np.sqrt(t) * grad
        self.w = w / sd  # ζ in raw features: wᵀ((x_i − μ)/s − (x_j − μ)/s) = (w/s)ᵀ(x_i − x_j)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        return X @ self.w

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return (A - B) @ self.w

    def expectation(self, A, p, B, q):
        # Σ_ab p_a q_b wᵀ(A_a − B_b) = Σ_a p_a wᵀA_a − Σ_b q_b wᵀB_b (p, q sum to 1)
        return np.einsum("ca,ca->c", A @ self.w, p) - np.einsum("cb,cb->c", B @ self.w, q)

    def auc(self, X: np.ndarray, y: np.ndarray) -> float:
        """Test AUC: P(ζ(x_pos, x_neg) > 0)."""
        return auc_scores(self.score(X), y)


class LowRank:
    """ζ = ‖Lᵀ(x_i − x_j)‖², L ∈ ℝ^{D×r}, from ``n_pairs`` random training pairs by L-BFGS on the mean
    logistic loss + ``lam`` ‖L‖²."""

    def __init__(self, rank: int = 4, lam: float = 1e-3, n_pairs: int = 4000, seed: int = 0):
        self.rank, self.lam, self.n_pairs, self.seed = rank, lam, n_pairs, seed

    def fit(self, X: np.ndarray, y: np.ndarray, label: str = "label") -> LowRank:
        if len(np.unique(y)) < 2:
            raise InputError(
                f"label column {label!r} has one class; LowRank learns from similar and dissimilar "
                "pairs: give a label with at least two classes"
            )
        mu, sd = _scale(X)
        Z = (X - mu) / sd
        n, D = Z.shape
        r = min(self.rank, D)
        rng = np.random.default_rng(self.seed)
        a, b = rng.integers(0, n, self.n_pairs), rng.integers(0, n, self.n_pairs)
        keep = a != b
        dZ, s = Z[a[keep]] - Z[b[keep]], np.where(y[a[keep]] == y[b[keep]], 1.0, -1.0)

        def loss(flat):
            L = flat.reshape(D, r)
            U = dZ @ L
            m = s * ((U * U).sum(1) - 1.0)
            f = np.logaddexp(0, m).mean() + self.lam * (flat @ flat)
            g_m = s * 0.5 * (1 + np.tanh(m / 2)) / len(m)  # s·sigmoid(m)/n, overflow-free
            return f, (2 * dZ.T @ (g_m[:, None] * U)).ravel() + 2 * self.lam * flat

        L0 = rng.normal(scale=1 / np.sqrt(D), size=(D, r)).ravel()
        res = minimize(loss, L0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
        self.L = res.x.reshape(D, r) / sd[:, None]  # raw features: Lᵀ((x_i − x_j)/s)
        return self

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        U = (A - B) @ self.L
        return (U * U).sum(-1)

    def expectation(self, A, p, B, q):
        # E‖Lᵀ(a − b)‖² = E_p‖Lᵀa‖² + E_q‖Lᵀb‖² − 2 (E_p Lᵀa)ᵀ(E_q Lᵀb): a and b independent in eq. 6
        U, V = A @ self.L, B @ self.L
        mu, mv = np.einsum("ca,car->cr", p, U), np.einsum("cb,cbr->cr", q, V)
        return (
            np.einsum("ca,ca->c", p, (U * U).sum(-1))
            + np.einsum("cb,cb->c", q, (V * V).sum(-1))
            - 2 * (mu * mv).sum(-1)
        )

    def auc(self, X: np.ndarray, y: np.ndarray) -> float:
        """Metric AUC over every test pair: P(ζ(dissimilar pair) > ζ(similar pair))."""
        a, b = np.triu_indices(len(X), k=1)
        return auc_scores(self(X[a], X[b]), (y[a] != y[b]).astype(np.int64))


class DotProduct:
    """ζ(a, b) = aᵀb: a factor model's score of (user embedding, item embedding)."""

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return (A * B).sum(-1)

    def expectation(self, A, p, B, q):
        return (np.einsum("ca,cad->cd", p, A) * np.einsum("cb,cbd->cd", q, B)).sum(-1)


def factor_pairs(model) -> tuple[DotProduct, np.ndarray, np.ndarray]:
    """An MF or two-tower ``FactorModel`` as a pairwise model: (ζ, user reference U, item reference V),
    explaining a (user, item) score ⟨U_u, V_i⟩ by its k embedding coordinates."""
    return DotProduct(), np.asarray(model.U, dtype=float), np.asarray(model.V, dtype=float)


MODELS = {"opauc": OPAUC, "lowrank": LowRank}
