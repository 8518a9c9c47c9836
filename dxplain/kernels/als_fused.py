"""Fused ALS half-step (numba): each row's Gram, right-hand side and Cholesky solve in one pass over its entries.

The compiled twin of ``als.ridge_solve_rows``, which stays as the tests' reference. For row r with
columns C_r:
    X_r = (F_{C_r}ᵀ F_{C_r} + ridge·I)^{-1} F_{C_r}ᵀ y_{C_r}
The row's factors are gathered transposed (k × d), the Gram's upper triangle is formed as dot
products in 3×4 blocks, then a Cholesky factorisation and two triangular sweeps solve. Rows shorter
than k take the dual d×d system,
    X_r = F_{C_r}ᵀ (F_{C_r} F_{C_r}ᵀ + ridge·I_d)^{-1} y_{C_r},
as the numpy path does. nnz·k²/2 multiply-adds for the Grams instead of the numpy path's padded
nnz·k² through gathered (B, d, k) stacks, and no batch of rows waits for its longest member.

Rows run in parallel (``prange``) over numba's threads, interleaved so that light and heavy rows
mix; ``nogil`` lets Dask's threads run parts side by side as well. ``cache=True``: compiled once per
machine (docs/scaling.md states the cost). A ``parallel=True`` kernel is compiled without ``fastmath``: a fresh
compilation and a cache load of such a kernel summed in different orders (factors 1e-12 apart), so a run's bytes
depended on whether its process found the cache (tests/test_style.py holds the rule); the serial helpers keep it.
So a parallel kernel's dot products call the serial helpers (``_dot``, ``_dot2``, ``_gather_residual``): inline, a
reduction without fastmath runs one dependent multiply-add at a time.

The training loop's passes over D have compiled twins here too: ``gradient_rows_fused`` (a part's rows of
∇f and its Σ r²) and ``pair_scores_fused`` (residuals for the Hessian products); so has the users' inexact
half-step, ``ridge_cg_rows_fused`` (a few warm-started CG steps a row, ``als.ridge_cg_rows``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from .gather import gather_rows, gather_scaled_rows

# Entries per chunk of the Gram's dot products: 64 rows × 512 floats = 256 KB (L2).
GRAM_CHUNK = 512


# The Gram's 3×4 blocks of dot products in two steps, inlined into the compiled loop (no call at runtime).
@njit(inline="always", fastmath=True)
def _axpy4(s0, s1, s2, s3, x, y0, y1, y2, y3):
    """(s0 + x·y0, s1 + x·y1, s2 + x·y2, s3 + x·y3): one row's four accumulators, one entry further."""
    return s0 + x * y0, s1 + x * y1, s2 + x * y2, s3 + x * y3


@njit(inline="always", fastmath=True)
def _add_row4(A, p, q, s0, s1, s2, s3):
    """A[p, q:q+4] += (s0, s1, s2, s3)."""
    A[p, q] += s0
    A[p, q + 1] += s1
    A[p, q + 2] += s2
    A[p, q + 3] += s3


@njit(nogil=True, cache=True, fastmath=True)
def _gram_upper(M, n, m, A):
    """A[p, q] ← ⟨M[p, :m], M[q, :m]⟩ for p ≤ q < n (n a multiple of 4), in 3×4 blocks of dot products.

    Twelve dot products share seven loaded rows (3×4: the most accumulators and loads that fit the registers;
    4×4's sixteen do not); fastmath lets each be vectorised in any summation order. Rows go three
    at a time and the last n mod 3 one at a time. Blocks that start left of the diagonal also write a few
    entries below it, which nothing reads. Long rows go in chunks of ``GRAM_CHUNK`` so that a chunk of all
    n rows stays in L2 across blocks.
    """
    for p in range(n):
        A[p, p:n] = 0.0
    for j0 in range(0, m, GRAM_CHUNK):
        j1 = min(m, j0 + GRAM_CHUNK)
        p = 0
        while p + 3 <= n:
            a0, a1, a2 = M[p], M[p + 1], M[p + 2]
            for q in range(p - p % 4, n, 4):
                b0, b1, b2, b3 = M[q], M[q + 1], M[q + 2], M[q + 3]
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = s20 = s21 = s22 = s23 = 0.0
                # Unsigned: a signed index from a runtime start keeps numba's negative-index wraparound,
                # which stops LLVM vectorising the loop.
                for j in range(uint64(j0), uint64(j1)):
                    y0, y1, y2, y3 = b0[j], b1[j], b2[j], b3[j]
                    s00, s01, s02, s03 = _axpy4(s00, s01, s02, s03, a0[j], y0, y1, y2, y3)
                    s10, s11, s12, s13 = _axpy4(s10, s11, s12, s13, a1[j], y0, y1, y2, y3)
                    s20, s21, s22, s23 = _axpy4(s20, s21, s22, s23, a2[j], y0, y1, y2, y3)
                _add_row4(A, p, q, s00, s01, s02, s03)
                _add_row4(A, p + 1, q, s10, s11, s12, s13)
                _add_row4(A, p + 2, q, s20, s21, s22, s23)
            p += 3
        while p < n:
            a0 = M[p]
            for q in range(p - p % 4, n, 4):
                b0, b1, b2, b3 = M[q], M[q + 1], M[q + 2], M[q + 3]
                s00 = s01 = s02 = s03 = 0.0
                for j in range(uint64(j0), uint64(j1)):
                    x0 = a0[j]
                    s00 += x0 * b0[j]
                    s01 += x0 * b1[j]
                    s02 += x0 * b2[j]
                    s03 += x0 * b3[j]
                _add_row4(A, p, q, s00, s01, s02, s03)
            p += 1


