"""Alternating least squares for f(U,V) = (1/|D|) Σ_{(i,j)∈D} (y_ij − ⟨U_i,V_j⟩)² + (λ/2)(‖U‖²_F + ‖V‖²_F).

The user half-step is, for every user i with items D_i, the ridge solve
    U_i = (V_{D_i}ᵀ V_{D_i} + (λ|D|/2) I)^{-1} V_{D_i}ᵀ y_{D_i}
(the same ridge for every user, because the loss is an average over D). The item half-step is its
mirror image. Rows are solved in batches of similar degree: their padded factor blocks are stacked
into a (B, d, k) tensor so that the Gram matrices are one batched matmul and the solves one batched
LAPACK call.

For the representer identity the factors must be a stationary point, and plain ALS crawls when λ is
small (docs/methods.md §1), so the kernels also give the exact gradient and Hessian-vector product of f:
a trust-region Newton polish converges where ALS stalls. Everything works through sparse products
over D; no users × items matrix is ever formed.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .balance import balance_transforms_from_grams, balanced_norm
from .representer import SCORE_FLOOR

# The element budget: floats in one padded (B, d, k) stack at most, ~64 MB of float64.
ELEMENT_BUDGET = 1 << 23

# Half-steps by the compiled kernel (``als_fused``) rather than the numpy batches below, which stay as the
# tests' reference: the kernel forms each row's Gram in one pass, without padded (B, d, k) stacks
# (``python -m benchmarks.als.vs_implicit`` compares them).
FUSED = True


def ridge_solve_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    y: np.ndarray,
    F: np.ndarray,
    ridge: float,
    rows: np.ndarray | None = None,
    fused: bool | None = None,
    sw: np.ndarray | None = None,
    gradient_scale: float | None = None,
):
    """X_r = (F_{C_r}ᵀ F_{C_r} + ridge·I)^{-1} F_{C_r}ᵀ y_{C_r} for each row r (CSR over ``cols``).

    With ``sw`` (one square-root weight per entry) the rows of F_{C_r} are scaled by it first: weighted
    least squares, X_r = (F_{C_r}ᵀ W F_{C_r} + ridge·I)^{-1} F_{C_r}ᵀ W^½ y_{C_r}, W = diag(sw²).

    Parameters
    ----------
    indptr, cols, y : CSR structure of the rows to solve (row r has entries indptr[r]:indptr[r+1])
    F : (n_cols, k) fixed factor matrix
    ridge : λ|D|/2
    rows : optional subset of rows to solve (default all); the result has one line per solved row
    fused : the compiled kernel (``als_fused``, default ``FUSED``) or these numpy batches, its reference
    gradient_scale : also return each row's system residual A X_r − b_r (A = F_{C_r}ᵀ F_{C_r} + ridge·I,
        b = F_{C_r}ᵀ y_{C_r}) times this. With 2/|D| (and the squared loss's ridge = λ|D|/2) it is the row of
        ∇f at the solution, −(2/|D|) Σ_e r_e F_e + λX_r: zero up to rounding, and it costs k² a row from the
        Gram the solve formed, where ``gradient_rows`` makes a pass over the row's entries.

    Returns
    -------
    (len(rows), k) array; with ``gradient_scale``, (X, the scaled residuals) of that shape each.
    """
    n_rows = len(indptr) - 1
    rows = np.arange(n_rows) if rows is None else np.asarray(rows)
    k = F.shape[1]
    X = np.zeros((len(rows), k))
    Gx = np.zeros((len(rows) if gradient_scale is not None else 0, k))
    if FUSED if fused is None else fused:
        from numba import get_num_threads

        from .als_fused import ridge_solve_rows_fused  # numba compiles (or loads its cache) on first use

        ridge_solve_rows_fused(
            np.asarray(indptr, np.int64),
            np.asarray(cols, np.int64),
            np.asarray(y, np.float64),
            np.ascontiguousarray(F, np.float64),
            float(ridge),
            rows.astype(np.int64),
            get_num_threads(),
            X,
            np.empty(0) if sw is None else np.asarray(sw, np.float64),
            float(gradient_scale or 0.0),
            Gx,
        )
        return X if gradient_scale is None else (X, Gx)
    deg = indptr[rows + 1] - indptr[rows]
    cols = cols.astype(np.intp)  # numpy's fancy indexing converts int32 indices on every call; intp it takes as is
    F_pad = np.vstack([F, np.zeros((1, k))])  # index n_cols is a zero row used for padding
    sw_pad = None if sw is None else np.append(sw, 0.0)
    eye = ridge * np.eye(k)
    # Power-of-two degree buckets bound the padding waste by 2x; rows with no entries stay 0.
    bucket = np.ceil(np.log2(np.maximum(deg, 1))).astype(np.int64)
    for level in np.unique(bucket[deg > 0]):
        members = np.flatnonzero((bucket == level) & (deg > 0))
        d = int(deg[members].max())
        offs = np.arange(d)
        step = max(1, ELEMENT_BUDGET // (d * k))
        for a in range(0, len(members), step):
            batch = members[a : a + step]
            valid = offs[None, :] < deg[batch][:, None]
            pos = np.where(valid, indptr[rows[batch]][:, None] + offs[None, :], 0)
            G = F_pad[np.where(valid, cols[pos], len(F))]  # (B, d, k)
            if sw_pad is not None:
                G *= sw_pad[np.where(valid, pos, len(sw))][..., None]
            yb = np.where(valid, y[pos], 0.0)  # (B, d)
            if d < k:
                # Woodbury: (GᵀG + rI_k)⁻¹Gᵀy = Gᵀ(GGᵀ + rI_d)⁻¹y — a d×d solve for the many light rows
                # (median degree is a handful at Amazon scale). Padding rows of G are 0, so exact.
                A = np.matmul(G, G.transpose(0, 2, 1)) + ridge * np.eye(d)  # (B, d, d)
                z = np.linalg.solve(A, yb[..., None])[..., 0]
                X[batch] = np.einsum("bdk,bd->bk", G, z)
                if gradient_scale is not None:  # Gᵀ(G x − y) + ridge·x
                    e = np.einsum("bdk,bk->bd", G, X[batch]) - yb
                    Gx[batch] = gradient_scale * (np.einsum("bdk,bd->bk", G, e) + ridge * X[batch])
            else:
                A = np.matmul(G.transpose(0, 2, 1), G) + eye  # (B, k, k)
                b = np.einsum("bdk,bd->bk", G, yb)
                # One batched LAPACK call for the whole batch of k×k systems.
                X[batch] = np.linalg.solve(A, b[..., None])[..., 0]
                if gradient_scale is not None:
                    Gx[batch] = gradient_scale * (np.einsum("bkl,bl->bk", A, X[batch]) - b)
    return X if gradient_scale is None else (X, Gx)


def cg_basis(C: np.ndarray) -> np.ndarray:
    """The eigenbasis Q of C = Σ_j deg_j F_j F_jᵀ (``degree_gram``) in which ``ridge_cg_rows`` preconditions."""
    return np.linalg.eigh(C)[1]


def degree_gram(F: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """Σ_j degree_j F_j F_jᵀ: the Grams of every row that reads F's rows (degree_j of them read row j), summed."""
    return (F * degree[:, None]).T @ F


def ridge_cg_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    y: np.ndarray,
    F: np.ndarray,
    ridge: float,
    X0: np.ndarray,
    steps: int,
    Q: np.ndarray | None = None,
    fused: bool | None = None,
) -> np.ndarray:
    """``steps`` warm-started conjugate-gradient steps on each row's system of ``ridge_solve_rows`` (from X0's
    row), for the rows with at least k entries; shorter rows are solved exactly through their d×d dual system
    and rows without entries get 0.

    Preconditioner: the steps run in the eigenbasis Q of C = Σ_e F_{c_e} F_{c_e}ᵀ (the rows' Grams summed), with
    Jacobi (1/diag) there. A row's Gram is roughly its share of C, so in that basis it is nearly diagonal and
    a few steps leave much less error than Jacobi on the raw factors. Q is
    orthogonal, so the systems and their solutions are the same: the rotation costs three k×k products of the
    factors (``F Q``, ``X0 Q``, ``X Qᵀ``). ``Q``: the basis (``cg_basis``), by default from these rows' entries;
    a half-step over parts passes the whole table's, so that every part preconditions alike and the parts'
    rows equal the whole table's.

    An inexact half-step for training: a step costs 4dk flops (two passes over the row's d factors) where the
    exact solve's Gram costs dk², and ALS only needs each half-step to move well towards the solution given
    the other side, which from the previous sweep's rows a few steps do (docs/scaling.md, "ALS per sweep
    against implicit"). ``fused``: the compiled kernel (``als_fused.ridge_cg_rows_fused``, default ``FUSED``) or the
    numpy steps below, every row at once through sparse products, its reference.

    Returns
    -------
    (n_rows, k) array.
    """
    if steps < 1:
        raise ValueError(f"steps={steps}: a CG half-step takes at least one step (an exact solve is ridge_solve_rows)")
    m, k = len(indptr) - 1, F.shape[1]
    F = np.asarray(F, np.float64)
    if Q is None:
        Q = cg_basis(degree_gram(F, np.bincount(cols, minlength=len(F))))
    F, X0 = F @ Q, np.asarray(X0, np.float64) @ Q
    if FUSED if fused is None else fused:
        from numba import get_num_threads

        from .als_fused import ridge_cg_rows_fused

        X = np.empty((m, k))
        ridge_cg_rows_fused(
            np.asarray(indptr, np.int64),
            np.asarray(cols, np.int64),
            np.asarray(y, np.float64),
            F,
            float(ridge),
            X0,
            int(steps),
            get_num_threads(),
            X,
        )
        return X @ Q.T
    deg = np.diff(indptr)
    P = Pattern.of_rows(indptr, cols, len(F))

    def apply(Z):  # (F_Cᵀ F_C + ridge·I) z, every row at once
        return P.matrix(pair_scores(Z, F, P.u, P.i)) @ F + ridge * Z

    X = np.array(X0, dtype=np.float64)
    res = P.matrix(np.asarray(y, np.float64)) @ F - apply(X)
    pre = 1.0 / (P.matrix(np.ones(len(cols))) @ (F * F) + ridge)
    z = pre * res
    p, rz = z.copy(), np.einsum("rk,rk->r", res, z)
    for _ in range(steps):
        live = rz > 0  # a row whose residual is exactly 0 stays where it is (the kernel stops its steps)
        q = apply(p)
        alpha = np.where(live, rz / np.where(live, np.einsum("rk,rk->r", p, q), 1.0), 0.0)
        X += alpha[:, None] * p
        res -= alpha[:, None] * q
        z = pre * res
        rz_new = np.where(live, np.einsum("rk,rk->r", res, z), 0.0)
        p = z + np.where(live, rz_new / np.where(live, rz, 1.0), 0.0)[:, None] * p
        rz = rz_new
    short = np.flatnonzero((deg > 0) & (deg < k))
    X[short] = ridge_solve_rows(indptr, cols, y, F, ridge, rows=short, fused=False)
    X[deg == 0] = 0.0
    return X @ Q.T


