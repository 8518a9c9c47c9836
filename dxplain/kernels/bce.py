"""Implicit-feedback matrix factorisation with weighted binary cross-entropy (docs/methods.md §1, App. C).

    f(U, V) = (1/|D|) Σ_{(i,j)∈D} c_ij ℓ(y_ij, s_ij) + (λ/2)(‖U‖²_F + ‖V‖²_F),   s_ij = ⟨U_i, V_j⟩
    ℓ(y, s) = softplus(s) − y·s     (= −y log σ(s) − (1−y) log(1−σ(s)))
    ℓ' = σ(s) − y,   ℓ'' = σ(s)(1 − σ(s))

D = P ∪ N: positives P (y = 1, c = 1) and negatives N (y = 0, c = w, the paper's 0.05). Two shapes of N:

* ``DenseTerms`` — N is every unobserved pair except an exclusion list (the paper's setting, and what a
  cleaned retrain drops). Terms are evaluated in tiles of users × the whole catalogue, each tile at most
  ``TILE_PAIRS`` pairs, so the users × items matrix is never held.
* ``SparseTerms`` — N is an explicit list (sampled negatives). Everything goes through sparse products.

Both give the objective with its gradient, the Hessian-vector product (for trust-region Newton) and
the per-row curvature Grams Σ_j c ℓ'' V_j V_jᵀ that FIA's restricted Hessians need.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import expit

from .als import Pattern, pair_scores, pattern_scores, ridge_solve_rows

log = logging.getLogger(__name__)

# Pairs in one dense tile of users × the catalogue (float64): 32 MB, below the size where allocations turn into
# fresh page-faulting mmaps (as for the explainer, kernels/representer.py).
TILE_PAIRS = 1 << 22


def csr_rows(indptr: np.ndarray, cols: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(local row, column) of the CSR entries of rows a:b."""
    lo, hi = indptr[a], indptr[b]
    rows = np.repeat(np.arange(b - a), np.diff(indptr[a : b + 1]))
    return rows, cols[lo:hi]


