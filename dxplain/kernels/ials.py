"""Confidence-weighted ALS (iALS; Hu, Koren & Volinsky 2008) and its exact representer (docs/methods.md §1).

Over every user–item entry, observed or not,

    f(U, V) = Σ_{u,i} c_ui (p_ui − s_ui)² + λ (Σ_u w_u ‖U_u‖² + Σ_i w_i ‖V_i‖²),   s_ui = ⟨U_u, V_i⟩,

with c = 1, p = 0 on the unobserved entries and, on a stored entry of value r (``confidence``):

    ``implicit`` (the ``implicit`` library's AlternatingLeastSquares): c = α|r|, p = 1[r > 0], w = 1;
        a stored 0 gets c = 0: its term leaves the sum (it is neither observed nor unobserved);
    ``spark`` (Spark MLlib ALS, implicitPrefs): c = 1 + α|r|, p = 1[r > 0], w = the row's count of r > 0
        (ALS-WR's weighting); a stored 0 is then the same term as an unobserved entry.

Every function here takes one side's rows in CSR (indptr, cols, c, p) against the other side's factors F
and its Gram G = FᵀF, so the unobserved entries are never visited: they enter through G only.

Exact half-step (row r, observed entries O_r, lam_w = λ w_r):
    (G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w I) X_r = Σ_{e∈O_r} c_e p_e F_e.

Stationarity: λ w_r X_r = Σ_{all e} c_e (p_e − s_e) F_e, so for a target column t,

    ⟨X_r, F_t⟩ = Σ_{e∈O_r} α_e ⟨F_e, F_t⟩ − (1/(λ w_r)) X_rᵀ (G − Σ_{e∈O_r} F_e F_eᵀ) F_t,
    α_e = c_e (p_e − s_e)/(λ w_r):

one attribution per observed entry plus the unobserved entries' aggregate (the Gram trick; ``attributions``).
A row with w_r = 0 (Spark, no positive entry) has no positive right-hand side, so its exact solve is 0 and
its attributions are 0, as its score is.

The numpy functions are the reference; ``half_step``, ``gradient_rows``, ``hessian_vector_rows`` and
``curvature_rows`` run the compiled per-row loops of ``ials_fused`` by default (``FUSED``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .representer import SCORE_FLOOR

CONVENTIONS = ("implicit", "spark")

# Half-steps and gradient rows by the compiled kernels (``ials_fused``); the numpy functions stay as the reference.
FUSED = True


def confidence(r: np.ndarray, alpha: float, convention: str) -> tuple[np.ndarray, np.ndarray]:
    """(c, p) of stored entries with values ``r`` under ``convention`` (module docstring): c = α|r| (implicit) or
    1 + α|r| (spark), p = 1[r > 0]. Inputs are checked where they enter (``models.ials.check_settings``)."""
    r = np.asarray(r, np.float64)
    a = alpha * np.abs(r)
    c = a if convention == "implicit" else 1.0 + a
    return c, (r > 0).astype(np.float64)


def ridge_weights(indptr: np.ndarray, r: np.ndarray, convention: str) -> np.ndarray:
    """w per row: 1 (implicit), or the row's number of stored entries with r > 0 (spark, ALS-WR)."""
    if convention == "implicit":
        return np.ones(len(indptr) - 1)
    positives = np.concatenate([[0], np.cumsum(np.asarray(r) > 0)])
    return (positives[indptr[1:]] - positives[indptr[:-1]]).astype(np.float64)


def preference_product(indptr: np.ndarray, cols: np.ndarray, p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P_rows x for the rows' stored preferences p (P's unstored entries are 0): a side's share of P x or Pᵀ y."""
    return _rows_matrix(indptr, cols, p, len(x)) @ np.asarray(x, np.float64)


