"""Fused score-and-select representer kernel (numba): the compiled twin of ``representer.grouped_attributions``.

For every group (a user's history, or an item's raters) and each of its targets t, the kernel keeps
the top_k largest positive and most negative importances α_i⟨F_i, T_t⟩ without forming the padded
(B, t, d) stacks of the numpy path or its float32 copy, sort and flat index passes:

1. the group's history rows F_i are gathered once, each scaled by its α as it is copied (H = diag(α) F, as the
   numpy path's product for heavy items); its targets go in batches of ``SCORE_BATCH`` scores, one BLAS product
   I = T Hᵀ per batch: the importances themselves, float64, with no pass of their own to scale by α. A selected
   pair's local importance ⟨F_i, T_t⟩ is reported as I / α (within a few ulps of the dot product; the numpy
   path computes it directly);
2. per target, one vectorised pass deals the row of importances I_t round-robin into
   ``lanes`` (16 for top_k ≤ 11) lanes: the lane maxima are distinct entries, so the top_k-th largest
   of them has at least top_k entries ≥ it and bounds the row's top_k-th largest from below (likewise
   for the negatives); a second pass collects the entries at or beyond the bounds, 8 at a time by AVX-512's
   compress where numba targets it (``simd.HAS_AVX512``), branch-free scalar appends elsewhere;
3. the few candidates (~14 per sign on ml-100k) are ranked by their float64 value, ties by history
   position (``_best``) — the numpy path's contract (``representer._select_flat``), so both return the
   same attributions (within a target, in history order rather than by rank), up to rounding: the two
   paths' products sum in different orders, so pairs within a few ulps of each other may rank differently.

The scores are float64 throughout: a float32 scoring pass (half the product's width) would need an error
margin and a float64 re-rank of its candidates, a dot product of its own for every selected pair, while the
product is only about a third of the kernel's time.

``@njit(nogil=True, cache=True)``: Dask's threads run it in parallel, and the machine code is cached
beside this module, so only the first call on a machine compiles (docs/scaling.md states the cost).
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from .gather import gather_rows, gather_scaled_rows
from .simd import HAS_AVX512, compress_positions8, lane_extrema16

# Scores per BLAS product: 32K float64 (256 KB) stay in L2 for the selection passes (for histories of
# up to 1,024 rows; longer ones take MIN_BATCH_TARGETS rows of scores, up to 32·d floats, for the BLAS rate).
SCORE_BATCH = 1 << 15
# ... yet at least this many targets per product: a (t × r)·(r × d) product of fewer target rows runs well
# below BLAS's rate on long histories (a popular item's raters).
MIN_BATCH_TARGETS = 32
# At least this many lanes (a vector's worth), so short top_k still prune.
LANES_MIN = 8
# Lanes of the tight bound (the k-th largest lane maximum): at least 16 (two AVX-512 vectors), ~1.5·top_k
# rounded up to a multiple of 8 above top_k = 11, at most LANES_MAX.
LANES_TIGHT = 16
LANES_MAX = 64
# Candidate lists longer than this (exact ties, short rows taken whole) are ranked by a merge sort rather
# than by rank counting (m² compares).
SCAN_MAX = 64


@njit(nogil=True, cache=True)
def _kth_pair(hi, lo, n, k):
    """(The k-th largest of hi[:n], the k-th smallest of lo[:n]) (1 ≤ k ≤ n): the smallest entry of hi with fewer
    than k entries above it, and the mirror for lo.

    n² branch-free compares on a few lane maxima and minima: cheaper than a sort (or an allocation) at n = 16,
    and both in one set of loops, cheaper than two calls of one."""
    t_hi, t_lo = np.inf, -np.inf
    for a in range(n):
        ha, la = hi[a], lo[a]
        c_hi = c_lo = 0
        for b in range(n):
            c_hi += hi[b] > ha
            c_lo += lo[b] < la
        t_hi = min(t_hi, ha if c_hi < k else np.inf)
        t_lo = max(t_lo, la if c_lo < k else -np.inf)
    return t_hi, t_lo


@njit(nogil=True, cache=True)
def _cx(a, b):
    """A comparator: (min, max)."""
    return min(a, b), max(a, b)


@njit(nogil=True, cache=True)
def _sorted16(x):
    """x[:16] in ascending order, as a tuple: Green's 60-comparator sorting network for 16 inputs (Knuth, TAOCP
    vol. 3, §5.3.4), its ten layers of independent comparators one paragraph each.

    Branch-free and held in registers: both lane bounds of a row cost a fraction of ``_kth_pair``'s n²
    counts. A test feeds it every 0-1 input: a network that sorts
    those sorts any input (the 0-1 principle)."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    x8, x9, x10, x11, x12, x13, x14, x15 = x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]

    x0, x13 = _cx(x0, x13)
    x1, x12 = _cx(x1, x12)
    x2, x15 = _cx(x2, x15)
    x3, x14 = _cx(x3, x14)
    x4, x8 = _cx(x4, x8)
    x5, x6 = _cx(x5, x6)
    x7, x11 = _cx(x7, x11)
    x9, x10 = _cx(x9, x10)

    x0, x5 = _cx(x0, x5)
    x1, x7 = _cx(x1, x7)
    x2, x9 = _cx(x2, x9)
    x3, x4 = _cx(x3, x4)
    x6, x13 = _cx(x6, x13)
    x8, x14 = _cx(x8, x14)
    x10, x15 = _cx(x10, x15)
    x11, x12 = _cx(x11, x12)

    x0, x1 = _cx(x0, x1)
    x2, x3 = _cx(x2, x3)
    x4, x5 = _cx(x4, x5)
    x6, x8 = _cx(x6, x8)
    x7, x9 = _cx(x7, x9)
    x10, x11 = _cx(x10, x11)
    x12, x13 = _cx(x12, x13)
    x14, x15 = _cx(x14, x15)

    x0, x2 = _cx(x0, x2)
    x1, x3 = _cx(x1, x3)
    x4, x10 = _cx(x4, x10)
    x5, x11 = _cx(x5, x11)
    x6, x7 = _cx(x6, x7)
    x8, x9 = _cx(x8, x9)
    x12, x14 = _cx(x12, x14)
    x13, x15 = _cx(x13, x15)

    x1, x2 = _cx(x1, x2)
    x3, x12 = _cx(x3, x12)
    x4, x6 = _cx(x4, x6)
    x5, x7 = _cx(x5, x7)
    x8, x10 = _cx(x8, x10)
    x9, x11 = _cx(x9, x11)
    x13, x14 = _cx(x13, x14)

    x1, x4 = _cx(x1, x4)
    x2, x6 = _cx(x2, x6)
    x5, x8 = _cx(x5, x8)
    x7, x10 = _cx(x7, x10)
    x9, x13 = _cx(x9, x13)
    x11, x14 = _cx(x11, x14)

    x2, x4 = _cx(x2, x4)
    x3, x6 = _cx(x3, x6)
    x9, x12 = _cx(x9, x12)
    x11, x13 = _cx(x11, x13)

    x3, x5 = _cx(x3, x5)
    x6, x8 = _cx(x6, x8)
    x7, x9 = _cx(x7, x9)
    x10, x12 = _cx(x10, x12)

    x3, x4 = _cx(x3, x4)
    x5, x6 = _cx(x5, x6)
    x7, x8 = _cx(x7, x8)
    x9, x10 = _cx(x9, x10)
    x11, x12 = _cx(x11, x12)

    x6, x7 = _cx(x6, x7)
    x8, x9 = _cx(x8, x9)
    return x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15


