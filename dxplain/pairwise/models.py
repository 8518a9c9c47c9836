"""Pairwise models to explain: any batched ζ(X_i, X_j) → scores, and three that come with the family.

* ``OPAUC`` (Gao et al., ICML 2013): AUC maximisation with the square loss, from each class's mean and
  covariance; the pairwise score is ζ(x_i, x_j) = wᵀ(x_i − x_j).
* ``LowRank`` metric learning: ζ(x_i, x_j) = (x_i − x_j)ᵀ L Lᵀ (x_i − x_j), L ∈ ℝ^{D×r}, learnt from similar
  (same label) and dissimilar pairs with the logistic loss log(1 + exp(s_ij (ζ − 1))), s = +1 similar,
  −1 dissimilar (a distance is small for similar pairs; the paper's sign is the other way round, which
  would reward large distances between similar points), or as a shrunk Fisher discriminant subspace,
  whichever cross-validates better.
* ``DotProduct``: ζ(a, b) = aᵀb, the project's MF and two-tower models seen as pairwise models over
  (user embedding, item embedding): ``factor_pairs`` gives the model and the two reference sets.

Both trained models see the features through a ``FeatureMap`` fitted on the training rows (a signed log
for heavy-tailed features, then standardisation) that is part of ζ, so ζ is stated (and explained) in
the raw features. Each has ``expectation``,
the weighted double sum of eq. 6 in O(K) instead of O(K²) (see ``dxplain.kernels.pairwise``), and
``auc(X, y)`` for the masking curves.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_factor, cho_solve, eigh
from scipy.optimize import minimize
from scipy.stats import rankdata

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
    """P(s_pos > s_neg) + ½ P(tie) (Mann–Whitney) for 0/1 labels y, from average ranks: O(n log n), so a
    metric's AUC over 10⁵ pairs never forms the positives × negatives table."""
    y = np.asarray(y)
    n_pos = int((y == 1).sum())
    n_neg = len(y) - n_pos
    ranks = rankdata(s)  # ties share their average rank: each tie counts ½
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auc_lower_bound(auc: float, n_pos: int, n_neg: int, z: float = 1.96) -> float:
    """auc − z·SE with Hanley & McNeil's (1982) standard error for n_pos positives and n_neg negatives: at
    z = 1.96 a one-sided 97.5% lower bound. A model whose bound is ≤ 0.5 ranks no better than chance on
    this test set, and Shapley values of its scores explain noise."""
    a = min(max(auc, 0.0), 1.0)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / max(n_pos * n_neg, 1)
    return float(auc - z * math.sqrt(max(var, 0.0)))


SKEW = 2.0  # |sample skewness| above which a feature goes through the signed log


