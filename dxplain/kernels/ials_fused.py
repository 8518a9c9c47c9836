"""Compiled iALS row loops (numba): the twins of ``ials.half_step`` and ``ials.gradient_rows``, which stay as the
tests' reference.

A row's system is G + Σ_e (c_e − 1) F_e F_eᵀ + λ w I: the Gram G of the whole other side, shared by every row,
plus a correction from the row's own entries only. The correction is formed as two Grams of gathered,
transposed rows scaled by √|c_e − 1| (one for c_e > 1, one for c_e < 1, subtracted), in ``als_fused``'s blocked
dot products, then the row is solved by its Cholesky factorisation. Entries with c_e = 1 (the ``implicit``
convention at α|r| = 1) cost nothing beyond the right-hand side, and rows all of whose entries have c_e = 1 and
whose λw is the one given are left to the caller, which solves them together against one factorisation of
G + λw I (``ials.half_step``; ``implicit``'s defaults on 0/1 data make every row such a row).

Rows run over numba's threads, interleaved so that light and heavy rows mix; ``nogil`` lets Dask's threads run
parts side by side. ``cache=True``: compiled once per machine.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from .als_fused import _dot, _dot2, _gram_upper, _solve_spd, max_degree


@njit(nogil=True, cache=True)
def _gather_weighted(F, cols, c, a, d, sign, Gt):
    """Gt[:, :n] ← √(sign·(c_e − 1)) F_eᵀ for the n entries e of a:a+d with sign·(c_e − 1) > 0; returns n."""
    k = F.shape[1]
    n = 0
    for j in range(d):
        w = sign * (c[a + j] - 1.0)
        if w > 0.0:
            s = np.sqrt(w)
            f = F[cols[a + j]]
            for q in range(k):
                Gt[q, n] = s * f[q]
            n += 1
    return n


@njit(nogil=True, cache=True)
def _add_upper(A, S, k, sign):
    """A[p, q] += sign·S[p, q] for p ≤ q < k."""
    for p in range(k):
        for q in range(p, k):
            A[p, q] += sign * S[p, q]


@njit(nogil=True, cache=True)
def _row_system(F, cols, c, a, d, G, lam_w_r, k, kp, Gt, S, A):
    """A's upper triangle ← G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w_r I for the row's entries a:a+d."""
    for q in range(k):
        A[q, q:k] = G[q, q:k]
        A[q, q] += lam_w_r
    for sign in (1.0, -1.0):
        n = _gather_weighted(F, cols, c, a, d, sign, Gt)
        if n > 0:
            _gram_upper(Gt, kp, n, S)
            _add_upper(A, S, k, sign)


@njit(nogil=True, cache=True, parallel=True)
def half_step_fused(indptr, cols, c, p, F, G, lam_w, n_threads, X, lam_shared, shared):
    """X[r] ← (G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w[r] I)⁻¹ Σ_{e∈O_r} c_e p_e F_e for every row r (CSR over
    ``cols``); a row with a zero right-hand side gets 0. A row without a correction whose lam_w[r] is
    ``lam_shared`` gets its right-hand side instead and shared[r] = True: the caller solves all such rows
    against G + lam_shared·I at once (``ials.half_step``).

    Parameters
    ----------
    indptr, cols, c, p : int64, int64, float64, float64: the rows' entries, confidences and preferences
    F : (n_cols, k) float64, C-contiguous: the other side's factors
    G : (k, k) float64: FᵀF
    lam_w : (n_rows,) float64: λ w per row
    n_threads : numba's thread count (``numba.get_num_threads()``; read inside, it would block caching)
    X : (n_rows, k) float64 output
    lam_shared : float64, NaN for none; shared : (n_rows,) bool output
    """
    k = F.shape[1]
    kp = -(-k // 4) * 4  # the Gram works on blocks of 4 rows: zero rows pad k
    m = X.shape[0]
    d_max = max_degree(indptr)
    for t in prange(n_threads):
        Gt = np.zeros((kp, max(d_max, 1)))
        A = np.empty((kp, kp))
        S = np.empty((kp, kp))
        b = np.empty(kp)
        x = np.empty(kp)
        for r in range(t, m, n_threads):
            a, d = indptr[r], indptr[r + 1] - indptr[r]
            for q in range(k):
                b[q] = 0.0
            live, corrected = False, False
            for j in range(d):
                corrected = corrected or c[a + j] != 1.0
                w = c[a + j] * p[a + j]
                if w != 0.0:
                    live = True
                    f = F[cols[a + j]]
                    for q in range(k):
                        b[q] += w * f[q]
            shared[r] = False
            if not live:
                X[r, :] = 0.0
                continue
            if not corrected and lam_w[r] == lam_shared:
                X[r, :] = b[:k]
                shared[r] = True
                continue
            _row_system(F, cols, c, a, d, G, lam_w[r], k, kp, Gt, S, A)
            _solve_spd(A, k, b, x)
            X[r, :] = x[:k]


@njit(nogil=True, cache=True, parallel=True)
def gradient_rows_fused(indptr, cols, c, p, X, F, XG, lam_w, g, data):
    """g[r] ← 2[(XG_r + lam_w[r] X_r + Σ_{e∈O_r} ((c_e − 1) s_e − c_e p_e) F_e] and
    data[r] ← ⟨XG_r, X_r⟩ + Σ_{e∈O_r} (c_e (p_e − s_e)² − s_e²), s_e = ⟨X_r, F_e⟩: ``ials.gradient_rows`` per row,
    with XG = X G (G = FᵀF) formed by the caller in one matrix product (k² a row, which BLAS does at its peak)."""
    k = F.shape[1]
    for r in prange(X.shape[0]):
        x, gr, xg = X[r], g[r], XG[r]
        xGx = 0.0
        for q in range(k):
            gr[q] = xg[q] + lam_w[r] * x[q]
            xGx += xg[q] * x[q]
        acc = 0.0
        for e in range(uint64(indptr[r]), uint64(indptr[r + 1])):  # unsigned: see als_fused._gram_upper
            f = F[cols[e]]
            s = _dot(x, f, k)
            ce, pe = c[e], p[e]
            acc += ce * (pe - s) * (pe - s) - s * s
            w = (ce - 1.0) * s - ce * pe
            for q in range(k):
                gr[q] += w * f[q]
        for q in range(k):
            gr[q] *= 2.0
        data[r] = xGx + acc


@njit(nogil=True, cache=True, parallel=True)
def hessian_rows_fused(indptr, cols, c, p, X, F, dX, dF, base, out):
    """out[r] ← 2[base_r + Σ_{e∈O_r} ((c_e − 1) ds_e F_e + ((c_e − 1) s_e − c_e p_e) dF_e)], s_e = ⟨X_r, F_e⟩,
    ds_e = ⟨dX_r, F_e⟩ + ⟨X_r, dF_e⟩: ``ials.hessian_vector_rows`` per row, with base = dX (G + λw) + X S formed
    by the caller in matrix products. An entry with c_e = 1 (``implicit``'s α|r| = 1) adds −p_e dF_e only."""
    k = F.shape[1]
    for r in prange(X.shape[0]):
        x, dx, o, b = X[r], dX[r], out[r], base[r]
        for q in range(k):
            o[q] = b[q]
        for e in range(uint64(indptr[r]), uint64(indptr[r + 1])):  # unsigned: see als_fused._gram_upper
            f, df = F[cols[e]], dF[cols[e]]
            ce = c[e]
            if ce == 1.0:
                w2 = -p[e]
                for q in range(k):
                    o[q] += w2 * df[q]
                continue
            s, ds = _dot2(x, dx, f, k)
            ds += _dot(x, df, k)
            w1, w2 = (ce - 1.0) * ds, (ce - 1.0) * s - ce * p[e]
            for q in range(k):
                o[q] += w1 * f[q] + w2 * df[q]
        for q in range(k):
            o[q] *= 2.0


@njit(nogil=True, cache=True, parallel=True)
def curvature_rows_fused(indptr, cols, c, F, G, lam_w, n_threads, out):
    """out[r] ← 2 (G + Σ_{e∈O_r} (c_e − 1) F_e F_eᵀ + lam_w[r] I) for every row: ``ials.curvature_rows``, the
    correction formed as ``half_step_fused`` forms it."""
    k = F.shape[1]
    kp = -(-k // 4) * 4
    m = out.shape[0]
    d_max = max_degree(indptr)
    for t in prange(n_threads):
        Gt = np.zeros((kp, max(d_max, 1)))
        A = np.empty((kp, kp))
        S = np.empty((kp, kp))
        for r in range(t, m, n_threads):
            a, d = indptr[r], indptr[r + 1] - indptr[r]
            _row_system(F, cols, c, a, d, G, lam_w[r], k, kp, Gt, S, A)
            for q in range(k):
                for s in range(q, k):
                    out[r, q, s] = out[r, s, q] = 2.0 * A[q, s]