def pair_scores(U: np.ndarray, V: np.ndarray, u: np.ndarray, i: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """s_n = ⟨U_{u_n}, V_{i_n}⟩ for a list of pairs.

    Gathers go through two small reused buffers: a cache-sized chunk avoids allocating (and
    page-faulting) two |D|×k temporaries.
    """
    out = np.empty(len(u))
    k = U.shape[1]
    bu, bv = np.empty((chunk, k)), np.empty((chunk, k))
    for a in range(0, len(u), chunk):
        b = min(len(u), a + chunk)
        m = b - a
        np.take(U, u[a:b], axis=0, out=bu[:m])
        np.take(V, i[a:b], axis=0, out=bv[:m])
        np.einsum("nk,nk->n", bu[:m], bv[:m], out=out[a:b])
    return out


def pattern_scores(U: np.ndarray, V: np.ndarray, P: Pattern, fused: bool | None = None) -> np.ndarray:
    """s_n = ⟨U_{u_n}, V_{i_n}⟩ over the pattern's pairs: the compiled kernel (``als_fused``, default
    ``FUSED``) for the training loop, or ``pair_scores``, its reference."""
    if not (FUSED if fused is None else fused):
        return pair_scores(U, V, P.u, P.i)
    from .als_fused import pair_scores_fused

    out = np.empty(len(P.u))
    pair_scores_fused(np.ascontiguousarray(U, np.float64), np.ascontiguousarray(V, np.float64), P.u, P.i, out)
    return out


class Pattern:
    """The sparsity pattern of D sorted by (user, item): CSR matrices over it cost no sort or copy."""

    def __init__(self, u: np.ndarray, i: np.ndarray, indptr: np.ndarray, n_users: int, n_items: int):
        # Gathers with intp indices: numpy's fancy indexing converts int32 ones on every call.
        self.u, self.i = u.astype(np.intp), i.astype(np.intp)
        self.indptr, self.shape = indptr, (n_users, n_items)

    @classmethod
    def of_rows(cls, indptr: np.ndarray, cols: np.ndarray, n_cols: int) -> Pattern:
        """The pattern of a CSR slice of rows (a part's users or items against every column)."""
        m = len(indptr) - 1
        return cls(np.repeat(np.arange(m), np.diff(indptr)), cols, indptr, m, n_cols)

    def matrix(self, values: np.ndarray) -> sp.csr_array:
        return sp.csr_array((values, self.i, self.indptr), shape=self.shape)


def objective(U, V, P: Pattern, y, lam) -> float:
    r = y - pattern_scores(U, V, P)
    return float(r @ r / len(y) + 0.5 * lam * (np.sum(U * U) + np.sum(V * V)))


def gradient(U, V, P: Pattern, y, lam, r=None) -> tuple[np.ndarray, np.ndarray]:
    """∇_U f = −(2/|D|) R V + λU and ∇_V f = −(2/|D|) Rᵀ U + λV with R the sparse residual matrix."""
    n = len(y)
    R = P.matrix(y - pattern_scores(U, V, P) if r is None else r)
    return -(2.0 / n) * (R @ V) + lam * U, -(2.0 / n) * (R.T @ U) + lam * V


def gradient_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    y: np.ndarray,
    F_rows: np.ndarray,
    F_cols: np.ndarray,
    n: int,
    lam: float,
    fused: bool | None = None,
) -> tuple[np.ndarray, float]:
    """Rows of ``gradient`` from a CSR slice that holds those rows' whole sums, and its Σ r².

    With rows = users (``F_rows`` = U's rows, ``F_cols`` = V) they are ∇_U f's rows, −(2/|D|) R V + λU;
    with rows = items and columns = users, ∇_V f's. ``n`` = |D| of the whole table. ``fused``: the compiled
    kernel (``als_fused.gradient_rows_fused``, default ``FUSED``) or the sparse products below, its reference.
    """
    if FUSED if fused is None else fused:
        from .als_fused import gradient_rows_fused

        G, rss = np.empty(F_rows.shape), np.empty(len(indptr) - 1)
        gradient_rows_fused(
            np.asarray(indptr, np.int64),
            np.asarray(cols, np.int64),
            np.asarray(y, np.float64),
            np.ascontiguousarray(F_rows, np.float64),
            np.ascontiguousarray(F_cols, np.float64),
            -2.0 / n,
            float(lam),
            G,
            rss,
        )
        return G, float(np.sum(rss))
    P = Pattern.of_rows(indptr, cols, len(F_cols))
    r = y - pattern_scores(F_rows, F_cols, P)
    return -(2.0 / n) * (P.matrix(r) @ F_cols) + lam * F_rows, float(r @ r)