@njit(nogil=True, cache=True, fastmath=True)
def _importance_bounds(imp, d, lanes, k, hi, lo):
    """(τ⁺, τ⁻): at least k entries of the importances imp[:d] are ≥ τ⁺ and as many ≤ τ⁻.

    The row is dealt round-robin into ``lanes`` ≥ k lanes (entry i into lane i mod lanes); the lane
    maxima are distinct entries, so their k-th largest bounds the row's k-th largest from below (likewise
    the minima). More lanes than k make the bound tight: on ml-100k 16 lanes leave ~14 candidates per sign
    for top-10, the smallest of 10 lane maxima ~25, and the final ranking is quadratic in that count. Rows
    shorter than two lanes' worth are taken whole (±inf). With 16 lanes (top_k ≤ 11) the lanes are two
    16-double vectors (``simd.lane_extrema16``) and their k-th values come from the sorting network; other lane
    counts keep them as scalars. ``hi`` and ``lo`` are scratch (≥ lanes entries). The lanes live in vector
    registers, not in arrays, which would cost a load and a store an entry.
    """
    if d < 2 * lanes:
        return -np.inf, np.inf
    if lanes == 16:  # top_k ≤ 11, the usual case: the lanes as two vectors, then sorted (k ≤ lanes)
        full = d - d % 16
        lane_extrema16(imp, full, hi, lo)
        for j in range(d - full):  # the last, partial vector of lanes
            hi[j] = max(hi[j], imp[full + j])
            lo[j] = min(lo[j], imp[full + j])
        s_hi, s_lo = _sorted16(hi), _sorted16(lo)
        return s_hi[16 - k], s_lo[k - 1]
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
    if k == lanes:  # the smallest lane maximum: O(lanes), for long top_k
        tau_hi, tau_lo = hi[0], lo[0]
        for j in range(1, lanes):
            tau_hi = min(tau_hi, hi[j])
            tau_lo = max(tau_lo, lo[j])
        return tau_hi, tau_lo
    return _kth_pair(hi, lo, lanes, k)