@njit(nogil=True, cache=True)
def _gather_transposed(F, cols, a, d, Gt):
    """Gt[:, :d] ← F[cols[a:a+d]]ᵀ, eight rows at a time (eight row views, then eight contiguous
    stores per column, rather than an element-by-element strip transpose)."""
    k = F.shape[1]
    j = 0
    while j + 8 <= d:
        r0, r1, r2, r3 = F[cols[a + j]], F[cols[a + j + 1]], F[cols[a + j + 2]], F[cols[a + j + 3]]
        r4, r5, r6, r7 = F[cols[a + j + 4]], F[cols[a + j + 5]], F[cols[a + j + 6]], F[cols[a + j + 7]]
        for c in range(k):
            g = Gt[c]
            g[j], g[j + 1], g[j + 2], g[j + 3] = r0[c], r1[c], r2[c], r3[c]
            g[j + 4], g[j + 5], g[j + 6], g[j + 7] = r4[c], r5[c], r6[c], r7[c]
        j += 8
    for j in range(j, d):  # noqa: B020 (the scalar tail continues from the unrolled loop's j)
        r = F[cols[a + j]]
        for c in range(k):
            Gt[c, j] = r[c]


@njit(nogil=True, cache=True)
def max_degree(indptr):
    """The longest row of a CSR index: the size of each thread's gather buffer."""
    d_max = 0
    for r in range(len(indptr) - 1):
        d_max = max(d_max, indptr[r + 1] - indptr[r])
    return d_max


@njit(nogil=True, cache=True, fastmath=True)
def _dot(a, b, n):
    """⟨a[:n], b[:n]⟩ (fastmath: vectorised)."""
    s = 0.0
    for i in range(n):
        s += a[i] * b[i]
    return s


@njit(nogil=True, cache=True, fastmath=True)
def _dot2(a0, a1, b, n):
    """(⟨a0[:n], b[:n]⟩, ⟨a1[:n], b[:n]⟩): two rows against one, sharing its loads."""
    s0 = s1 = 0.0
    for i in range(n):
        s0 += a0[i] * b[i]
        s1 += a1[i] * b[i]
    return s0, s1


@njit(nogil=True, cache=True)
def _solve_spd(A, n, b, x):
    """x[:n] ← A⁻¹b for the symmetric positive definite A[:n, :n] given by its upper triangle; b is overwritten.

    Cholesky A = LLᵀ in the dot-product form, L written into A's lower triangle (its upper triangle
    still holds the input), so every inner product runs along contiguous rows; then Lz = b and Lᵀx = z.
    No LAPACK: a call per row from numba's threads would use OpenBLAS's own threads on top (scipy's
    OpenBLAS is loaded after any threadpool limit the caller set).
    """
    for j in range(n):
        L_j = A[j]
        piv = np.sqrt(A[j, j] - _dot(L_j, L_j, j))
        A[j, j] = piv
        c = j + 1
        while c + 1 < n:  # two rows of L at a time: they share the loads of L_j
            s0, s1 = _dot2(A[c], A[c + 1], L_j, j)
            A[c, j] = (A[j, c] - s0) / piv
            A[c + 1, j] = (A[j, c + 1] - s1) / piv
            c += 2
        if c < n:
            A[c, j] = (A[j, c] - _dot(A[c], L_j, j)) / piv
    for i in range(n):
        x[i] = (b[i] - _dot(A[i], x, i)) / A[i, i]
    for i in range(n - 1, -1, -1):
        x[i] /= A[i, i]
        for m in range(i):
            x[m] -= A[i, m] * x[i]