def spectral_factors(matvec, rmatvec, shape: tuple[int, int], k: int, lam: float, seed: int):
    """(U, V) = (A √(Σ − λ)₊, B √(Σ − λ)₊) from the k largest singular triplets P ≈ A Σ Bᵀ of the users × items
    preference matrix P, given only its products (``matvec``: x ↦ P x, ``rmatvec``: y ↦ Pᵀ y; ARPACK, to machine
    precision, from a seeded start): the minimiser of Σ_all (p − ⟨U_u, V_i⟩)² + λ(‖U‖² + ‖V‖²), whose penalty is
    2‖UVᵀ‖_* at its least, so UVᵀ is P's singular values soft-thresholded at λ. With every c = 1 and w = 1 (the
    ``implicit`` convention where every stored α|r| = 1, e.g. its defaults on 0/1 data) that is f itself: these
    factors are its optimum. Columns by decreasing singular value; those with σ ≤ λ are 0. None when k ≥ min(shape)
    (ARPACK finds fewer triplets than a side's length) or ARPACK fails (no convergence; P = 0)."""
    from scipy.sparse.linalg import ArpackError, LinearOperator, svds

    n = min(shape)
    if k >= n:
        return None
    op = LinearOperator(shape, matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    v0 = np.random.default_rng(seed).random(n)  # seeded: ARPACK's own start is random
    try:
        A, sigma, Bt = svds(op, k=k, tol=0, v0=v0)
    except ArpackError:  # ArpackNoConvergence too
        return None
    order = np.argsort(sigma)[::-1]
    root = np.sqrt(np.maximum(sigma[order] - lam, 0.0))
    return np.ascontiguousarray(A[:, order] * root), np.ascontiguousarray(Bt[order].T * root)


def _rows_matrix(indptr, cols, values, n_cols) -> sp.csr_array:
    return sp.csr_array((np.asarray(values, np.float64), cols, indptr), shape=(len(indptr) - 1, n_cols))


def half_step(
    indptr: np.ndarray,
    cols: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    F: np.ndarray,
    lam_w: np.ndarray,
    G: np.ndarray | None = None,
    fused: bool | None = None,
) -> np.ndarray:
    """Every row's exact solve (G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w_r I) X_r = Σ_{e∈O_r} c_e p_e F_e.

    Parameters
    ----------
    indptr, cols, c, p : the rows' stored entries (CSR) and their confidences and preferences (``confidence``)
    F : (n_cols, k) the other side's factors
    lam_w : (n_rows,) λ·w_r (``ridge_weights``)
    G : FᵀF, computed here if not given (a half-step over parts passes the whole F's)
    fused : the compiled kernel (``ials_fused.half_step_fused``, default ``FUSED``) or the numpy batch below

    Returns
    -------
    (n_rows, k) array; a row without a positive entry (zero right-hand side) gets 0.
    """
    F = np.ascontiguousarray(F, np.float64)
    G = F.T @ F if G is None else np.asarray(G, np.float64)
    m, k = len(indptr) - 1, F.shape[1]
    if FUSED if fused is None else fused:
        from numba import get_num_threads

        from .ials_fused import half_step_fused

        X = np.empty((m, k))
        lam_w = np.asarray(lam_w, np.float64)
        # One λw for every row (implicit's convention): the rows without a correction (all of them at α|r| = 1)
        # share G + λw I, and their solves are one triangular solve of all their right-hand sides (BLAS).
        lam_shared = float(lam_w[0]) if m and np.all(lam_w == lam_w[0]) else np.nan
        shared = np.empty(m, np.bool_)
        half_step_fused(
            *_typed(indptr, cols, c, p), F, np.ascontiguousarray(G), lam_w, get_num_threads(), X, lam_shared, shared
        )
        if shared.any():
            factor = sla.cho_factor(G + lam_shared * np.eye(k), lower=True)
            if shared.all():
                return sla.cho_solve(factor, X.T).T
            X[shared] = sla.cho_solve(factor, X[shared].T).T
        return X
    outer = np.einsum("ik,il->ikl", F, F).reshape(len(F), k * k)
    A = (_rows_matrix(indptr, cols, np.asarray(c) - 1.0, len(F)) @ outer).reshape(m, k, k)
    A += G + np.asarray(lam_w)[:, None, None] * np.eye(k)
    b = _rows_matrix(indptr, cols, np.asarray(c) * np.asarray(p), len(F)) @ F
    X = np.zeros((m, k))
    live = np.any(b != 0, axis=1)
    X[live] = np.linalg.solve(A[live], b[live][..., None])[..., 0]
    return X


def _typed(indptr, cols, c, p):
    return (
        np.asarray(indptr, np.int64),
        np.asarray(cols, np.int64),
        np.asarray(c, np.float64),
        np.asarray(p, np.float64),
    )


def gradient_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    X: np.ndarray,
    F: np.ndarray,
    lam_w: np.ndarray,
    G: np.ndarray | None = None,
    fused: bool | None = None,
) -> tuple[np.ndarray, float]:
    """The rows' ∇f and their data term, from the rows' whole sums.

    ∇_{X_r} f = 2 [(G + lam_w_r I) X_r + Σ_{e∈O_r} ((c_e − 1) s_e − c_e p_e) F_e] = −2 Σ_{all e} c_e (p_e − s_e) F_e
    + 2 λ w_r X_r, and Σ_{all e of the rows} c_e (p_e − s_e)² = Σ_r X_rᵀ G X_r + Σ_{e∈O} (c_e (p_e − s_e)² − s_e²).
    With rows = users this data term is f's whole data term.

    Returns
    -------
    (g (n_rows, k), the rows' data term).
    """
    X = np.ascontiguousarray(X, np.float64)
    F = np.ascontiguousarray(F, np.float64)
    G = F.T @ F if G is None else np.asarray(G, np.float64)
    lam_w = np.asarray(lam_w, np.float64)
    if FUSED if fused is None else fused:
        from .ials_fused import gradient_rows_fused

        g, data = np.empty(X.shape), np.empty(len(X))
        gradient_rows_fused(*_typed(indptr, cols, c, p), X, F, np.ascontiguousarray(X @ G), lam_w, g, data)
        return g, float(np.sum(data))
    c, p = np.asarray(c, np.float64), np.asarray(p, np.float64)
    rows = np.repeat(np.arange(len(X)), np.diff(indptr))
    s = np.einsum("ek,ek->e", X[rows], F[cols])
    XG = X @ G
    g = 2.0 * (XG + lam_w[:, None] * X + _rows_matrix(indptr, cols, (c - 1.0) * s - c * p, len(F)) @ F)
    data = float(np.einsum("rk,rk->", XG, X) + np.sum(c * (p - s) ** 2 - s * s))
    return g, data


