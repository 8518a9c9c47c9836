"""Case-deletion trials for sparse linear models: ℓ1 representer against ℓ2 representer, IF and random.

One trial = a random train/test split, an ℓ1 logistic regression fitted on it, T random test points
as targets, and for every (target, method, sign) the deletion curve over k = 1%…5% of the samples of
that sign (``explain.deletion``). Every retraining uses the same initialisation (zeros) and solver.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..kernels import sparse_representers as R
from ..models.sparse_logistic import L1Logistic, SparseLinearModel, loss_derivatives
from .deletion import FRACTIONS, Job, plan_jobs

SPARSE_METHODS = ("l1-representer", "l2-representer", "influence", "random")


@dataclass
class SparseCase:
    """Training data, targets, and the model fitted on all of the training data."""

    X: np.ndarray | sp.csr_array
    y: np.ndarray
    X_t: np.ndarray | sp.csr_array
    lam: float
    model: SparseLinearModel
    gtol: float = 1e-12

    @property
    def n_targets(self) -> int:
        return self.X_t.shape[0]

    @classmethod
    def fit(cls, X, y, X_t, lam: float, gtol: float = 1e-12) -> SparseCase:
        return cls(X, y, X_t, lam, L1Logistic(lam, gtol).fit(X, y), gtol)

    def prediction(self, target: int, without: np.ndarray | None = None) -> float:
        """Decision score ⟨x′,θ⟩ + b of target x′, by the model retrained without the given rows."""
        model = self.model
        if without is not None:
            keep = np.ones(self.X.shape[0], dtype=bool)
            keep[without] = False
            model = L1Logistic(self.lam, self.gtol).fit(self.X[keep], self.y[keep])
        return float(model.decision(self.X_t[[target]])[0])


def importances(case: SparseCase, method: str, seed: int = 0) -> np.ndarray:
    """(n, T) importance of every training sample for every target."""
    m, X = case.model, case.X
    s = m.decision(X)
    dloss, d2loss = loss_derivatives(case.y, s)
    if method == "l1-representer":
        return R.l1_representer(X, -dloss / (X.shape[0] * m.lam), m.theta, case.X_t)
    if method == "l2-representer":
        return R.l2_representer(X, dloss, case.X_t)
    if method == "influence":
        return R.influence_active_set(X, dloss, d2loss, m.theta, m.lam, case.X_t)
    if method == "random":
        return np.random.default_rng(seed).normal(size=(X.shape[0], case.X_t.shape[0]))
    raise ValueError(f"unknown method {method!r}; choose from {SPARSE_METHODS}")


def plan(case: SparseCase, methods=SPARSE_METHODS, seed: int = 0, fractions=FRACTIONS) -> tuple[list[Job], dict]:
    """Every (target, method, sign) deletion curve of a trial, and each method's ms per explained target."""

    def scores_of(method):
        scores = importances(case, method, seed)
        return [(None, scores[:, t]) for t in range(case.n_targets)]

    return plan_jobs(methods, case.n_targets, scores_of, fractions)


def trial_case(
    X, y, trial: int, n_targets: int, n_lam: float = 1.0, test_share: float = 0.2, gtol: float = 1e-12
) -> SparseCase:
    """Trial ``trial``: its own random split, dense features standardised on the training part,
    ``n_targets`` random test points, λ = n_lam / n_train (the paper's n·λ)."""
    rng = np.random.default_rng(trial)
    order = rng.permutation(X.shape[0])
    n_test = int(round(test_share * X.shape[0]))
    te, tr = order[:n_test], np.sort(order[n_test:])
    if not sp.issparse(X):
        mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
        X = (X - mu) / np.where(sd > 0, sd, 1.0)
    targets = np.sort(rng.choice(te, min(n_targets, len(te)), replace=False))
    return SparseCase.fit(X[tr], y[tr], X[targets], n_lam / len(tr), gtol)