@njit(nogil=True, cache=True)
def _scale_columns(Gt, sw, a, d, k):
    """Gt[:, j] *= sw[a + j]: the gathered rows of a weighted solve."""
    for c in range(k):
        g = Gt[c]
        for j in range(d):
            g[j] *= sw[a + j]


@njit(nogil=True, cache=True)
def _primal_residual(A, diag, b, x, k, scale, out):
    """out[:k] ← scale·(A x − b) for the symmetric A given by its strict upper triangle and ``diag``
    (``_solve_spd`` leaves the upper triangle as it was and overwrites the diagonal and b)."""
    for p in range(k):
        out[p] = diag[p] * x[p] - b[p]
    for p in range(k):
        Ap, xp = A[p], x[p]
        s = 0.0
        for q in range(p + 1, k):
            s += Ap[q] * x[q]
            out[q] += Ap[q] * xp
        out[p] += s
    for p in range(k):
        out[p] *= scale


@njit(nogil=True, cache=True)
def _dual_residual(G, d, k, y, ridge, x, scale, out):
    """out[:k] ← scale·(A x − b) for the primal system of a short row, A = GᵀG + ridge·I and b = Gᵀy with G's
    d rows: Gᵀ(G x − y) + ridge·x, without forming A (2dk)."""
    for c in range(k):
        out[c] = ridge * x[c]
    for j in range(d):
        e = _dot(G[j], x, k) - y[j]
        for c in range(k):
            out[c] += e * G[j, c]
    for c in range(k):
        out[c] *= scale


