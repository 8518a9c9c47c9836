"""Top-n unseen items per user by ⟨U_u, V_j⟩: dxplain's own recommendations (the refresh's own targets).

Two exact routes with one contract — the n largest float32 scores among the user's unseen items, best
first, ties by item index, -1 and -inf where fewer than n are unseen:

- ``top_n_unseen``: the reference. One float32 GEMM of a batch of users against every item, then a
  selection over every score: users × items × k flops and several passes over users × items.
- ``top_n_unseen_pruned``: items scanned in slices, each user keeping its running top-n and its n-th
  best τ_u. Two bounds skip work that cannot change the result:
  - per item, ⟨u, v⟩ ≤ ⟨u_P, v_P⟩ + ‖u_R‖‖v_R‖ (Cauchy–Schwarz on the trailing coordinates R of a
    principal basis): one GEMM of (w + 1)-vectors instead of k-vectors bounds every score, and only the
    items whose bound reaches τ_u are scored exactly. A trained MF model puts most of its scores in a
    few leading directions, so few items pass (docs/scaling.md);
  - per slice, the items are in order of decreasing ‖v‖, so no unscanned item scores above
    ‖u‖·‖v_next‖, and a user whose τ_u beats that leaves the scan — the heavy-item search's stopping rule
    (``representer._norm_ordered_top_k``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _float32_margin(k: int) -> float:
    """Relative margin for float32 scores of length-k factors against a bound in exact arithmetic.

    A float32 dot product of length k is within about k·2⁻²⁴·Σ|u_i v_i| ≤ k·2⁻²⁴·‖u‖‖v‖ of the exact
    one (Higham, Thm 3.5), and rounding the factors to float32 adds 2·2⁻²⁴·‖u‖‖v‖; twice the sum, to be safe.
    """
    return (2.0 * k + 4.0) * 2.0**-24


# Items in the scan's first slice; slices double from here while users remain (within the budget).
FIRST_ITEM_SLICE = 1024

# Below this many items the dense path is as fast or faster: the scan's first, exact slice is then a large
# share of the items.
SCAN_MIN_ITEMS = 4 * FIRST_ITEM_SLICE

# Leading principal directions w kept whole in the per-item bound (the rest enter by their norm): a
# share of k, at least 8 (the 1M scaling model, k = 64, holds its scores in 8 directions; docs/scaling.md).
PARTIAL_SHARE = 4


@dataclass
class NormOrder:
    """The items sorted by decreasing ‖V_j‖ (ties by index), in float32 for the scan, and the bound's
    factors: built once per call of ``targets.recommend`` and shared by all its batches of users."""

    V: np.ndarray  # (n_items, k) float32, rows in norm order
    norms: np.ndarray  # (n_items,) float64, decreasing
    item: np.ndarray  # (n_items,) item index of each sorted row
    rank: np.ndarray  # (n_items,) sorted position of each item
    Q: np.ndarray  # (k, k) principal directions of VᵀV, leading first
    w: int  # directions kept whole in the bound
    V_bound: np.ndarray  # (n_items, w + 1) float32, rows in norm order: [v Q_P, ‖v Q_R‖]

    @classmethod
    def of(cls, V: np.ndarray) -> NormOrder:
        norms = np.sqrt(np.einsum("ij,ij->i", V, V, dtype=np.float64))
        item = np.argsort(-norms, kind="stable")
        rank = np.empty_like(item)
        rank[item] = np.arange(len(item))
        k = V.shape[1]
        Q = np.linalg.eigh(V.T @ V)[1][:, ::-1]  # eigenvalues ascending: leading directions first
        w = min(k, max(8, k // PARTIAL_SHARE))
        return cls(
            np.ascontiguousarray(V[item], dtype=np.float32),
            norms[item],
            item,
            rank,
            Q,
            w,
            _bound_factors(V[item], Q, w),
        )

    def user_bound(self, U: np.ndarray) -> np.ndarray:
        """[u Q_P, ‖u Q_R‖] per user, so that ⟨user_bound, V_bound⟩ = ⟨u_P, v_P⟩ + ‖u_R‖‖v_R‖ ≥ ⟨u, v⟩."""
        return _bound_factors(U, self.Q, self.w)


def _bound_factors(F: np.ndarray, Q: np.ndarray, w: int) -> np.ndarray:
    """Rows [f Q_P, ‖f Q_R‖] in float32: the leading w coordinates in the basis Q, then the norm of the rest."""
    R = F @ Q
    return np.ascontiguousarray(
        np.hstack([R[:, :w], np.linalg.norm(R[:, w:], axis=1, keepdims=True)]), dtype=np.float32
    )


def _top_n_rows(S: np.ndarray, ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of S (a, m), the n largest finite entries, best first, ties by smaller id: (ids, scores),
    padded with -1 and -inf. ``ids`` is (m,) or (a, m).

    argpartition finds the n largest in one pass; it breaks ties at the n-th value arbitrarily, so
    the (rare) rows where the n-th value is tied beyond the selection are re-selected by a full sort.
    """
    a, m = S.shape
    ids = np.broadcast_to(ids, S.shape)
    if m > n:
        part = np.argpartition(S, m - n, axis=1)[:, m - n :]
        vals = np.take_along_axis(S, part, axis=1)
        tau = vals.min(axis=1, keepdims=True)
        tied = np.isfinite(tau[:, 0]) & ((S == tau).sum(axis=1) > (vals == tau).sum(axis=1))
        if tied.any():
            full = np.lexsort((ids[tied], -S[tied]), axis=1)[:, :n]
            part[tied], vals[tied] = full, np.take_along_axis(S[tied], full, axis=1)
        sel = np.take_along_axis(ids, part, axis=1)
    else:
        vals, sel = S, ids
    order = np.lexsort((sel, -vals), axis=1)
    vals, sel = np.take_along_axis(vals, order, axis=1), np.take_along_axis(sel, order, axis=1)
    sel = np.where(np.isfinite(vals), sel, -1)
    vals = np.where(sel >= 0, vals, -np.inf)
    if m < n:
        sel = np.pad(sel, ((0, 0), (0, n - m)), constant_values=-1)
        vals = np.pad(vals, ((0, 0), (0, n - m)), constant_values=-np.inf)
    return sel, vals