@njit(nogil=True, cache=True, fastmath=True)
def _best(pos, val, m, k, sign, keep, w):
    """Write to ``keep`` the positions among the m candidates (in position order) of the k largest
    sign·value, ties by position; returns how many (min(m, k)), in position order. ``keep`` has room
    for k + 1: the appends are branch-free, so a candidate that is not kept is written one past the last.

    Every candidate's sign·value is > 0 (the caller's filter). Up to 16 candidates (the ~14 the bounds leave
    on ml-100k), the sorting network gives the k-th largest τ and one pass keeps those above it and the
    earliest of those equal to it, cheaper than rank counting at that size. Up to
    SCAN_MAX, a candidate is kept when fewer than k others beat it (larger, or equal and earlier): m² compares
    without a data-dependent branch, cheaper than k scans for the largest remaining (a mispredicted branch
    per new maximum) or a sort. Longer lists (many exact ties, or short rows taken whole) take a stable
    merge sort.
    """
    for a in range(m):  # into a scratch buffer: an allocation per call cost as much as the ranking
        w[a] = sign * val[a]
    if m <= k:
        for a in range(m):
            keep[a] = pos[a]
        return m
    if m > SCAN_MAX:
        order = np.argsort(-w[:m], kind="mergesort")[:k]
        keep[: len(order)] = pos[:m][np.sort(order)]
        return len(order)
    if m <= 16:  # the k-th largest by the sorting network, then one pass keeps what beats or ties it
        for a in range(m, 16):
            w[a] = 0.0  # below every candidate (each is > 0), so never among the k largest (k < m)
        tau = _sorted16(w)[16 - k]
        above = 0
        for a in range(m):
            above += w[a] > tau
        ties = k - above  # of the candidates equal to tau, the earliest this many are kept
        n = 0
        for a in range(m):
            wa = w[a]
            tie = (wa == tau) & (ties > 0)
            keep[n] = pos[a]
            ties -= tie
            n += (wa > tau) | tie
        return n
    n = 0
    for a in range(m):
        wa = w[a]
        c = 0
        for b in range(a):
            c += w[b] >= wa
        for b in range(uint64(a + 1), uint64(m)):  # unsigned: a signed runtime start is not vectorised (als_fused)
            c += w[b] > wa
        keep[n] = pos[a]
        n += c < k
    return n


@njit(nogil=True, cache=True, inline="always")
def _append_from(x, start, d, tau_hi, tau_lo, c_hi, c_lo, m_hi, m_lo):
    """``_append_scalar`` over positions start:d, appending after m_hi and m_lo kept ones; the new counts.

    Inlined into each caller at numba's IR level, so the compress path's scalar tail is this loop itself,
    with no call in between."""
    for i in range(start, d):
        v = x[i]
        c_hi[m_hi] = i
        m_hi += v >= tau_hi
        c_lo[m_lo] = i
        m_lo += v <= tau_lo
    return m_hi, m_lo


@njit(nogil=True, cache=True)
def _append_scalar(x, d, tau_hi, tau_lo, c_hi, c_lo):
    """(m_hi, m_lo): the positions i < d with x[i] ≥ tau_hi written to c_hi[:m_hi] in order, and those with
    x[i] ≤ tau_lo to c_lo[:m_lo]. Branch-free (most entries are not candidates): a position not kept is written
    one past the last kept, so c_hi and c_lo need room for d (the counts never pass the positions seen)."""
    return _append_from(x, 0, d, tau_hi, tau_lo, c_hi, c_lo, 0, 0)


@njit(nogil=True, cache=True)
def _append_compress(x, d, tau_hi, tau_lo, c_hi, c_lo):
    """``_append_scalar`` by AVX-512's compress, 8 entries at a time, the rest as there. Each vector's
    full-width stores stay below its last position + 1."""
    m_hi = m_lo = 0
    full = d - d % 8
    for i in range(0, full, 8):
        m_hi, m_lo = compress_positions8(x, i, tau_hi, tau_lo, c_hi, m_hi, c_lo, m_lo)
    return _append_from(x, full, d, tau_hi, tau_lo, c_hi, c_lo, m_hi, m_lo)