@njit(nogil=True, cache=True)
def _dual_solve(F, cols, sw, y, a, d, ridge, G, A, b, z, out):
    """out[:k] ← X_r for a row with d < k entries (from entry a) by its dual system: (G Gᵀ + ridge I_d) z = y_r,
    X_r = Gᵀ z with G = W^½ F_{C_r} (W = diag(sw²), or I when ``sw`` is empty). G, A (kp × kp), b and z are the
    caller's scratch; G's rows past d are zeroed up to a multiple of 4 for the Gram's blocks."""
    k = F.shape[1]
    dp = -(-d // 4) * 4
    G[d:dp] = 0.0
    if sw.shape[0] > 0:
        gather_scaled_rows(F, cols, a, d, sw[a : a + d], G)
    else:
        gather_rows(F, cols, a, d, G)
    b[:d] = y[a : a + d]
    _gram_upper(G, dp, k, A)
    for j in range(d):
        A[j, j] += ridge
    _solve_spd(A, d, b, z)
    out[:] = 0.0
    for j in range(d):
        for c in range(k):
            out[c] += z[j] * G[j, c]


@njit(nogil=True, cache=True, parallel=True)
def ridge_solve_rows_fused(indptr, cols, y, F, ridge, rows, n_threads, X, sw, scale, Gx):
    """X[n] ← (F_{C_r}ᵀ W F_{C_r} + ridge·I)^{-1} F_{C_r}ᵀ W^½ y_{C_r} for r = rows[n], W = diag(sw²) over the
    row's entries (W = I when ``sw`` is empty); rows without entries get 0. With ``Gx`` non-empty, also
    Gx[n] ← scale·(A X[n] − b), A and b the row's system: for the squared loss and scale = 2/|D| the row of ∇f
    at the solution, from the Gram already formed (k² a row, where a pass over the entries costs d·k).

    Parameters
    ----------
    indptr, cols, y : CSR structure of the rows (int64, int64, float64)
    F : (n_cols, k) float64 fixed factors, C-contiguous
    ridge : λ|D|/2
    rows : (m,) int64 rows to solve
    n_threads : numba's thread count (``numba.get_num_threads()``; read inside, it would block caching)
    X : (m, k) float64 output
    sw : (nnz,) float64 square roots of per-entry weights, or (0,) for none: the weighted least squares
        that a Newton step of a row's BCE problem is (``kernels.bce.newton_rows``); ``y`` then holds sw·z
    scale, Gx : the system's residual, scaled, into Gx (m, k), or Gx of shape (0, k) for none
    """
    weighted = sw.shape[0] > 0
    residual = Gx.shape[0] > 0
    k = F.shape[1]
    kp = -(-k // 4) * 4  # the Gram works on blocks of 4 rows: zero rows pad k
    m = rows.shape[0]
    d_max = 0
    for n in range(m):
        d_max = max(d_max, indptr[rows[n] + 1] - indptr[rows[n]])
    for t in prange(n_threads):
        Gt = np.zeros((kp, d_max))  # F_{C_r}ᵀ, for the primal Gram (d ≥ k)
        G = np.zeros((kp, kp))  # F_{C_r}, for the dual Gram (d < k), padded with zero rows
        A = np.empty((kp, kp))
        b = np.empty(kp)
        x = np.empty(kp)
        b0 = np.empty(kp)  # b and A's diagonal, which the solve overwrites: the residual needs them
        diag = np.empty(kp)
        for n in range(t, m, n_threads):  # interleaved: each thread gets a mix of light and heavy rows
            r = rows[n]
            a, d = indptr[r], indptr[r + 1] - indptr[r]
            if d == 0:
                X[n, :] = 0.0
                if residual:
                    Gx[n, :] = 0.0
            elif d >= k:
                _gather_transposed(F, cols, a, d, Gt)
                if weighted:
                    _scale_columns(Gt, sw, a, d, k)
                _gram_upper(Gt, kp, d, A)
                y_r = y[a : a + d]
                for c in range(k):
                    b[c] = _dot(Gt[c], y_r, d)
                    A[c, c] += ridge
                    b0[c], diag[c] = b[c], A[c, c]
                _solve_spd(A, k, b, x)
                X[n, :] = x[:k]
                if residual:
                    _primal_residual(A, diag, b0, x, k, scale, Gx[n])
            else:
                _dual_solve(F, cols, sw, y, a, d, ridge, G, A, b, x, X[n])
                if residual:
                    _dual_residual(G, d, k, y[a : a + d], ridge, X[n], scale, Gx[n])


@njit(nogil=True, cache=True, parallel=True)
def pair_scores_fused(U, V, u, i, out):
    """out[n] ← ⟨U[u[n]], V[i[n]]⟩, pairs split over numba's threads.

    The compiled twin of ``als.pair_scores`` for the training loop's residuals, gradients and Hessian
    products: one pass, no gathered |D|×k blocks.
    """
    k = U.shape[1]
    for n in prange(u.shape[0]):
        out[n] = _dot(U[u[n]], V[i[n]], k)


@njit(nogil=True, cache=True, parallel=True)
def gradient_rows_fused(indptr, cols, y, F_rows, F_cols, scale, lam, G, rss):
    """G[r] ← scale·Σ_e r_e F_cols[cols[e]] + lam·F_rows[r] and rss[r] ← Σ_e r_e², with
    r_e = y_e − ⟨F_rows[r], F_cols[cols[e]]⟩ over row r's entries e, rows split over numba's threads.

    The compiled twin of ``als.gradient_rows`` (scale = −2/|D|): residual, its square and the row's sum in one
    pass over the entries, where the numpy path scores every pair, then multiplies a sparse residual matrix.
    """
    k = F_rows.shape[1]
    for r in prange(G.shape[0]):
        f, g = F_rows[r], G[r]
        for c in range(k):
            g[c] = 0.0
        s2 = 0.0
        for e in range(uint64(indptr[r]), uint64(indptr[r + 1])):  # unsigned: see _gram_upper
            h = F_cols[cols[e]]
            res = y[e] - _dot(f, h, k)
            s2 += res * res
            for c in range(k):
                g[c] += res * h[c]
        for c in range(k):
            g[c] = scale * g[c] + lam * f[c]
        rss[r] = s2


@njit(nogil=True, cache=True, fastmath=True)
def _gram_apply(G, d, k, p, ridge, q):
    """q[:k] ← (GᵀG + ridge·I) p for the row's gathered factors G[:d, :k]: two passes of d·k, no Gram."""
    for c in range(k):
        q[c] = ridge * p[c]
    for j in range(d):
        g = G[j]
        t = 0.0
        for c in range(k):
            t += g[c] * p[c]
        for c in range(k):
            q[c] += t * g[c]


@njit(nogil=True, cache=True, fastmath=True)
def _gather_residual(F, cols, y, a, d, x, ridge, G, res, pre):
    """G[:d] ← F[cols[a:a+d]], res ← b − A x and pre ← diag(A) for the row's system A = GᵀG + ridge·I,
    b = Gᵀy[a:a+d], in one pass over the row's entries (each factor row read once, as it is gathered)."""
    k = F.shape[1]
    for c in range(k):
        res[c] = -ridge * x[c]
        pre[c] = ridge
    for j in range(d):
        f, g = F[cols[a + j]], G[j]
        s = 0.0
        for c in range(k):
            g[c] = f[c]
            s += f[c] * x[c]
        e = y[a + j] - s
        for c in range(k):
            res[c] += e * g[c]
            pre[c] += g[c] * g[c]


@njit(nogil=True, cache=True, parallel=True)
def ridge_cg_rows_fused(indptr, cols, y, F, ridge, X0, steps, n_threads, X):
    """X[r] ← ``steps`` Jacobi-preconditioned conjugate-gradient steps on (F_{C_r}ᵀ F_{C_r} + ridge·I) x =
    F_{C_r}ᵀ y_{C_r} from X0[r], for every row r that has at least k entries; a shorter row is solved exactly by
    its d×d dual system (cheap there, and what ``ridge_solve_rows_fused`` does). Rows without entries get 0. The
    caller rotates F and X0 into the basis it preconditions in (``als.ridge_cg_rows``).

    A step costs two passes over the row's d gathered factors (4dk flops) against the exact solve's Gram
    (dk² multiply-adds) and Cholesky (k³/3), so a few steps cost less than the solve, the more so as k grows
    (the gather and the start's residual are a fixed share of either). The steps stop early only on a
    residual of exactly zero (a start at the solution stays there).

    Parameters
    ----------
    indptr, cols, y : CSR structure of the rows (int64, int64, float64)
    F : (n_cols, k) float64 fixed factors, C-contiguous
    ridge : λ|D|/2
    X0 : (n_rows, k) float64 start, C-contiguous
    steps : CG steps a row (≥ 1)
    n_threads : numba's thread count (``numba.get_num_threads()``)
    X : (n_rows, k) float64 output (may not alias X0)
    """
    k = F.shape[1]
    kp = -(-k // 4) * 4
    m = len(indptr) - 1
    no_weights = np.empty(0)
    d_max = max_degree(indptr)
    for t in prange(n_threads):
        G = np.empty((d_max, k))  # the row's factors, gathered once: each step reads them twice
        A = np.empty((kp, kp))  # the dual d×d system of a short row
        Gp = np.zeros((kp, kp))
        b = np.empty(kp)
        z = np.empty(kp)
        x = np.empty(k)
        res = np.empty(k)
        pre = np.empty(k)
        zr = np.empty(k)
        p = np.empty(k)
        q = np.empty(k)
        for r in range(t, m, n_threads):
            a, d = indptr[r], indptr[r + 1] - indptr[r]
            if d == 0:
                X[r, :] = 0.0
                continue
            if d < k:  # the exact dual solve, as ridge_solve_rows_fused
                _dual_solve(F, cols, no_weights, y, a, d, ridge, Gp, A, b, z, X[r])
                continue
            for c in range(k):
                x[c] = X0[r, c]
            _gather_residual(F, cols, y, a, d, x, ridge, G, res, pre)
            for c in range(k):
                pre[c] = 1.0 / pre[c]
            rz = 0.0
            for c in range(k):
                zr[c] = pre[c] * res[c]
                p[c] = zr[c]
                rz += res[c] * zr[c]
            for _ in range(steps):
                if rz <= 0.0:
                    break
                _gram_apply(G, d, k, p, ridge, q)
                pq = 0.0
                for c in range(k):
                    pq += p[c] * q[c]
                alpha = rz / pq
                rz_new = 0.0
                for c in range(k):
                    x[c] += alpha * p[c]
                    res[c] -= alpha * q[c]
                    zr[c] = pre[c] * res[c]
                    rz_new += res[c] * zr[c]
                beta = rz_new / rz
                rz = rz_new
                for c in range(k):
                    p[c] = zr[c] + beta * p[c]
            X[r, :] = x


@njit(nogil=True, cache=True, parallel=True)
def hessian_rows_fused(indptr, cols, y, F_rows, F_cols, dF_rows, dF_cols, scale, lam, H):
    """H[r] ← scale·Σ_e (s_e F_cols[c_e] − r_e dF_cols[c_e]) + lam·dF_rows[r] over row r's entries e (column c_e),
    with r_e = y_e − ⟨F_rows[r], F_cols[c_e]⟩ and s_e = ⟨dF_rows[r], F_cols[c_e]⟩ + ⟨F_rows[r], dF_cols[c_e]⟩,
    rows split over numba's threads.

    The compiled twin of ``als.hessian_rows`` (scale = 2/|D|): the residual, the directional score and the row's
    sum in one pass over the entries, where the numpy path scores every pair three times and multiplies two sparse
    matrices.
    """
    k = F_rows.shape[1]
    for r in prange(H.shape[0]):
        f, df, h = F_rows[r], dF_rows[r], H[r]
        for c in range(k):
            h[c] = 0.0
        for e in range(uint64(indptr[r]), uint64(indptr[r + 1])):  # unsigned: see _gram_upper
            g, dg = F_cols[cols[e]], dF_cols[cols[e]]
            s, ds = _dot2(f, df, g, k)
            ds += _dot(f, dg, k)
            res = y[e] - s
            for c in range(k):
                h[c] += ds * g[c] - res * dg[c]
        for c in range(k):
            h[c] = scale * h[c] + lam * df[c]


@njit(nogil=True, cache=True, parallel=True)
def curvature_rows_fused(indptr, cols, F_cols, scale, n_threads, out):
    """out[r] ← scale·Σ_e F_cols[c_e] F_cols[c_e]ᵀ over row r's entries (k×k, symmetric), rows interleaved over
    numba's threads: the compiled twin of ``als.curvature_rows``, each Gram formed as the half-step's
    (``_gram_upper`` on the gathered factors) instead of a sparse product against every column's k² outer
    products."""
    k = F_cols.shape[1]
    kp = -(-k // 4) * 4
    m = len(indptr) - 1
    d_max = max_degree(indptr)
    for t in prange(n_threads):
        Gt = np.zeros((kp, max(d_max, 1)))
        A = np.empty((kp, kp))
        for r in range(t, m, n_threads):
            a, d = indptr[r], indptr[r + 1] - indptr[r]
            if d == 0:
                out[r, :, :] = 0.0
                continue
            _gather_transposed(F_cols, cols, a, d, Gt)
            _gram_upper(Gt, kp, d, A)
            for p in range(k):
                for q in range(p, k):
                    out[r, p, q] = out[r, q, p] = scale * A[p, q]


@njit(nogil=True, cache=True, parallel=True)
def cholesky_blocks(A):
    """A[n] ← its lower Cholesky factor L (A[n] = L Lᵀ) for every symmetric positive definite k×k block, in place,
    blocks split over numba's threads. Returns the index of the first block that is not positive definite, or −1.
    """
    n, k = A.shape[0], A.shape[1]
    bad = np.full(n, False)
    for b in prange(n):
        L = A[b]
        for j in range(k):
            s = L[j, j] - _dot(L[j], L[j], j)
            if not s > 0.0:
                bad[b] = True
                break
            d = np.sqrt(s)
            L[j, j] = d
            for i in range(j + 1, k):
                L[i, j] = (L[i, j] - _dot(L[i], L[j], j)) / d
        for i in range(k):
            for j in range(i + 1, k):
                L[i, j] = 0.0
    for b in range(n):
        if bad[b]:
            return b
    return -1


@njit(nogil=True, cache=True, parallel=True)
def cholesky_solve_blocks(L, R, Z):
    """Z[n] ← (L[n] L[n]ᵀ)⁻¹ R[n] for every block: a forward and a backward triangular sweep a row of R."""
    n, k = L.shape[0], L.shape[1]
    for b in prange(n):
        l, r, z = L[b], R[b], Z[b]
        for i in range(k):
            z[i] = (r[i] - _dot(l[i], z, i)) / l[i, i]
        # Lᵀz = y by columns of Lᵀ (rows of L): each step an axpy along a contiguous row, no dependent reduction.
        for i in range(k - 1, -1, -1):
            z[i] /= l[i, i]
            zi = z[i]
            for q in range(i):
                z[q] -= l[i, q] * zi
