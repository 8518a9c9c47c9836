"""Implicit-feedback matrix factorisation with weighted binary cross-entropy (docs/methods.md §1, App. C).

    f(U, V) = (1/|D|) Σ_{(i,j)∈D} c_ij ℓ(y_ij, s_ij) + (λ/2)(‖U‖²_F + ‖V‖²_F),   s_ij = ⟨U_i, V_j⟩
    ℓ(y, s) = softplus(s) − y·s     (= −y log σ(s) − (1−y) log(1−σ(s)))
    ℓ' = σ(s) − y,   ℓ'' = σ(s)(1 − σ(s))

D = P ∪ N: positives P (y = 1, c = 1) and negatives N (y = 0, c = w, the paper's 0.05). Two shapes of N:

* ``DenseTerms`` — N is every unobserved pair except an exclusion list (the paper's setting, and what a
  cleaned retrain drops). Terms are evaluated in user blocks × the whole catalogue, each block at most
  ``BLOCK_ELEMENTS`` pairs, so the users × items matrix is never held.
* ``SparseTerms`` — N is an explicit list (sampled negatives). Everything goes through sparse products.

Both give the objective with its gradient, the Hessian-vector product (for trust-region Newton) and
the per-row curvature Grams Σ_j c ℓ'' V_j V_jᵀ that FIA's restricted Hessians need.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import expit

from .als import Pattern, pair_scores

# Pairs in one dense user block × catalogue (float64): 32 MB, below the size where allocations turn into
# fresh page-faulting mmaps (measured for the explainer, kernels/representer.py).
BLOCK_ELEMENTS = 1 << 22


def csr_rows(indptr: np.ndarray, cols: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(local row, column) of the CSR entries of rows a:b."""
    lo, hi = indptr[a], indptr[b]
    rows = np.repeat(np.arange(b - a), np.diff(indptr[a:b + 1]))
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

    def block_rows(self) -> int:
        return max(1, BLOCK_ELEMENTS // max(1, self.n_items))

    def blocks(self):
        step = self.block_rows()
        for a in range(0, self.n_users, step):
            yield a, min(self.n_users, a + step)

    def block(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
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
        for a, b in self.blocks():
            C, Y = self.block(a, b)
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
        for a, b in self.blocks():
            C, Y = self.block(a, b)
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

        One GEMM per block against the k²-wide outer products (I×k² floats: fine for the catalogues
        FIA is run on; FIA is a baseline, the representer needs none of this)."""
        n, k = self.n_terms, U.shape[1]
        VV = np.einsum("ik,il->ikl", V, V).reshape(len(V), k * k)
        A = np.empty((len(U), k * k))
        B = np.zeros((len(V), k * k))
        for a, b in self.blocks():
            C, _ = self.block(a, b)
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
    def from_pairs(cls, n_users, n_items, pos_u, pos_i, neg_u, neg_i, w) -> "SparseTerms":
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
            u, i = self.u[a:a + chunk], self.i[a:a + chunk]
            Uu, Vi = U[u], V[i]
            sig = expit(np.einsum("nk,nk->n", Uu, Vi))
            W = (self.c[a:a + chunk] * sig * (1.0 - sig) / n)[:, None, None]
            np.add.at(A, u, W * np.einsum("nk,nl->nkl", Vi, Vi))
            np.add.at(B, i, W * np.einsum("nk,nl->nkl", Uu, Uu))
        return A, B