def hessian_rows(
    indptr: np.ndarray,
    cols: np.ndarray,
    y: np.ndarray,
    F_rows: np.ndarray,
    F_cols: np.ndarray,
    dF_rows: np.ndarray,
    dF_cols: np.ndarray,
    n: int,
    lam: float,
    fused: bool | None = None,
) -> np.ndarray:
    """Rows of ``hessian_vector`` from a CSR slice that holds those rows' whole sums (as ``gradient_rows``):
    users' rows of H_U with (F, dF) = (U, dU) on the rows and (V, dV) on the columns, items' rows of H_V
    with the roles swapped. ``fused``: the compiled pass (``als_fused.hessian_rows_fused``, default ``FUSED``)
    or the sparse products below, its reference."""
    if FUSED if fused is None else fused:
        from .als_fused import hessian_rows_fused

        H = np.empty(dF_rows.shape)
        hessian_rows_fused(
            np.asarray(indptr, np.int64),
            np.asarray(cols, np.int64),
            np.asarray(y, np.float64),
            *(np.ascontiguousarray(F, np.float64) for F in (F_rows, F_cols, dF_rows, dF_cols)),
            2.0 / n,
            float(lam),
            H,
        )
        return H
    P = Pattern.of_rows(indptr, cols, len(F_cols))
    r = y - pattern_scores(F_rows, F_cols, P)
    s = pattern_scores(dF_rows, F_cols, P) + pattern_scores(F_rows, dF_cols, P)
    return (2.0 / n) * (P.matrix(s) @ F_cols - P.matrix(r) @ dF_cols) + lam * dF_rows