@dataclass
class DenseTerms:
    """D = P ∪ (all pairs − P − excluded): positives and exclusions as CSR over users.

    ``pos_indptr/pos_cols`` and ``excl_indptr/excl_cols`` hold sorted, disjoint columns per user.
    """

    n_users: int
    n_items: int
    pos_indptr: np.ndarray
    pos_cols: np.ndarray
    excl_indptr: np.ndarray
    excl_cols: np.ndarray
    w: float

    @property
    def n_pos(self) -> int:
        return int(self.pos_indptr[-1])

    @property
    def n_neg(self) -> int:
        return self.n_users * self.n_items - self.n_pos - int(self.excl_indptr[-1])

    @property
    def n_terms(self) -> int:
        return self.n_pos + self.n_neg

    def tile_rows(self) -> int:
        return max(1, TILE_PAIRS // max(1, self.n_items))

    def tiles(self):
        step = self.tile_rows()
        for a in range(0, self.n_users, step):
            yield a, min(self.n_users, a + step)

    def tile(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(C, Y) for users a:b: weights c_ij (1 on P, w on N, 0 where excluded) and labels y_ij."""
        C = np.full((b - a, self.n_items), self.w)
        Y = np.zeros((b - a, self.n_items))
        r, c = csr_rows(self.pos_indptr, self.pos_cols, a, b)
        C[r, c] = 1.0
        Y[r, c] = 1.0
        r, c = csr_rows(self.excl_indptr, self.excl_cols, a, b)
        C[r, c] = 0.0
        return C, Y

    def fun_grad(self, U, V, lam):
        n = self.n_terms
        f, gU, gV = 0.0, np.empty_like(U), np.zeros_like(V)
        for a, b in self.tiles():
            C, Y = self.tile(a, b)
            S = U[a:b] @ V.T
            f += float(np.sum(C * (np.logaddexp(0.0, S) - Y * S)))
            G = C * (expit(S) - Y) / n  # c ℓ' / |D|
            gU[a:b] = G @ V
            gV += G.T @ U[a:b]
        reg = 0.5 * lam * (np.sum(U * U) + np.sum(V * V))
        return f / n + reg, gU + lam * U, gV + lam * V

    def hessp(self, U, V, dU, dV, lam):
        """H·(dU, dV): with ds = dU Vᵀ + U dVᵀ and D = c ℓ'' ⊙ ds / |D|, G = c ℓ' / |D|:
        H_U = D V + G dV + λ dU,  H_V = Dᵀ U + Gᵀ dU + λ dV."""
        n = self.n_terms
        hU, hV = np.empty_like(U), np.zeros_like(V)
        for a, b in self.tiles():
            C, Y = self.tile(a, b)
            S = U[a:b] @ V.T
            sig = expit(S)
            G = C * (sig - Y) / n
            dS = dU[a:b] @ V.T + U[a:b] @ dV.T
            D = C * sig * (1.0 - sig) * dS / n
            hU[a:b] = D @ V + G @ dV
            hV += D.T @ U[a:b] + G.T @ dU[a:b]
        return hU + lam * dU, hV + lam * dV

    def curvature_grams(self, U, V):
        """Σ_j c ℓ''_ij V_j V_jᵀ / |D| per user and Σ_i c ℓ''_ij U_i U_iᵀ / |D| per item, as (n, k, k).

        One GEMM per tile against the k²-wide outer products (I×k² floats: fine for the catalogues
        FIA is run on; FIA is a baseline, the representer needs none of this)."""
        n, k = self.n_terms, U.shape[1]
        VV = np.einsum("ik,il->ikl", V, V).reshape(len(V), k * k)
        A = np.empty((len(U), k * k))
        B = np.zeros((len(V), k * k))
        for a, b in self.tiles():
            C, _ = self.tile(a, b)
            sig = expit(U[a:b] @ V.T)
            W = C * sig * (1.0 - sig) / n
            A[a:b] = W @ VV
            UU = np.einsum("ik,il->ikl", U[a:b], U[a:b]).reshape(b - a, k * k)
            B += W.T @ UU
        return A.reshape(-1, k, k), B.reshape(-1, k, k)


@dataclass
class SparseTerms:
    """D = P ∪ N with N an explicit list of pairs; ``u, i, y, c`` sorted by (user, item)."""

    n_users: int
    n_items: int
    u: np.ndarray
    i: np.ndarray
    y: np.ndarray
    c: np.ndarray
    w: float

    @classmethod
    def from_pairs(cls, n_users, n_items, pos_u, pos_i, neg_u, neg_i, w) -> SparseTerms:
        u = np.concatenate([pos_u, neg_u]).astype(np.intp)
        i = np.concatenate([pos_i, neg_i]).astype(np.intp)
        y = np.concatenate([np.ones(len(pos_u)), np.zeros(len(neg_u))])
        order = np.lexsort((i, u))
        return cls(n_users, n_items, u[order], i[order], y[order], np.where(y[order] > 0, 1.0, w), w)

    @property
    def n_pos(self) -> int:
        return int(np.sum(self.y > 0))

    @property
    def n_neg(self) -> int:
        return len(self.y) - self.n_pos

    @property
    def n_terms(self) -> int:
        return len(self.y)

    def negatives(self) -> tuple[np.ndarray, np.ndarray]:
        neg = self.y == 0
        return self.u[neg], self.i[neg]

    @cached_property
    def _pattern(self) -> Pattern:
        # Terms are sorted by (user, item): CSR over them needs only the row pointer, no sort per call.
        indptr = np.searchsorted(self.u, np.arange(self.n_users + 1)).astype(np.int64)
        return Pattern(self.u, self.i, indptr, self.n_users, self.n_items)

    def _matrix(self, values):
        return self._pattern.matrix(values)

    def fun_grad(self, U, V, lam):
        n = self.n_terms
        s = pair_scores(U, V, self.u, self.i)
        f = float(np.sum(self.c * (np.logaddexp(0.0, s) - self.y * s))) / n
        G = self._matrix(self.c * (expit(s) - self.y) / n)
        reg = 0.5 * lam * (np.sum(U * U) + np.sum(V * V))
        return f + reg, G @ V + lam * U, G.T @ U + lam * V

    def hessp(self, U, V, dU, dV, lam):
        n = self.n_terms
        s = pair_scores(U, V, self.u, self.i)
        sig = expit(s)
        G = self._matrix(self.c * (sig - self.y) / n)
        ds = pair_scores(dU, V, self.u, self.i) + pair_scores(U, dV, self.u, self.i)
        D = self._matrix(self.c * sig * (1.0 - sig) * ds / n)
        return D @ V + G @ dV + lam * dU, D.T @ U + G.T @ dU + lam * dV

    def curvature_grams(self, U, V, chunk: int = 4096):
        n, k = self.n_terms, U.shape[1]
        A = np.zeros((len(U), k, k))
        B = np.zeros((len(V), k, k))
        for a in range(0, len(self.u), chunk):
            u, i = self.u[a : a + chunk], self.i[a : a + chunk]
            Uu, Vi = U[u], V[i]
            sig = expit(np.einsum("nk,nk->n", Uu, Vi))
            W = (self.c[a : a + chunk] * sig * (1.0 - sig) / n)[:, None, None]
            np.add.at(A, u, W * np.einsum("nk,nl->nkl", Vi, Vi))
            np.add.at(B, i, W * np.einsum("nk,nl->nkl", Uu, Uu))
        return A, B


# Rows of D in CSR (``indptr, cols, y``) whose whole sums are in the slice: the passes a by-user or by-item
# part makes for training over parts (``models.als.losses.BCERows``). c = 1 on positives, w on negatives.
# A row's Newton iterations stop when ‖∇‖ ≤ NEWTON_RTOL of the size of its terms (rounding), or at NEWTON_MAX.
NEWTON_RTOL = 1e-11
NEWTON_MAX = 50


def term_weights(y: np.ndarray, w: float) -> np.ndarray:
    """c per entry: 1 on positives (y = 1), w on negatives."""
    return np.where(y > 0, 1.0, w)


def _row_objective(P: Pattern, s, y, c, X, ridge) -> np.ndarray:
    """Σ_j c ℓ(y, s) + ridge‖x‖² per row."""
    terms = c * (np.logaddexp(0.0, s) - y * s)
    return np.bincount(P.u, terms, minlength=len(X)) + ridge * np.einsum("rk,rk->r", X, X)


def newton_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    y: np.ndarray,
    w: float,
    F: np.ndarray,
    ridge: float,
    X0: np.ndarray | None = None,
    steps: int | None = None,
) -> tuple[np.ndarray, int]:
    """Each row's minimiser of Σ_{j∈C_r} c_j ℓ(y_j, ⟨x, F_j⟩) + ridge‖x‖²: one BCE half-step.

    The row problems are strictly convex (ridge > 0), so damped Newton converges from any start, here
    ``X0`` (a warm start: the previous sweep's rows) or 0. A Newton step is the weighted least squares
    (Σ c ℓ'' F Fᵀ + 2 ridge I) x⁺ = Σ c ℓ'' z F with z = s − ℓ'/ℓ'' (IRLS), which the fused ridge
    kernel solves with square-root weights; a step that raises a row's objective is halved.
    ``steps=None``: rows step until their gradient is rounding next to their terms (NEWTON_RTOL), so the
    result is stationary given F as an exact ridge half-step is. ``steps=s``: s steps, no gradient
    checks (warm-started alternating training: from the last sweep's rows one step is quadratically
    close, and the sweeps' own stop measures the whole gradient). Returns (X, Newton steps taken).
    """
    m, deg = len(indptr) - 1, np.diff(indptr)
    X = np.zeros((m, F.shape[1])) if X0 is None else np.array(X0, np.float64)
    c = term_weights(y, w)
    P = Pattern.of_rows(indptr, cols, len(F))
    F_norm = np.linalg.norm(F, axis=1)
    active = np.flatnonzero(deg > 0)  # rows without entries: x = 0 exactly
    X[deg == 0] = 0.0
    s = pattern_scores(X, F, P)
    objective = _row_objective(P, s, y, c, X, ridge)  # at X, row by row: what a step must not raise
    taken = 0
    while taken < (NEWTON_MAX if steps is None else steps):
        if steps is None:
            d1 = c * (expit(s) - y)  # c ℓ'
            g = P.matrix(d1) @ F + 2.0 * ridge * X
            size = P.matrix(np.abs(d1)) @ F_norm + 2.0 * ridge * np.linalg.norm(X, axis=1)
            active = active[np.linalg.norm(g[active], axis=1) > NEWTON_RTOL * size[active]]
            if not len(active):
                break
        # ℓ'' = σ(s)σ(−s) and z = s − ℓ'/ℓ'' without cancellation: s + 1/σ(s) = s + 1 + e^{−s} on positives,
        # s − 1/σ(−s) = s − 1 − e^{s} on negatives.
        sw = np.sqrt(c * expit(s) * expit(-s))
        z = np.where(y > 0, s + 1.0 + np.exp(-np.maximum(s, -700.0)), s - 1.0 - np.exp(np.minimum(s, 700.0)))
        X_new = ridge_solve_rows(indptr, cols, sw * z, F, 2.0 * ridge, rows=active, sw=sw)
        X_old, before = X[active], objective[active]
        for _ in range(40):  # halve the steps that went uphill (rare: far from the optimum)
            X[active] = X_new
            s = pattern_scores(X, F, P)
            after = _row_objective(P, s, y, c, X, ridge)[active]
            uphill = after > before + 1e-14 * np.abs(before)
            if not uphill.any():
                break
            X_new[uphill] = 0.5 * (X_new[uphill] + X_old[uphill])
        objective[active] = after
        taken += 1
    if steps is None and taken == NEWTON_MAX:
        log.warning(
            "BCE half-step: %d rows still above rounding before the last of %d Newton steps", len(active), NEWTON_MAX
        )
    return X, taken


def gradient_rows(indptr, cols, y, w: float, F_rows, F_cols, n: int, lam: float) -> tuple[np.ndarray, float]:
    """Rows of ∇f (users' rows of ∇_U f with F_rows = U's rows and F_cols = V, items' with the roles
    swapped), (1/|D|) Σ c ℓ' F_j + λ F_r, and the slice's Σ c ℓ. ``n`` = |D| of the whole table."""
    c = term_weights(y, w)
    P = Pattern.of_rows(indptr, cols, len(F_cols))
    s = pattern_scores(F_rows, F_cols, P)
    return P.matrix(c * (expit(s) - y) / n) @ F_cols + lam * F_rows, float(np.sum(c * (np.logaddexp(0.0, s) - y * s)))


def hessian_rows(indptr, cols, y, w: float, F_rows, F_cols, dF_rows, dF_cols, n: int, lam: float) -> np.ndarray:
    """Rows of ``SparseTerms.hessp`` from a slice that holds those rows' whole sums (as ``gradient_rows``):
    (1/|D|)(Σ c ℓ'' ds_j F_j + c ℓ' dF_j) + λ dF_r, ds_j = ⟨dF_r, F_j⟩ + ⟨F_r, dF_j⟩."""
    c = term_weights(y, w)
    P = Pattern.of_rows(indptr, cols, len(F_cols))
    sig = expit(pattern_scores(F_rows, F_cols, P))
    ds = pattern_scores(dF_rows, F_cols, P) + pattern_scores(F_rows, dF_cols, P)
    return P.matrix(c * sig * (1.0 - sig) * ds / n) @ F_cols + P.matrix(c * (sig - y) / n) @ dF_cols + lam * dF_rows


def curvature_rows(indptr, cols, y, w: float, F_rows, F_cols, n: int) -> np.ndarray:
    """Rows of ``SparseTerms.curvature_grams``: (1/|D|) Σ c ℓ'' F_j F_jᵀ per row, as (rows, k, k)."""
    c = term_weights(y, w)
    k = F_cols.shape[1]
    P = Pattern.of_rows(indptr, cols, len(F_cols))
    sig = expit(pattern_scores(F_rows, F_cols, P))
    return (
        P.matrix(c * sig * (1.0 - sig) / n) @ np.einsum("ik,il->ikl", F_cols, F_cols).reshape(len(F_cols), k * k)
    ).reshape(-1, k, k)
