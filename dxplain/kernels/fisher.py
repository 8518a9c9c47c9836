"""Fisher-kernel feature maps: φ(x) = L⁻¹ g(x) with F = LLᵀ, so φ(x)ᵀφ(x') = g(x)ᵀ F⁻¹ g(x').

g(x) = ∇_θ log p(x | θ̂) is the per-sample score; F the Fisher information (docs/methods.md §2):

    "empirical"  F = (1/n) Σ_x g(x) g(x)ᵀ over the training samples
    "expected"   F = E_y[g gᵀ] under the model (logistic: (1/n) Σ p(1−p) x̃x̃ᵀ; Gaussian MF: σ̂²(1/n)Σ ∇f∇fᵀ)
    "identity"   F = I, the "practical" Fisher kernel (influence functions' special case)

F + δI is factorised, δ = ``damping``·tr(F)/p: users or items with fewer samples than k make their
empirical F_o singular, and δ keeps their embeddings finite without changing well-determined ones.

Shapes of F: full p×p for logistic regression (Cholesky); for matrix factorisation g has a user half and
an item half, and F keeps only its per-owner k×k matrices F_o (one per user and per item, the user–item
cross terms dropped), each factorised exactly: the whitener W_o = L_o⁻¹, F_o + δI = L_o L_oᵀ. So φ is a
sparse row with 2k entries in a (n_users + n_items)·k space. For a user-supplied gradient matrix, F is
full, diagonal or low-rank-plus-δ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.special import expit

from .lookup import find_sorted

FISHER_KINDS = ("empirical", "expected", "identity")
DEFAULT_DAMPING = 1e-3
CHUNK_ROWS = 8192  # rows per batched k×k product: CHUNK_ROWS·k² floats of gathered matrices


def _damped(F: np.ndarray, damping: float) -> np.ndarray:
    p = F.shape[-1]
    delta = damping * np.trace(F, axis1=-2, axis2=-1).mean() / p
    return F + max(delta, np.finfo(float).tiny) * np.eye(p)


# ---- full F (logistic regression, user-supplied gradients) --------------------------------------------------


def whiten_full(F: np.ndarray, damping: float = DEFAULT_DAMPING):
    """Return φ(G) = G L⁻ᵀ for F + δI = LLᵀ (Cholesky)."""
    L = np.linalg.cholesky(_damped(F, damping))
    return lambda G: solve_triangular(L, np.asarray(G, dtype=np.float64).T, lower=True, check_finite=False).T


def whiten_diagonal(G_fit: np.ndarray, damping: float = DEFAULT_DAMPING):
    """F ≈ diag((1/n) Σ g²) + δI: φ = g / √F_diag."""
    F = np.mean(np.asarray(G_fit) ** 2, axis=0)
    scale = 1.0 / np.sqrt(F + max(damping * F.mean(), np.finfo(float).tiny))
    return lambda G: np.asarray(G, dtype=np.float64) * scale


def whiten_lowrank(G_fit: np.ndarray, rank: int, damping: float = DEFAULT_DAMPING):
    """F ≈ Q diag(s²) Qᵀ + δI from the top ``rank`` singular pairs of G/√n; φ = F^{-1/2} g with
    F^{-1/2} = Q diag((s²+δ)^{-1/2}) Qᵀ + δ^{-1/2}(I − QQᵀ). Exact when rank ≥ rank(G)."""
    G_fit = np.asarray(G_fit, dtype=np.float64)
    n, p = G_fit.shape
    _, s, Qt = np.linalg.svd(G_fit / np.sqrt(n), full_matrices=False)
    delta = max(damping * float(s @ s) / p, np.finfo(float).tiny)
    Q, s = Qt[:rank].T, s[:rank]
    a, b = 1.0 / np.sqrt(s**2 + delta), 1.0 / np.sqrt(delta)

    def phi(G):
        G = np.asarray(G, dtype=np.float64)
        P = G @ Q
        return b * G + (P * (a - b)) @ Q.T

    return phi


# ---- logistic regression -----------------------------------------------------------------------------------


def with_intercept(X: np.ndarray) -> np.ndarray:
    return np.hstack([np.asarray(X, dtype=np.float64), np.ones((len(X), 1))])


def logistic_scores(X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """g(x, y) = ∇_θ log p(y | x, θ) = (y − σ(θᵀx̃)) x̃ for y ∈ {0, 1}, x̃ = [x, 1]."""
    Xt = with_intercept(X)
    return (np.asarray(y, dtype=np.float64) - expit(Xt @ theta))[:, None] * Xt


def logistic_fisher(X: np.ndarray, y: np.ndarray, theta: np.ndarray, kind: str) -> np.ndarray:
    Xt = with_intercept(X)
    if kind == "empirical":
        G = logistic_scores(X, y, theta)
        return G.T @ G / len(G)
    if kind == "expected":
        p = expit(Xt @ theta)
        return (Xt * (p * (1 - p))[:, None]).T @ Xt / len(Xt)
    if kind == "identity":
        return np.eye(Xt.shape[1])
    raise ValueError(f"unknown Fisher kind {kind!r}; choose one of {FISHER_KINDS}")


def logistic_embedding(X, y, theta, X_t, y_t, kind: str = "empirical", damping: float = DEFAULT_DAMPING):
    """Φ for training points (X, y) and targets (X_t, y_t) under the Fisher kernel of a fitted model."""
    if kind == "identity":
        return logistic_scores(X, y, theta), logistic_scores(X_t, y_t, theta)
    phi = whiten_full(logistic_fisher(X, y, theta, kind), damping)
    return phi(logistic_scores(X, y, theta)), phi(logistic_scores(X_t, y_t, theta))


def self_influence(G: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Koh & Liang's self-influence g_xᵀ H⁻¹ g_x of each training point (H: the objective's Hessian)."""
    W = cho_solve(cho_factor(H), G.T)
    return np.einsum("ij,ji->i", G, W)