def curvature_rows(
    indptr: np.ndarray, cols: np.ndarray, F_cols: np.ndarray, n: int, fused: bool | None = None
) -> np.ndarray:
    """Rows of ``curvature_grams`` from a CSR slice holding those rows' whole sums: (2/|D|) Σ F_j F_jᵀ per row.
    ``fused``: each row's Gram by the compiled half-step's (``als_fused.curvature_rows_fused``, default ``FUSED``)
    or by one sparse product against every column's k² outer products, its reference."""
    m, k = len(indptr) - 1, F_cols.shape[1]
    if FUSED if fused is None else fused:
        from numba import get_num_threads

        from .als_fused import curvature_rows_fused

        out = np.empty((m, k, k))
        curvature_rows_fused(
            np.asarray(indptr, np.int64),
            np.asarray(cols, np.int64),
            np.ascontiguousarray(F_cols, np.float64),
            2.0 / n,
            get_num_threads(),
            out,
        )
        return out
    M = sp.csr_array((np.full(len(cols), 2.0 / n), cols, indptr), shape=(m, len(F_cols)))
    return (M @ np.einsum("ik,il->ikl", F_cols, F_cols).reshape(len(F_cols), k * k)).reshape(m, k, k)


def identity_bound(U, V, gU, gV, lam) -> tuple[float, float]:
    """Bounds (ε_item, ε_user) on the representer identity's relative error, from the gradient (U, V) has.

    The explainers use the balanced factors Ũ = U T_U, Ṽ = V T_V (``balance.balance_transforms``,
    ŨṼᵀ = UVᵀ). With R the residual matrix, α_ij = 2R_ij/(λ|D|), and G̃_U = −(2/|D|) R Ṽ + λŨ the
    gradient at the balanced factors, the item side of a target (i, j) sums to

        Σ_{j'∈D_i} α_ij' ⟨Ṽ_j', Ṽ_j⟩ = ⟨Ũ_i − G̃_U,i/λ, Ṽ_j⟩ = s_ij − ⟨G̃_U,i, Ṽ_j⟩/λ,

    and the user side misses s_ij by ⟨G̃_V,j, Ũ_i⟩/λ (docs/methods.md §1). Since G̃_U = g_U T_V + λU(T_U − T_V)
    and G̃_V = g_V T_U + λV(T_V − T_U), the raw gradient and two k×k transforms give them without a pass
    over D. By Cauchy–Schwarz, for a target whose score is s_ij = cos θ_ij ‖Ũ_i‖ ‖Ṽ_j‖,

        |Σ item side − s_ij| / |s_ij| ≤ ε_item / cos θ_ij,   ε_item = max_i ‖G̃_U,i‖ / (λ ‖Ũ_i‖),

    and ε_user likewise over the items. A score below ``SCORE_FLOOR`` has no scale (``relative_error``
    divides by at least it), so a row's ‖Ũ_i‖ counts as at least ``SCORE_FLOOR`` / ‖Ṽ‖₂ (``min_norm``;
    ‖Ṽ_j‖ ≤ ‖Ṽ‖₂): a row whose factors all but vanished does not hold the bound near 1 while its scores
    are rounding noise. After an exact item half-step g_V = 0, so G̃_V holds only the imbalance
    UᵀU − VᵀV, which is O(‖g_U‖/λ): both sides shrink with the gradient.

    Parameters
    ----------
    U, V : (n_users, k), (n_items, k) factors
    gU, gV : ∇_U f and ∇_V f at (U, V) (``gradient``)
    lam : λ

    Returns
    -------
    (ε_item, ε_user): the item side's bound comes from the users' gradient rows, the user side's from the items'.
    """
    T_U, T_V, floor = bound_transforms(U.T @ U, V.T @ V)
    return bound_rows(U, gU, T_U, T_V, lam, floor), bound_rows(V, gV, T_V, T_U, lam, floor)