def hessian_vector_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    X: np.ndarray,
    F: np.ndarray,
    dX: np.ndarray,
    dF: np.ndarray,
    lam_w: np.ndarray,
    G: np.ndarray,
    S: np.ndarray,
    fused: bool | None = None,
) -> np.ndarray:
    """The rows' share of the Hessian product H·(dX, dF): the derivative of ``gradient_rows`` along (dX, dF).

    With s_e = ⟨X_r, F_e⟩ and ds_e = ⟨dX_r, F_e⟩ + ⟨X_r, dF_e⟩ it is, per row,

        2 [(G + lam_w_r I) dX_r + S X_r + Σ_{e∈O_r} ((c_e − 1) ds_e F_e + ((c_e − 1) s_e − c_e p_e) dF_e)],

    S = FᵀdF + dFᵀF carrying the unobserved entries (k × k, over the other side's whole factors, as G). The users'
    rows take (X, F, dX, dF) = (U, V, dU, dV), the items' (V, U, dV, dU).
    """
    c, p = np.asarray(c, np.float64), np.asarray(p, np.float64)
    lam_w = np.asarray(lam_w, np.float64)
    if FUSED if fused is None else fused:
        from .ials_fused import hessian_rows_fused

        X, F, dX, dF = (np.ascontiguousarray(a, np.float64) for a in (X, F, dX, dF))
        base = dX @ G + lam_w[:, None] * dX + X @ S
        out = np.empty(X.shape)
        hessian_rows_fused(*_typed(indptr, cols, c, p), X, F, dX, dF, base, out)
        return out
    rows = np.repeat(np.arange(len(X)), np.diff(indptr))
    Fe = F[cols]
    s = np.einsum("ek,ek->e", X[rows], Fe)
    ds = np.einsum("ek,ek->e", dX[rows], Fe) + np.einsum("ek,ek->e", X[rows], dF[cols])
    observed = _rows_matrix(indptr, cols, (c - 1.0) * ds, len(F)) @ F
    observed += _rows_matrix(indptr, cols, (c - 1.0) * s - c * p, len(F)) @ dF
    return 2.0 * (dX @ G + lam_w[:, None] * dX + X @ S + observed)