class FeatureMap:
    """x ↦ z, fitted on the training rows: a heavy-tailed feature (|skewness| > ``SKEW``) first goes
    through g(x) = sign(x − m)·log(1 + |x − m|/s) (m its median, s its mean absolute deviation from m),
    then every feature is standardised. Both steps are invariant to a feature's unit and offset, so a
    model on z gives the same ranking however the columns are scaled.

    Why the log: the trained models' losses weigh a pair by how far apart it is, so a few values 10⁴ times
    the typical one (counts, run lengths, amounts) decide the fit (the spam-shaped set of
    benchmarks.pairwise.quality). The map is monotone per feature and part of ζ, so φ is still stated in
    the raw features."""

    def __init__(self, X: np.ndarray):
        m = np.median(X, axis=0)
        s = np.abs(X - m).mean(0)
        sd0 = X.std(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            skew = np.where(sd0 > 0, ((X - X.mean(0)) ** 3).mean(0) / sd0**3, 0.0)
        self.logged = (np.abs(skew) > SKEW) & (s > 0)
        self.m, self.s = m, np.where(s > 0, s, 1.0)
        Z = self._log(X)
        self.mu, sd = Z.mean(0), Z.std(0)
        self.sd = np.where(sd > 0, sd, 1.0)  # a constant feature keeps scale 1 (it never moves ζ)

    def _log(self, X: np.ndarray) -> np.ndarray:
        if not self.logged.any():
            return X
        u = (X - self.m) / self.s
        return np.where(self.logged, np.sign(u) * np.log1p(np.abs(u)), X)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return (self._log(X) - self.mu) / self.sd


class OPAUC:
    """Gao et al.'s OPAUC objective, ζ = wᵀ(x_i − x_j), minimised exactly from one pass's statistics.

    With the square loss the objective over every (positive, negative) training pair is a quadratic in w:

        L(w) = λ/2 ‖w‖² + ½ mean_{i∈+, j∈−} (1 − wᵀ(x_i − x_j))²
             = λ/2 ‖w‖² + ½ (1 − wᵀδ)² + ½ wᵀ(Γ₊ + Γ₋) w,        δ = c₊ − c₋,

    so ∇L = 0 ⇔ (λI + Γ₊ + Γ₋ + δδᵀ) w = δ. The class means c and covariances Γ are exactly what the paper's
    one pass keeps; its Algorithm 1 then takes SGD steps η₀/√t towards this w, which diverge when
    η₀‖x_t − c‖² > 2 on the first examples (docs/pairwise.md, raw WDBC). Solving the D × D system gives the
    objective's minimiser in one Cholesky, whatever the scaling.

    ``lam=None`` chooses λ from ``LAMBDAS`` by ``folds``-fold cross-validated AUC on the training rows
    (stratified, seeded); the chosen value is ``self.lam``.
    """

    LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)

    def __init__(self, lam: float | None = None, folds: int = 5, seed: int = 0):
        self.lam, self.folds, self.seed = lam, folds, seed

    @staticmethod
    def _solve(Z: np.ndarray, y: np.ndarray, lams) -> list[np.ndarray]:
        P, N = Z[y == 1], Z[y == 0]
        d = P.mean(0) - N.mean(0)
        S = np.cov(P, rowvar=False, bias=True) + np.cov(N, rowvar=False, bias=True) + np.outer(d, d)
        S = np.atleast_2d(S)
        return [cho_solve(cho_factor(S + lam * np.eye(len(d))), d) for lam in lams]

    def fit(self, X: np.ndarray, y: np.ndarray, label: str = "label") -> OPAUC:
        y = two_classes(y, label)
        if min(np.bincount(y, minlength=2)) < 2:
            raise InputError(
                f"label column {label!r} has {min(np.bincount(y))} row(s) of one class; OPAUC needs at least "
                "2 of each class in the training rows: give more rows of the rarer class"
            )
        self.features = FeatureMap(X)
        Z = self.features(X)
        lam = self.lam if self.lam is not None else self._choose_lam(Z, y)
        self.lam = lam
        self.w = self._solve(Z, y, [lam])[0]  # on the mapped features: ζ = wᵀ(z(x_i) − z(x_j))
        return self

    def _choose_lam(self, Z: np.ndarray, y: np.ndarray) -> float:
        fold = np.empty(len(y), np.int64)
        rng = np.random.default_rng([self.seed, 11])
        for c in (0, 1):  # stratified: each class dealt round-robin over the folds in a seeded order
            rows = rng.permutation(np.flatnonzero(y == c))
            fold[rows] = np.arange(len(rows)) % self.folds
        score = np.zeros(len(self.LAMBDAS))
        for f in range(self.folds):
            held, kept = fold == f, fold != f
            if min(np.bincount(y[kept], minlength=2)) < 2 or len(np.unique(y[held])) < 2:
                continue
            for n, w in enumerate(self._solve(Z[kept], y[kept], self.LAMBDAS)):
                score[n] += auc_scores(Z[held] @ w, y[held])
        return float(self.LAMBDAS[int(np.argmax(score))])  # ties: the smallest λ

    def describe(self) -> str:
        return f"λ={self.lam:g}"

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.features(X) @ self.w

    def mapped(self) -> LinearOnFeatures:
        """ζ on already mapped features (the explainer maps its reference rows once)."""
        return LinearOnFeatures(self.w)

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return self.mapped()(self.features(A), self.features(B))

    def expectation(self, A, p, B, q):
        return self.mapped().expectation(self.features(A), p, self.features(B), q)

    def auc(self, X: np.ndarray, y: np.ndarray) -> float:
        """Test AUC: P(ζ(x_pos, x_neg) > 0)."""
        return auc_scores(self.score(X), y)


