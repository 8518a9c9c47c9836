"""Fused score-and-select representer kernel (numba): the compiled twin of ``representer.grouped_attributions``.

For every group (a user's history, or an item's raters) and each of its targets t, the kernel keeps
the top_k largest positive and most negative importances α_i⟨H_i, T_t⟩ without forming the padded
(B, t, d) stacks of the numpy path or its float32 copy, sort and flat index passes:

1. the group's history rows H are gathered once; its targets go in blocks of ``SCORE_BLOCK`` scores,
   one BLAS product L = T Hᵀ per block (float64, the same local importances as the numpy path's);
2. per target, one vectorised pass deals the row of importances α ⊙ L_t round-robin into
   ``lanes`` ≥ top_k lanes: the smallest lane maximum has at least top_k entries ≥ it (the lane
   maxima are distinct entries), so it bounds the top_k-th largest from below (likewise for the
   negatives); a second, branch-free pass collects the entries at or beyond the bounds;
3. the few candidates are ranked by their float64 value, ties by history position (``_best``) — the numpy
   path's contract (``representer._select_flat``), so both return the same attributions.

The scores are float64 throughout. A float32 scoring pass (half the product's width) with an error
margin and a float64 re-rank of its candidates was measured slower on ml-100k (item side 29 vs 21 ms,
user side 34 vs 28 ms): every selected pair then needs a float64 dot product of its own, while the
product is a third of the kernel's time (docs/scaling.md).

``@njit(nogil=True, cache=True)``: Dask's threads run it in parallel, and the machine code is cached
beside this module, so only the first call on a machine compiles (docs/scaling.md states the cost).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Scores per BLAS product: 32K float64 (256 KB) stay in L2 for the selection passes.
SCORE_BLOCK = 1 << 15
# At least this many lanes (a vector's worth), so short top_k still prune.
LANES_MIN = 8
# Candidate lists longer than this (exact ties) are ranked by a merge sort rather than by k scans.
SCAN_MAX = 64


@njit(nogil=True, cache=True, fastmath=True)
def _importance_and_bounds(a, L_t, d, lanes, hi, lo, imp):
    """imp[:d] ← a ⊙ L_t, and (τ⁺, τ⁻): at least ``lanes`` entries of imp are ≥ τ⁺ and as many ≤ τ⁻.

    τ⁺ is the smallest of the lane maxima when the row is dealt round-robin into ``lanes`` lanes,
    in the same vectorised pass that scales the row (no sort: a running top-k mispredicts a branch
    per insertion, several times the pass on rows of ~100). Rows shorter than two lanes' worth are
    taken whole (±inf).
    """
    for i in range(d):
        imp[i] = a[i] * L_t[i]
    if d < 2 * lanes:
        return -np.inf, np.inf
    for j in range(lanes):
        hi[j] = lo[j] = imp[j]
    full = d - d % lanes
    for b in range(lanes, full, lanes):
        for j in range(lanes):
            v = imp[b + j]
            hi[j] = max(hi[j], v)
            lo[j] = min(lo[j], v)
    for b in range(full, d):
        hi[b - full] = max(hi[b - full], imp[b])
        lo[b - full] = min(lo[b - full], imp[b])
    tau_hi, tau_lo = hi[0], lo[0]
    for j in range(1, lanes):
        tau_hi = min(tau_hi, hi[j])
        tau_lo = max(tau_lo, lo[j])
    return tau_hi, tau_lo


@njit(nogil=True, cache=True)
def _best(pos, val, m, k, sign, keep, w):
    """Write to ``keep`` the positions among the m candidates (in position order) of the k largest
    sign·value, ties by position; returns how many (min(m, k)).

    By k scans for the largest remaining (the first of equals, so ties go by position): k·m
    compare-and-selects on a few dozen candidates, cheaper than a sort that mispredicts every other
    step or than m² rank counting (measured). Longer lists (many exact ties) take a stable merge sort.
    """
    for a in range(m):  # into a scratch buffer: an allocation per call cost as much as the ranking
        w[a] = sign * val[a]
    if m > SCAN_MAX:
        order = np.argsort(-w[:m], kind="mergesort")[:k]
        keep[:len(order)] = pos[:m][np.sort(order)]
        return len(order)
    n = min(m, k)
    for b in range(n):
        best, at = -np.inf, 0
        for a in range(m):
            if w[a] > best:
                best, at = w[a], a
        keep[b] = pos[at]
        w[at] = -np.inf  # taken; every candidate's sign·value is > 0
    return n


@njit(nogil=True, cache=True)
def fused_group_top_k(hist_ptr, hist, hist_row, tgt_ptr, tgt, tgt_row, alpha, F_hist, F_tgt, top_k,
                      out_target, out_train, out_alpha, out_local):
    """Top_k positive and negative attributions of every (group, target), written to the ``out_*`` arrays.

    Parameters
    ----------
    hist_ptr, hist, hist_row, tgt_ptr, tgt, tgt_row : the groups (``representer.Groups``), int64
    alpha : (|D|,) float64 global importances
    F_hist, F_tgt : (n, r) float64 C-contiguous factor rows of the history and of the targets
    top_k : attributions kept per target and sign (> 0)
    out_target, out_train, out_alpha, out_local : outputs, room for Σ_g t_g · 2·min(top_k, d_g) rows

    Returns
    -------
    The number of rows written: target index, training-interaction index, α and local importance.
    """
    r = F_hist.shape[1]
    n_groups = hist_ptr.shape[0] - 1
    d_max = t_max = 0
    for g in range(n_groups):
        d = hist_ptr[g + 1] - hist_ptr[g]
        d_max = max(d_max, d)
        t_max = max(t_max, min(tgt_ptr[g + 1] - tgt_ptr[g], max(1, SCORE_BLOCK // max(d, 1))))
    H = np.empty((d_max, r))
    a_g = np.empty(d_max)
    imp = np.empty(d_max)
    T = np.empty((t_max, r))
    L_buf = np.empty(SCORE_BLOCK + d_max)
    c_hi = np.empty(d_max + 1, np.int64)  # candidate positions, one spare slot for branch-free appends
    c_lo = np.empty(d_max + 1, np.int64)
    val = np.empty(d_max + 1)
    w = np.empty(d_max + 1)
    keep = np.empty(top_k, np.int64)
    lanes = max(top_k, LANES_MIN)
    lane_hi = np.empty(lanes)
    lane_lo = np.empty(lanes)
    n_out = 0
    for g in range(n_groups):
        h0, d = hist_ptr[g], hist_ptr[g + 1] - hist_ptr[g]
        if d == 0 or tgt_ptr[g + 1] == tgt_ptr[g]:
            continue
        for i in range(d):
            a_g[i] = alpha[hist[h0 + i]]
            H[i, :] = F_hist[hist_row[h0 + i]]
        k = min(top_k, d)
        step = max(1, SCORE_BLOCK // d)
        for q0 in range(tgt_ptr[g], tgt_ptr[g + 1], step):
            nq = min(step, tgt_ptr[g + 1] - q0)
            for j in range(nq):
                T[j, :] = F_tgt[tgt_row[q0 + j]]
            L = L_buf[:nq * d].reshape((nq, d))  # (nq, d) local importances, into a reused buffer
            np.dot(T[:nq], H[:d].T, L)
            for j in range(nq):
                L_t = L[j]
                tau_hi, tau_lo = _importance_and_bounds(a_g, L_t, d, lanes, lane_hi, lane_lo, imp)
                row = imp[:d]
                m_hi = m_lo = 0
                for i in range(d):  # branch-free appends: most entries are not candidates
                    v = row[i]
                    c_hi[m_hi] = i
                    m_hi += v >= tau_hi
                    c_lo[m_lo] = i
                    m_lo += v <= tau_lo
                for sign in (1.0, -1.0):
                    cand, m = (c_hi, m_hi) if sign > 0 else (c_lo, m_lo)
                    n = 0
                    for a in range(m):  # only positives (negatives) qualify; zeros never (numpy: nor |v| < 1.4e-45)
                        v = row[cand[a]]
                        if sign * v > 0.0:
                            cand[n], val[n] = cand[a], v
                            n += 1
                    for b in range(_best(cand, val, n, k, sign, keep, w)):
                        i = keep[b]
                        out_target[n_out] = tgt[q0 + j]
                        out_train[n_out] = hist[h0 + i]
                        out_alpha[n_out] = a_g[i]
                        out_local[n_out] = L_t[i]
                        n_out += 1
    return n_out
