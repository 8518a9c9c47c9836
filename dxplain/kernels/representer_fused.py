"""Fused score-and-select representer kernel (numba): the compiled twin of ``representer.grouped_attributions``.

For every group (a user's history, or an item's raters) and each of its targets t, the kernel scores the
α-scaled history rows X_i = α_i H_i against T_t in float32 and keeps the top_k largest positive and most
negative α_i⟨H_i, T_t⟩, without forming the stacked (B, t, d) score blocks of the numpy path:

1. s_i = fl32(⟨X̂_i, T̂_t⟩) on float32 copies, into a buffer of one row (d floats, in L1), while a
   running top_k of s gives its k-th largest τ⁺ and k-th smallest τ⁻;
2. every row with s_i ≥ τ⁺ − 2E (or ≤ τ⁻ + 2E) is a candidate, E ≥ |s_i − v_i| bounding the float32
   error against the exact v_i = α_i⟨H_i, T_t⟩ (below); the k rows holding the top s are within E of
   their exact value, so the exact k-th best is ≥ τ⁺ − E and every exact top_k row is a candidate;
3. candidates are scored exactly in float64 and ranked, ties by history position — the numpy path's
   contract (``representer._select_flat``), so both return the same attributions.

Float32 error bound: rounding X and T to float32 costs ≤ 2u·Σ|x||t| (u = 2⁻²⁴), a k-term float32 dot in
any order (fastmath reassociates it) ≤ k·u·Σ|x̂||t̂|, so |s − v| ≤ (k + 4)·u·‖X_i‖‖T_t‖ with Cauchy–Schwarz.
One E per target uses max_i ‖X_i‖.

``@njit(nogil=True, cache=True)``: Dask's threads run it in parallel, and the machine code is cached
beside this module, so only the first call on a machine compiles (docs/scaling.md states the cost).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Float32 unit roundoff, and a floor for the error bound that covers float32 underflow in the products.
U32 = 2.0 ** -24
TINY = 1e-36
# Float32 scores per sgemm block: 64K floats (256 KB) stay in L2 for the selection passes.
SCORE_BLOCK = 1 << 16


@njit(nogil=True, cache=True, fastmath=True)
def _dot64(A, a, B, b):
    """⟨A_a, B_b⟩ in float64 (fastmath: vectorised; the rounding differs from BLAS's by a few ulps)."""
    s = 0.0
    for c in range(A.shape[1]):
        s += A[a, c] * B[b, c]
    return s


@njit(nogil=True, cache=True, fastmath=True)
def _lane_bounds(row, k, lanes, hi, lo):
    """Lower bound of the k-th largest and upper bound of the k-th smallest entry of ``row``.

    The row is dealt round-robin into ``lanes`` (≥ k) lanes; the lane maxima are distinct entries, so
    the k-th largest of them has at least k entries ≥ it. One vectorised pass, then two small sorts —
    a running top-k costs a mispredicted branch per insertion, several times more on rows of ~100.
    """
    d = row.shape[0]
    if d < 2 * lanes:
        return -np.inf, np.inf  # short rows: every entry is a candidate
    for j in range(lanes):
        hi[j] = lo[j] = row[j]
    full = d - d % lanes
    for a in range(lanes, full, lanes):
        for j in range(lanes):
            v = row[a + j]
            hi[j] = max(hi[j], v)
            lo[j] = min(lo[j], v)
    for a in range(full, d):
        hi[a - full] = max(hi[a - full], row[a])
        lo[a - full] = min(lo[a - full], row[a])
    return _kth_of(hi, lanes, k, 1.0), _kth_of(lo, lanes, k, -1.0)


@njit(nogil=True, cache=True)
def _kth_of(v, m, k, sign):
    """The k-th largest (sign +1) or k-th smallest (−1) of v[:m], m ≥ k; v is reordered."""
    for a in range(1, m):  # insertion sort by sign·v descending: m is a few dozen at most
        x = v[a]
        b = a
        while b > 0 and sign * v[b - 1] < sign * x:
            v[b] = v[b - 1]
            b -= 1
        v[b] = x
    return v[k - 1]


@njit(nogil=True, cache=True)
def _keep_best(pos, val, loc, m, k, sign):
    """Order the m candidates by sign·value descending, ties by position; the first min(m, k) are kept."""
    for a in range(1, m):  # stable insertion sort (candidates come by position): m is k plus ties
        c, v, w = pos[a], val[a], loc[a]
        b = a
        while b > 0 and sign * val[b - 1] < sign * v:
            pos[b], val[b], loc[b] = pos[b - 1], val[b - 1], loc[b - 1]
            b -= 1
        pos[b], val[b], loc[b] = c, v, w
    return min(m, k)


@njit(nogil=True, cache=True)
def fused_group_top_k(hist_ptr, hist, hist_row, tgt_ptr, tgt, tgt_row, alpha, F_hist, F_tgt, top_k,
                      out_target, out_train, out_alpha, out_local):
    """Top_k positive and negative attributions of every (group, target), written to the ``out_*`` arrays.

    Parameters
    ----------
    hist_ptr, hist, hist_row, tgt_ptr, tgt, tgt_row : the groups (``representer.Groups``)
    alpha : (|D|,) float64 global importances
    F_hist, F_tgt : (n, r) float64 factor rows of the history and of the targets
    top_k : attributions kept per target and sign (> 0)
    out_target, out_train, out_alpha, out_local : outputs, room for Σ_g t_g · 2·min(top_k, d_g) rows

    Returns
    -------
    The number of rows written: target index, training-interaction index, α and exact local importance.
    """
    r = F_hist.shape[1]
    n_groups = hist_ptr.shape[0] - 1
    d_max = t_max = 0
    for g in range(n_groups):
        d = hist_ptr[g + 1] - hist_ptr[g]
        d_max = max(d_max, d)
        t_max = max(t_max, min(tgt_ptr[g + 1] - tgt_ptr[g], max(1, SCORE_BLOCK // max(d, 1))))
    X = np.empty((d_max, r), np.float32)
    T = np.empty((t_max, r), np.float32)
    c_hi = np.empty(d_max + 1, np.int64)  # candidate positions, one spare slot for branch-free appends
    c_lo = np.empty(d_max + 1, np.int64)
    s32 = np.empty(d_max, np.float32)
    pos = np.empty(d_max, np.int64)
    val = np.empty(d_max)
    loc = np.empty(d_max)
    lanes = max(16, -(-2 * top_k // 8) * 8)
    lane_hi = np.empty(lanes, np.float32)
    lane_lo = np.empty(lanes, np.float32)
    eps = (r + 4) * U32
    n_out = 0
    for g in range(n_groups):
        h0, d = hist_ptr[g], hist_ptr[g + 1] - hist_ptr[g]
        if d == 0 or tgt_ptr[g + 1] == tgt_ptr[g]:
            continue
        x_max = 0.0  # max ‖X_i‖², for the error bound
        for i in range(d):
            a, row = alpha[hist[h0 + i]], hist_row[h0 + i]
            nrm = 0.0
            for c in range(r):
                x = a * F_hist[row, c]
                X[i, c] = x
                nrm += x * x
            x_max = max(x_max, nrm)
        Xg = X[:d]
        k = min(top_k, d)
        # Targets in blocks whose (targets × d) float32 scores stay in cache: one sgemm per block.
        step = max(1, SCORE_BLOCK // d)
        for q0 in range(tgt_ptr[g], tgt_ptr[g + 1], step):
            nq = min(step, tgt_ptr[g + 1] - q0)
            for j in range(nq):
                for c in range(r):
                    T[j, c] = F_tgt[tgt_row[q0 + j], c]
            S = np.dot(T[:nq], Xg.T)  # (nq, d) float32 scores
            for j in range(nq):
                q, trow = q0 + j, tgt_row[q0 + j]
                t_nrm = 0.0
                for c in range(r):
                    t_nrm += F_tgt[trow, c] ** 2
                margin = 2.0 * (eps * np.sqrt(x_max * t_nrm) + TINY)
                row = S[j]
                b_hi, b_lo = _lane_bounds(row, k, lanes, lane_hi, lane_lo)
                b_hi, b_lo = b_hi - margin, b_lo + margin
                m_hi = m_lo = 0
                for i in range(d):  # branch-free appends: most rows are not candidates
                    v = row[i]
                    c_hi[m_hi] = i
                    m_hi += v >= b_hi
                    c_lo[m_lo] = i
                    m_lo += v <= b_lo
                for sign in (1.0, -1.0):
                    cand, m = (c_hi, m_hi) if sign > 0 else (c_lo, m_lo)
                    for a in range(m):
                        s32[a] = row[cand[a]]
                    tau = sign * _kth_of(s32, m, k, sign) - margin  # s·score ≥ tau holds every exact top_k
                    n = 0
                    for a in range(m):
                        i = cand[a]
                        if sign * row[i] >= tau:
                            p = h0 + i
                            local = _dot64(F_tgt, trow, F_hist, hist_row[p])
                            v = alpha[hist[p]] * local
                            if sign * v > 0.0:
                                pos[n], val[n], loc[n] = i, v, local
                                n += 1
                    for j2 in range(_keep_best(pos, val, loc, n, k, sign)):
                        p = h0 + pos[j2]
                        out_target[n_out] = tgt[q]
                        out_train[n_out] = hist[p]
                        out_alpha[n_out] = alpha[hist[p]]
                        out_local[n_out] = loc[j2]
                        n_out += 1
    return n_out