def top_n_unseen(
    U_batch: np.ndarray, V: np.ndarray, seen_indptr: np.ndarray, seen_items: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-n items by ⟨U_i, V_j⟩ among items the batch's users have not rated, best first (the reference).

    Parameters
    ----------
    U_batch : (b, k) array
        The batch's user factors.
    V : (n_items, k) array
        Every item's factors.
    seen_indptr, seen_items : arrays
        The CSR of the batch's rated items.
    n : int
        Items per user.

    Returns
    -------
    items, scores : (b, n) arrays
        Best first, ties by item index; where fewer than n items are unseen the tail holds -1 and -inf.
        Ranking is done in float32 (half the memory traffic of the scores; explanations recompute
        scores in float64).
    """
    S = np.asarray(U_batch, np.float32) @ np.asarray(V, np.float32).T  # (batch, n_items), sized by the caller
    rows = np.repeat(np.arange(len(U_batch)), np.diff(seen_indptr))
    S[rows, seen_items] = -np.inf
    idx, sc = _top_n_rows(S, np.arange(S.shape[1]), n)
    return idx, sc.astype(np.float64)


def top_n_merged(ids: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n best of candidates gathered from several item row blocks' top-n lists (one user): the same order
    as ranking every item at once (best first, ties by item index, -1 and -inf padding dropped)."""
    sel, vals = _top_n_rows(np.asarray(scores, np.float64)[None], np.asarray(ids)[None], n)
    ok = sel[0] >= 0
    return sel[0][ok], vals[0][ok]


def top_n_unseen_pruned(
    U_batch: np.ndarray,
    order: NormOrder,
    seen_indptr: np.ndarray,
    seen_items: np.ndarray,
    n: int,
    budget: int,
    stats: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``top_n_unseen`` by a scan of the items that scores exactly only what may enter a user's top-n.

    Items are scanned in slices of decreasing ‖V_j‖ (``order``), from ``FIRST_ITEM_SLICE`` doubling, within
    ``budget`` scores per GEMM. Users whose top-n is not yet full score the slice exactly. The others
    bound it first (``NormOrder.user_bound``, one float32 GEMM of w + 1 columns), and only items whose
    bound reaches the user's n-th best τ_u (less a float32 margin) are scored, one dot product each. A user
    with τ_u above ‖U_u‖·‖V_next‖ (Cauchy–Schwarz, with the margin) is finished. Seen items are masked.

    ``stats``, if given, gets the counts of user × item scores computed exactly in slices
    (``"block_scores"``), bounded (``"bounds"``) and computed exactly as a bound's candidates
    (``"candidates"``), added to what it holds.

    Returns
    -------
    items, scores : (b, n) arrays
        As ``top_n_unseen``: the same items and float32 scores (to rounding: slice shapes differ),
        best first, ties by item index.
    """
    counts = {"block_scores": 0, "bounds": 0, "candidates": 0}
    b, k = U_batch.shape
    n_items = len(order.item)
    U32 = np.asarray(U_batch, np.float32)
    Ub = order.user_bound(U_batch)
    unorm = np.sqrt(np.einsum("ij,ij->i", U_batch, U_batch, dtype=np.float64))
    slack = (_float32_margin(k) + _float32_margin(order.w + 1)) * unorm  # × ‖v‖: the bound's rounding
    # Seen items by sorted position, so each slice's seen items are contiguous.
    pos = order.rank[seen_items]
    by_pos = np.argsort(pos, kind="stable")
    seen_pos = pos[by_pos]
    seen_user = np.repeat(np.arange(b), np.diff(seen_indptr))[by_pos]
    best_i = np.full((b, n), -1, np.int64)
    best_s = np.full((b, n), -np.inf, np.float32)
    active = np.arange(b)
    slot = np.full(b, -1, np.int64)  # row of each user in the slice's scores
    start, r = 0, FIRST_ITEM_SLICE
    while start < n_items and len(active):
        stop = min(n_items, start + max(1, min(r, budget // len(active))))
        ids = order.item[start:stop]
        lo, hi = np.searchsorted(seen_pos, [start, stop])
        filling = best_s[active, -1] == -np.inf
        for users, exact in ((active[filling], True), (active[~filling], False)):
            if not len(users):
                continue
            S = (U32[users] if exact else Ub[users]) @ (order.V if exact else order.V_bound)[start:stop].T
            slot[users] = np.arange(len(users))
            row = slot[seen_user[lo:hi]]
            hit = row >= 0
            S[row[hit], seen_pos[lo:hi][hit] - start] = -np.inf
            slot[users] = -1
            counts["block_scores" if exact else "bounds"] += S.size
            if exact:
                best_i[users], best_s[users] = _merge(best_i[users], best_s[users], S, ids, n)
                continue
            tau = best_s[users, -1]
            flat = np.flatnonzero(S >= (tau - slack[users] * order.norms[start])[:, None])
            cand_row, cand_col = np.divmod(flat, S.shape[1])
            s = np.einsum("ij,ij->i", U32[users[cand_row]], order.V[start + cand_col])
            counts["candidates"] += len(s)
            entering = s >= tau[cand_row]
            best_i[users], best_s[users] = _merge_candidates(
                best_i[users], best_s[users], cand_row[entering], s[entering], ids[cand_col[entering]], n
            )
        start = stop
        if start < n_items:
            done = best_s[active, -1] > (unorm[active] + slack[active]) * order.norms[start]
            active = active[~done]
        r *= 2
    if stats is not None:
        for key, v in counts.items():
            stats[key] = stats.get(key, 0) + v
    return best_i, best_s.astype(np.float64)


def _merge(
    best_i: np.ndarray, best_s: np.ndarray, S: np.ndarray, ids: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The running top-n (a, n) merged with a slice's scores S (a, r) of items ``ids``.

    Only entries at least a lower bound on the merged n-th best can enter: the running n-th best, or for
    rows not yet full the slice's own n-th largest (``np.partition`` of values, much faster than an
    index-returning argpartition). One compare and flat-nonzero pass finds those few candidates.
    """
    a, r = S.shape
    tau = np.maximum(best_s[:, -1], np.finfo(np.float32).min)  # finite: masked (-inf) entries never enter
    fill = np.flatnonzero(best_s[:, -1] == -np.inf)
    if len(fill) and r > n:
        tau[fill] = np.maximum(tau[fill], np.partition(S[fill], r - n, axis=1)[:, r - n])
    flat = np.flatnonzero(S >= tau[:, None])
    row, col = np.divmod(flat, r)
    return _merge_candidates(best_i, best_s, row, S.reshape(-1)[flat], ids[col], n)


def _merge_candidates(
    best_i: np.ndarray, best_s: np.ndarray, row: np.ndarray, score: np.ndarray, item: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The running top-n (a, n) with candidates (row, score, item) added: per row the n best by score,
    then by item index; the placeholders (-inf, -1) sort last."""
    rows = np.unique(row)
    cand_row = np.concatenate([np.repeat(np.arange(len(rows)), n), np.searchsorted(rows, row)])
    cand_s = np.concatenate([best_s[rows].reshape(-1), score])
    cand_i = np.concatenate([best_i[rows].reshape(-1), item])
    o = np.lexsort((cand_i, -cand_s, cand_row))
    keep = o[(np.arange(len(o)) - np.searchsorted(cand_row[o], cand_row[o])) < n]
    best_i, best_s = best_i.copy(), best_s.copy()
    best_i[rows], best_s[rows] = cand_i[keep].reshape(-1, n), cand_s[keep].reshape(-1, n)
    return best_i, best_s


def recall_ndcg_at(
    U: np.ndarray,
    V: np.ndarray,
    seen_indptr: np.ndarray,
    seen_items: np.ndarray,
    held_indptr: np.ndarray,
    held_items: np.ndarray,
    n: int,
    batch: int = 256,
) -> tuple[float, float]:
    """Mean recall@n and NDCG@n over the users with held-out items (LightGCN's protocol: each user's seen items
    are never ranked). recall = hits / |held|; NDCG = Σ_hits 1/log₂(rank + 1) over the ideal Σ_{r ≤ min(n, |held|)}.

    ``seen_*`` and ``held_*``: CSRs over every user (rows of U) of the items seen in training and held out."""
    discount = 1.0 / np.log2(np.arange(2, n + 2))
    ideal = np.cumsum(discount)
    recall, ndcg, users = 0.0, 0.0, 0
    for a in range(0, len(U), batch):
        b = min(a + batch, len(U))
        ptr = seen_indptr[a : b + 1]
        top, _ = top_n_unseen(U[a:b], V, ptr - ptr[0], seen_items[ptr[0] : ptr[-1]], n)
        for r in range(b - a):
            held = held_items[held_indptr[a + r] : held_indptr[a + r + 1]]
            if not len(held):
                continue
            hit = np.isin(top[r], held)
            recall += hit.sum() / len(held)
            ndcg += (discount * hit).sum() / ideal[min(n, len(held)) - 1]
            users += 1
    return (recall / users, ndcg / users) if users else (0.0, 0.0)