def bound_transforms(G_U: np.ndarray, G_V: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """What ``bound_rows`` needs beside the rows, from the Grams UᵀU and VᵀV: the balancing transforms
    (T_U, T_V) and the floor of a row's norm (``min_norm``)."""
    T_U, T_V = balance_transforms_from_grams(G_U, G_V)
    return T_U, T_V, min_norm(G_U, T_U)


def min_norm(G_U: np.ndarray, T_U: np.ndarray) -> float:
    """The balanced row norm below which every score of the row is under ``SCORE_FLOOR`` (inf if all are)."""
    scale = balanced_norm(G_U, T_U)
    return SCORE_FLOOR / scale if scale > 0 else np.inf


# Rows of ``bound_rows`` per chunk: its three (chunk, k) temporaries stay in cache (16K × 32 floats = 4 MB
# across the three); whole-part temporaries would make it bound by memory passes.
BOUND_CHUNK = 1 << 14


def bound_rows(
    F: np.ndarray, g: np.ndarray, T_own: np.ndarray, T_other: np.ndarray, lam: float, floor: float = 0.0
) -> float:
    """One side's ε of ``identity_bound`` over some of its rows (F's rows, their gradient rows g): the
    bound of a set of rows is the max over its parts, so parts on workers send one number each. A row's
    norm counts as at least ``floor`` (``min_norm``); rows of norm 0 with it 0 are left out."""
    D = lam * (T_own - T_other)
    worst = 0.0
    for a in range(0, len(F), BOUND_CHUNK):
        f = F[a : a + BOUND_CHUNK]
        G = g[a : a + BOUND_CHUNK] @ T_other
        G += f @ D
        P = f @ T_own
        norm = np.maximum(np.sqrt(np.einsum("ij,ij->i", P, P)), floor)
        live = (norm > 0) & np.isfinite(norm)
        ratio = np.sqrt(np.einsum("ij,ij->i", G, G)) / np.where(live, norm, 1.0)
        m = float(np.max(ratio[live], initial=0.0))
        if np.isnan(m):  # a NaN gradient is no bound (max() would drop it)
            return m
        worst = max(worst, m)
    return worst / lam


def hessian_vector(U, V, dU, dV, P: Pattern, r, lam) -> tuple[np.ndarray, np.ndarray]:
    """Hessian of f at (U, V) applied to (dU, dV), given residuals r = y − ⟨U_u, V_i⟩.

    With S the sparse matrix of ds_ij = ⟨dU_i,V_j⟩ + ⟨U_i,dV_j⟩:
    H_U = (2/|D|)(S V − R dV) + λ dU,   H_V = (2/|D|)(Sᵀ U − Rᵀ dU) + λ dV.
    """
    n = len(r)
    S = P.matrix(pattern_scores(dU, V, P) + pattern_scores(U, dV, P))
    R = P.matrix(r)
    return ((2.0 / n) * (S @ V - R @ dV) + lam * dU, (2.0 / n) * (S.T @ U - R.T @ dU) + lam * dV)


def curvature_grams(U, V, P: Pattern, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The Hessian's diagonal blocks without λ: (2/|D|) Σ_{j∈D_i} V_j V_jᵀ per user, and the mirror per item.

    One sparse product each against the k²-wide outer products: (n_users + n_items)·k² floats, so
    the caller checks that this fits (at k = 32, ~8 KB per row).
    """
    k = U.shape[1]
    M = P.matrix(np.full(len(P.u), 2.0 / n))
    A = M @ np.einsum("ik,il->ikl", V, V).reshape(len(V), k * k)
    B = M.T @ np.einsum("ik,il->ikl", U, U).reshape(len(U), k * k)
    return A.reshape(-1, k, k), B.reshape(-1, k, k)