# The candidates' appends: compressed where numba targets AVX-512, scalar elsewhere (the same positions; a test
# compares the two).
_append_candidates = _append_compress if HAS_AVX512 else _append_scalar


@njit(nogil=True, cache=True)
def _batch_targets(d):
    """Targets per BLAS product for a history of d rows: SCORE_BATCH scores, but at least
    MIN_BATCH_TARGETS, under which a (t × r)·(r × d) product runs at half rate or less."""
    return max(MIN_BATCH_TARGETS, SCORE_BATCH // max(d, 1))


@njit(nogil=True, cache=True)
def fused_group_top_k(
    hist_ptr,
    hist,
    hist_row,
    tgt_ptr,
    tgt,
    tgt_row,
    alpha,
    F_hist,
    F_tgt,
    top_k,
    out_target,
    out_train,
    out_alpha,
    out_local,
):
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
    d_max = t_max = l_max = 0
    for g in range(n_groups):
        d = hist_ptr[g + 1] - hist_ptr[g]
        d_max = max(d_max, d)
        nq = min(tgt_ptr[g + 1] - tgt_ptr[g], _batch_targets(d))
        t_max = max(t_max, nq)
        l_max = max(l_max, nq * d)
    H = np.empty((d_max, r))
    a_g = np.empty(d_max)
    T = np.empty((t_max, r))
    I_buf = np.empty(l_max)
    c_hi = np.empty(d_max + 1, np.int64)  # candidate positions: the appends write below d (one slot to spare)
    c_lo = np.empty(d_max + 1, np.int64)
    val = np.empty(d_max + 1)
    w = np.empty(max(d_max + 1, 16))  # _best pads up to 16 entries for its sorting network
    keep = np.empty(top_k + 1, np.int64)  # one spare slot: _best's branch-free appends write one past k
    lanes_few = max(top_k, LANES_MIN)  # rows too short for the tight bound's lanes
    lanes_many = max(LANES_TIGHT, (3 * top_k // 2 + 7) // 8 * 8)  # ~1.5·top_k lanes, whole vectors
    if lanes_many > LANES_MAX:  # its k-th largest costs lanes² per row: beyond this, the smallest of top_k
        lanes_many = lanes_few
    lane_hi = np.empty(lanes_many)
    lane_lo = np.empty(lanes_many)
    n_out = 0
    for g in range(n_groups):
        h0, d = hist_ptr[g], hist_ptr[g + 1] - hist_ptr[g]
        if d == 0 or tgt_ptr[g + 1] == tgt_ptr[g]:
            continue
        for i in range(d):
            a_g[i] = alpha[hist[h0 + i]]
        gather_scaled_rows(F_hist, hist_row, h0, d, a_g, H)  # the product gives the importances
        k = min(top_k, d)
        lanes = lanes_many if d >= 2 * lanes_many else lanes_few  # the group's, for each of its targets
        step = _batch_targets(d)
        for q0 in range(tgt_ptr[g], tgt_ptr[g + 1], step):
            nq = min(step, tgt_ptr[g + 1] - q0)
            gather_rows(F_tgt, tgt_row, q0, nq, T)
            I = I_buf[: nq * d].reshape((nq, d))  # (nq, d) importances, into a reused buffer
            np.dot(T[:nq], H[:d].T, I)
            for j in range(nq):
                I_t = I[j]
                tau_hi, tau_lo = _importance_bounds(I_t, d, lanes, k, lane_hi, lane_lo)
                m_hi, m_lo = _append_candidates(I_t, d, tau_hi, tau_lo, c_hi, c_lo)
                for sign in (1.0, -1.0):
                    cand, m = (c_hi, m_hi) if sign > 0 else (c_lo, m_lo)
                    n = 0
                    for a in range(m):  # only positives (negatives) qualify; zeros never (numpy: nor |v| < 1.4e-45)
                        v = I_t[cand[a]]
                        cand[n], val[n] = cand[a], v
                        n += sign * v > 0.0
                    for b in range(_best(cand, val, n, k, sign, keep, w)):
                        i = keep[b]
                        out_target[n_out] = tgt[q0 + j]
                        out_train[n_out] = hist[h0 + i]
                        out_alpha[n_out] = a_g[i]
                        out_local[n_out] = I_t[i] / a_g[i]  # a selected pair has α ≠ 0 (its importance is)
                        n_out += 1
    return n_out