def curvature_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    c: np.ndarray,
    F: np.ndarray,
    lam_w: np.ndarray,
    G: np.ndarray,
    fused: bool | None = None,
) -> np.ndarray:
    """The Hessian's diagonal k × k block of every row, 2 (G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w_r I): twice the
    half-step's matrix (a Newton polish's block-Jacobi preconditioner). (n_rows, k, k)."""
    k = F.shape[1]
    if FUSED if fused is None else fused:
        from numba import get_num_threads

        from .ials_fused import curvature_rows_fused

        out = np.empty((len(indptr) - 1, k, k))
        typed = _typed(indptr, cols, c, c)
        F = np.ascontiguousarray(F, np.float64)
        curvature_rows_fused(
            typed[0],
            typed[1],
            typed[2],
            F,
            np.ascontiguousarray(G),
            np.asarray(lam_w, np.float64),
            get_num_threads(),
            out,
        )
        return out
    outer = np.einsum("ik,il->ikl", F, F).reshape(len(F), k * k)
    A = (_rows_matrix(indptr, cols, np.asarray(c) - 1.0, len(F)) @ outer).reshape(-1, k, k)
    A += G + np.asarray(lam_w)[:, None, None] * np.eye(k)
    return 2.0 * A


def penalty(X: np.ndarray, lam_w: np.ndarray) -> float:
    """Σ_r λ w_r ‖X_r‖²: one side's share of f's regulariser."""
    return float(np.sum(lam_w * np.einsum("rk,rk->r", X, X)))


def identity_bound(X: np.ndarray, g: np.ndarray, lam_w: np.ndarray, F: np.ndarray) -> float:
    """ε = max_r ‖g_r‖ / (2 λ w_r ‖X_r‖): the rows' attributions against F miss ⟨X_r, F_t⟩ by ⟨g_r, F_t⟩/(2 λ w_r),
    so by Cauchy–Schwarz by at most ε/cos θ relative (docs/methods.md §1).

    A score below ``SCORE_FLOOR`` has no scale, so a row's norm counts as at least SCORE_FLOOR / max_t ‖F_t‖. A row
    with w_r = 0 is explained by zeros: exact if X_r = 0 (what its exact solve gives), else the bound is inf.
    """
    fmax = float(np.sqrt(np.max(np.einsum("ik,ik->i", F, F), initial=0.0)))
    floor = SCORE_FLOOR / fmax if fmax > 0 else np.inf
    norm = np.sqrt(np.einsum("rk,rk->r", X, X))
    gnorm = np.sqrt(np.einsum("rk,rk->r", g, g))
    weighted = lam_w > 0
    if np.any(~weighted & (norm > 0)):
        return float("inf")
    ratio = gnorm[weighted] / (2.0 * lam_w[weighted] * np.maximum(norm[weighted], floor))
    return float(np.max(ratio, initial=0.0))