class LowRank:
    """ζ = ‖Lᵀ(z(x_i) − z(x_j))‖², L ∈ ℝ^{D×r}, by one of two estimators of the same model:

    * ``"pairs"``: the mean logistic loss over ``n_pairs`` random training pairs + ``lam`` ‖L‖², by L-BFGS;
      it can learn a metric beyond the classes' means (features whose spread differs between classes);
    * ``"fisher"``: the discriminant subspace, L = the top min(r, classes − 1) generalised eigenvectors of
      the between-class scatter against the within-class scatter shrunk toward its mean variance,
      (1 − ρ) S_w + ρ (tr S_w / D) I (``shrinkage`` ρ); with many features and few rows the pair loss
      overfits where a shrunk discriminant does not.

    With neither ``lam`` nor ``shrinkage`` given, the estimator and its setting are chosen together from
    ``LAMBDAS`` and ``SHRINKAGES`` by ``folds``-fold cross-validation over the training rows (pairs within
    the kept rows, the held-out rows' pairs scored by the metric AUC), then refitted on every row; the
    choice is ``self.fit_by`` with ``self.lam`` or ``self.shrinkage``."""

    LAMBDAS = (1e-3, 1e-2, 1e-1, 1.0)
    SHRINKAGES = (0.01, 0.03, 0.1, 0.3, 0.5, 0.7, 0.9)

    def __init__(
        self,
        rank: int = 4,
        lam: float | None = None,
        shrinkage: float | None = None,
        n_pairs: int = 20_000,
        folds: int = 3,
        seed: int = 0,
    ):
        if lam is not None and shrinkage is not None:
            raise ValueError("give LowRank lam (the pair loss) or shrinkage (the discriminant), not both")
        if shrinkage is not None and not 0 < shrinkage <= 1:
            raise ValueError(f"shrinkage={shrinkage}: give 0 < ρ ≤ 1 (the weight of the identity target)")
        if rank < 1:
            raise ValueError(f"rank={rank}: the metric's rank is at least 1")
        self.rank, self.lam, self.shrinkage = rank, lam, shrinkage
        self.n_pairs, self.folds, self.seed = n_pairs, folds, seed

    @property
    def fit_by(self) -> str | None:
        """The estimator: ``"fisher"`` with a shrinkage, ``"pairs"`` with a λ, None before either is chosen."""
        return "fisher" if self.shrinkage is not None else "pairs" if self.lam is not None else None

    def fit(self, X: np.ndarray, y: np.ndarray, label: str = "label") -> LowRank:
        if len(np.unique(y)) < 2:
            raise InputError(
                f"label column {label!r} has one class; LowRank learns from similar and dissimilar "
                "pairs: give a label with at least two classes"
            )
        self.features = FeatureMap(X)
        Z = self.features(X)
        if self.fit_by is None:
            fit_by, setting = self._choose(Z, y)
            if fit_by == "pairs":
                self.lam = setting
            else:
                self.shrinkage = setting
        self.L = self._estimate(self.fit_by, Z, y)  # on the mapped features: ζ = ‖Lᵀ(z(x_i) − z(x_j))‖²
        return self

    def describe(self) -> str:
        if self.fit_by == "pairs":
            return f"pair loss, λ={self.lam:g}"
        return f"Fisher discriminant, shrinkage {self.shrinkage:g}"

    def _estimate(self, fit_by: str, Z: np.ndarray, y: np.ndarray, setting: float | None = None) -> np.ndarray:
        if fit_by == "pairs":
            return self._fit(Z, y, self.lam if setting is None else setting)
        return self._discriminant(Z, y, self.shrinkage if setting is None else setting)

    def _discriminant(self, Z: np.ndarray, y: np.ndarray, shrinkage: float) -> np.ndarray:
        n, D = Z.shape
        classes = np.unique(y)
        S_w, S_b, mean = np.zeros((D, D)), np.zeros((D, D)), Z.mean(0)
        for c in classes:
            Zc = Z[y == c]
            centred, d = Zc - Zc.mean(0), Zc.mean(0) - mean
            S_w += centred.T @ centred
            S_b += len(Zc) * np.outer(d, d)
        S_w /= n
        S_b /= n
        S = (1 - shrinkage) * S_w + shrinkage * (max(np.trace(S_w), 1e-12) / D) * np.eye(D)
        r = min(self.rank, len(classes) - 1, D)
        w, L = eigh(S_b, S, subset_by_index=(D - r, D - 1))  # Lᵀ S L = I: distances in shrunk within-class units
        # directions with no between-class spread (collinear class means) would weigh noise as much as signal
        keep = w > 1e-10 * w[-1]
        keep[-1] = True
        return L[:, keep][:, ::-1]

    def _fit(self, Z: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
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
            f = np.logaddexp(0, m).mean() + lam * (flat @ flat)
            g_m = s * 0.5 * (1 + np.tanh(m / 2)) / len(m)  # s·sigmoid(m)/n, overflow-free
            return f, (2 * dZ.T @ (g_m[:, None] * U)).ravel() + 2 * lam * flat

        L0 = rng.normal(scale=1 / np.sqrt(D), size=(D, r)).ravel()
        res = minimize(loss, L0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
        return res.x.reshape(D, r)

    def _choose(self, Z: np.ndarray, y: np.ndarray) -> tuple[str, float]:
        candidates = [("pairs", lam) for lam in self.LAMBDAS] + [("fisher", rho) for rho in self.SHRINKAGES]
        fold = np.random.default_rng([self.seed, 17]).permutation(len(y)) % self.folds
        score = np.zeros(len(candidates))
        for f in range(self.folds):
            held = fold == f
            a, b = np.triu_indices(int(held.sum()), k=1)
            if len(a) > self.MAX_AUC_PAIRS:
                keep = np.random.default_rng([self.seed, 19, f]).choice(len(a), self.MAX_AUC_PAIRS, replace=False)
                a, b = a[keep], b[keep]
            Zh, yh = Z[held], y[held]
            dissimilar = (yh[a] != yh[b]).astype(np.int64)
            if len(a) == 0 or dissimilar.min() == dissimilar.max() or len(np.unique(y[~held])) < 2:
                continue
            for n, (fit_by, setting) in enumerate(candidates):
                U = (Zh[a] - Zh[b]) @ self._estimate(fit_by, Z[~held], y[~held], setting)
                score[n] += auc_scores((U * U).sum(1), dissimilar)
        return candidates[int(np.argmax(score))]  # ties (or no usable fold): the pair loss's smallest λ

    def mapped(self) -> MetricOnFeatures:
        """ζ on already mapped features (the explainer maps its reference rows once)."""
        return MetricOnFeatures(self.L)

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return self.mapped()(self.features(A), self.features(B))

    def expectation(self, A, p, B, q):
        return self.mapped().expectation(self.features(A), p, self.features(B), q)

    MAX_AUC_PAIRS = 100_000

    def auc(self, X: np.ndarray, y: np.ndarray) -> float:
        """Metric AUC, P(ζ(dissimilar pair) > ζ(similar pair)), over every test pair, or over a fixed
        seeded sample of ``MAX_AUC_PAIRS`` of them when there are more (the same sample at every call, so
        the masking curve compares like with like)."""
        a, b = np.triu_indices(len(X), k=1)
        if len(a) > self.MAX_AUC_PAIRS:
            keep = np.sort(np.random.default_rng([self.seed, 13]).choice(len(a), self.MAX_AUC_PAIRS, replace=False))
            a, b = a[keep], b[keep]
        return auc_scores(self(X[a], X[b]), (y[a] != y[b]).astype(np.int64))


class LinearOnFeatures:
    """ζ(a, b) = wᵀ(a − b) on mapped features."""

    def __init__(self, w: np.ndarray):
        self.w = w

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return (A - B) @ self.w

    def expectation(self, A, p, B, q):
        # Σ_ab p_a q_b wᵀ(A_a − B_b) = Σ_a p_a wᵀA_a − Σ_b q_b wᵀB_b (p, q sum to 1)
        return np.einsum("ca,ca->c", A @ self.w, p) - np.einsum("cb,cb->c", B @ self.w, q)


class MetricOnFeatures:
    """ζ(a, b) = ‖Lᵀ(a − b)‖² on mapped features."""

    def __init__(self, L: np.ndarray):
        self.L = L

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