# ---- matrix factorisation ----------------------------------------------------------------------------------


def mf_scores(U, V, users, items, residual=None) -> tuple[np.ndarray, np.ndarray]:
    """User and item halves of g for pairs (users, items): r·V_j and r·U_i, r the residual y − ŷ
    (Gaussian log-likelihood up to 1/σ²). ``residual=None`` gives ∇ŷ itself, for targets that have no
    label (a recommendation): the direction in which the prediction moves."""
    gU, gV = V[items].astype(np.float64), U[users].astype(np.float64)
    if residual is not None:
        gU *= residual[:, None]
        gV *= residual[:, None]
    return gU, gV


def _row_grams(M: sp.csr_array, g_other: np.ndarray) -> np.ndarray:
    """Σ_j M_bj g_j g_jᵀ for every row b of M, as (n_rows, k, k): one sparse product against the table
    of per-column outer products (as ``kernels.als.curvature_grams``), O(nnz·k²) without a Python loop."""
    k = g_other.shape[1]
    return np.asarray(M @ np.einsum("ik,il->ikl", g_other, g_other).reshape(len(g_other), k * k)).reshape(-1, k, k)


def mf_fisher_grams(
    U, V, users, items, residual, kind: str, curvature: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-user and per-item k×k matrices F_o of F over the training pairs (the user–item cross terms are
    dropped, docs/methods.md §2).

    ``empirical`` weighs each pair's ∇s∇sᵀ by r², ``expected`` by the loss's E_y[r²]: ``curvature`` per
    pair when given (BCE: c²σ(1−σ)), else the Gaussian σ̂² = mean(r²)."""
    n = len(users)
    k = U.shape[1]
    if kind == "identity":
        return np.broadcast_to(np.eye(k), (len(U), k, k)), np.broadcast_to(np.eye(k), (len(V), k, k))
    if kind not in ("empirical", "expected"):
        raise ValueError(f"unknown Fisher kind {kind!r}; choose one of {FISHER_KINDS}")
    w = fisher_weights(kind, residual, curvature, n, float(np.mean(residual**2)))
    M = sp.csr_array((w, (users, items)), shape=(len(U), len(V)))  # one entry per (user, item) pair
    return _row_grams(M, V.astype(np.float64)), _row_grams(sp.csr_array(M.T), U.astype(np.float64))


def inverse_cholesky(F: np.ndarray, damping: float) -> np.ndarray:
    """Whiteners W_o = L_o⁻¹ of every owner, F_o + δI = L_o L_oᵀ (δ from the mean trace over all owners)."""
    k = F.shape[-1]
    return damped_inverse_factor(F, damping * float(np.trace(F, axis1=-2, axis2=-1).mean()) / k)


def damped_inverse_factor(F: np.ndarray, delta: float) -> np.ndarray:
    """W_o = L_o⁻¹ with F_o + δI = L_o L_oᵀ, for a δ known beforehand (e.g. reduced over shards)."""
    k = F.shape[-1]
    L = np.linalg.cholesky(F + max(delta, np.finfo(float).tiny) * np.eye(k))
    return np.linalg.inv(L)


def owner_grams(owner: np.ndarray, X: np.ndarray, w: np.ndarray, n_owners: int) -> np.ndarray:
    """Σ_{x: owner[x] = o} w_x X_x X_xᵀ for every o < n_owners, as (n_owners, k, k): the F_o of
    some users (X = the rated items' V) or items (X = the raters' U) from their rows alone."""
    k = X.shape[1]
    out = np.zeros((n_owners, k * k))
    for a in range(0, len(owner), CHUNK_ROWS):
        sl = slice(a, a + CHUNK_ROWS)
        M = sp.csr_array((w[sl], (owner[sl], np.arange(len(owner[sl])))), shape=(n_owners, len(owner[sl])))
        out += M @ np.einsum("ik,il->ikl", X[sl], X[sl]).reshape(-1, k * k)
    return out.reshape(n_owners, k, k)


def fisher_weights(
    kind: str, residual: np.ndarray, curvature: np.ndarray | None, n: int, sigma2: float | None = None
) -> np.ndarray:
    """Per-pair weights of ∇s∇sᵀ in F, as ``mf_fisher_grams`` uses them: r²/n (empirical), or the
    loss's E_y[r²]/n (expected: ``curvature`` per pair, else the Gaussian σ̂² = mean r² over all pairs)."""
    if kind == "empirical":
        return residual**2 / n
    return (np.full(len(residual), sigma2) if curvature is None else np.asarray(curvature, np.float64)) / n


def apply_per_owner(W: np.ndarray, owner: np.ndarray, g: np.ndarray) -> np.ndarray:
    """W[owner[x]] g_x for every row x: each row through its owner's k×k matrix."""
    out = np.empty_like(g)
    for a in range(0, len(g), CHUNK_ROWS):
        out[a : a + CHUNK_ROWS] = np.einsum("nij,nj->ni", W[owner[a : a + CHUNK_ROWS]], g[a : a + CHUNK_ROWS])
    return out


def mf_halves(WU, WV, users, items, gU, gV) -> tuple[np.ndarray, np.ndarray]:
    """The user and item halves of φ for pairs (users, items): W_u gU and W_j gV, each (n, k)."""
    return apply_per_owner(WU, users, gU), apply_per_owner(WV, items, gV)


def mf_embedding(WU, WV, users, items, gU, gV) -> sp.csr_array:
    """Sparse rows φ = [W_u gU in user u's k columns, W_j gV in item j's (after the users')] in a
    (n_users + n_items)·k space."""
    from .pair_halves import PairHalves

    a, b = mf_halves(WU, WV, users, items, gU, gV)
    return PairHalves(np.asarray(users), np.asarray(items), a, b).to_csr(WU.shape[0], WV.shape[0])


def whiteners_of(sent: tuple, items: np.ndarray) -> np.ndarray:
    """W_j of ``items`` from the ``ItemWhiteners`` sent so far. They stay as sent, shared by every state of a
    worker, rather than copied into a lookup per state."""
    W = np.empty((len(items), *sent[0].W.shape[1:]))
    found = np.zeros(len(items), bool)
    for whiteners in sent:
        pos, hit = find_sorted(whiteners.items, items)
        W[hit] = whiteners.W[pos[hit]]
        found |= hit
    if not found.all():
        missing = items[~found]
        raise RuntimeError(f"item whiteners of {len(missing)} items (e.g. {missing[0]}) were not sent to this shard")
    return W


@dataclass(frozen=True)
class ItemWhiteners:
    """W_j of some items (one object, so a mapper sends it whole rather than element by element)."""

    items: np.ndarray  # (n,) sorted
    W: np.ndarray  # (n, k, k)