def attributions(
    x: np.ndarray,
    cols: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    F: np.ndarray,
    G: np.ndarray,
    lam_w: float,
    targets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row's representer for target columns ``targets`` (module docstring).

    Parameters
    ----------
    x : (k,) the row's factors (U_u for the item side of (u, ·), V_j for the user side of (·, j))
    cols, c, p : the row's stored entries and their confidences and preferences
    F, G : the other side's factors and FᵀF
    lam_w : λ w of the row
    targets : (T,) columns of F to explain ⟨x, F_t⟩ for

    Returns
    -------
    α (d,) = c_e (p_e − s_e)/(λ w), the local importances (d, T) = ⟨F_e, F_t⟩, and the unobserved entries'
    aggregate (T,) = −(1/(λ w)) xᵀ (G − Σ_{e∈O} F_e F_eᵀ) F_t. At stationarity Σ_e α_e ⟨F_e, F_t⟩ + aggregate_t =
    ⟨x, F_t⟩. A row with λ w = 0 gets α = 0 and aggregate 0.
    """
    Fo, Ft = F[cols], F[targets]
    s = Fo @ x
    local = Fo @ Ft.T
    if lam_w <= 0:
        return np.zeros(len(cols)), local, np.zeros(len(targets))
    alpha = np.asarray(c) * (np.asarray(p) - s) / lam_w
    aggregate = -(Ft @ (G @ x - Fo.T @ s)) / lam_w
    return alpha, local, aggregate


def global_importance(r: np.ndarray, s: np.ndarray, lam_w: np.ndarray, alpha: float, convention: str) -> np.ndarray:
    """α_e = c_e (p_e − s_e)/(λ w) of stored entries with values ``r`` and scores ``s``, ``lam_w`` the λ w of each
    entry's row on the side explained (the user's for its history, the item's for its raters); 0 where λ w = 0."""
    c, p = confidence(r, alpha, convention)
    live = lam_w > 0
    out = np.zeros(len(r))
    out[live] = c[live] * (p[live] - s[live]) / lam_w[live]
    return out


def unobserved_embeddings(
    indptr: np.ndarray, cols: np.ndarray, X: np.ndarray, F: np.ndarray, G: np.ndarray, lam_w: np.ndarray, rows
) -> np.ndarray:
    """N_r = −(G X_r − Σ_{e∈O_r} s_e F_e)/(λ w_r), s_e = ⟨X_r, F_e⟩, for each row r in ``rows`` (0 where λ w_r = 0).

    ⟨N_r, F_t⟩ is the unobserved entries' share of ⟨X_r, F_t⟩ at stationarity (``attributions``' aggregate), so
    one k-vector per row gives it for every target column t in O(k) (docs/methods.md §1, iALS).

    Parameters
    ----------
    indptr, cols : every row's stored entries (CSR over the whole side); the rows in ``rows`` must be complete
    X, F, G : this side's factors, the other side's and FᵀF
    lam_w : (n_rows,) λ·w of every row
    rows : the rows to compute
    """
    rows = np.asarray(rows, np.int64)
    starts, lengths = indptr[rows], indptr[rows + 1] - indptr[rows]
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    pos = np.repeat(starts - ptr[:-1], lengths) + np.arange(ptr[-1])
    owner = np.repeat(np.arange(len(rows)), lengths)
    Xr = np.asarray(X, np.float64)[rows]
    e_cols = np.asarray(cols, np.int64)[pos]
    s = np.einsum("ek,ek->e", Xr[owner], F[e_cols])
    N = _rows_matrix(ptr, e_cols, s, len(F)) @ F - Xr @ G  # G is symmetric: (G X_r)ᵀ = X_r G
    lw = np.asarray(lam_w, np.float64)[rows]
    live = lw > 0
    N[live] /= lw[live, None]
    N[~live] = 0.0
    return N


def top_unobserved(
    x: np.ndarray, cols: np.ndarray, F: np.ndarray, lam_w: float, targets: np.ndarray, top_k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``top_k`` unobserved columns i (not in ``cols``) with the largest |term| for each target t, the terms
    whose sum is ``attributions``' aggregate: term = α_i ⟨F_i, F_t⟩ with α_i = (0 − ⟨x, F_i⟩)/(λ w) (c = 1, p = 0).
    One pass over the catalogue (what a recommend call costs) and a top-K selection.

    Returns
    -------
    (columns, α, local importance), each (T, K'), K' = min(top_k, unobserved columns), by decreasing |term|.
    """
    n = len(F)
    unobserved = np.ones(n, bool)
    unobserved[cols] = False
    free = np.flatnonzero(unobserved)
    K = min(top_k, len(free))
    T = len(targets)
    if K == 0 or lam_w <= 0:
        return np.zeros((T, 0), np.int64), np.zeros((T, 0)), np.zeros((T, 0))
    Ff = F[free]
    alpha = -(Ff @ x) / lam_w  # (n_free,)
    local = F[targets] @ Ff.T  # (T, n_free)
    size = np.abs(alpha[None, :] * local)
    pick = np.argpartition(-size, K - 1, axis=1)[:, :K] if K < len(free) else np.tile(np.arange(len(free)), (T, 1))
    order = np.argsort(-np.take_along_axis(size, pick, axis=1), axis=1, kind="stable")
    pick = np.take_along_axis(pick, order, axis=1)
    return free[pick], alpha[pick], np.take_along_axis(local, pick, axis=1)
