"""Targets dxplain recommends itself: every user's top-N unseen items, in memory-bounded batches of users."""

from __future__ import annotations

import numpy as np

from ..interactions import Interactions, Targets
from ..kernels.representer import ELEMENT_BUDGET
from ..kernels.topn import FIRST_ITEM_SLICE, SCAN_MIN_ITEMS, NormOrder, top_n_merged, top_n_unseen, top_n_unseen_pruned


def recommend(
    U: np.ndarray,
    V: np.ndarray,
    data: Interactions,
    users: np.ndarray,
    n: int,
    budget: int = ELEMENT_BUDGET,
    dense: bool | None = None,
) -> Targets:
    """Every given user's top-n unseen items by score ⟨U_u, V_j⟩, best first, ties by item index.

    Parameters
    ----------
    U, V : arrays
        User and item factors.
    data : Interactions
        The rated (seen) items, which are never recommended.
    users : array of int
        The users to recommend to.
    n : int
        Items per user (fewer where fewer are unseen).
    budget : int
        Scores held at once (one float32 product).
    dense : bool, optional
        Score every batch of users against every item (``kernels.topn.top_n_unseen``, the reference) instead
        of the bounded scan that scores exactly only items that may enter a user's top-n
        (``top_n_unseen_pruned``, the same items; docs/scaling.md measures both). By default the scan,
        unless there are at most ``SCAN_MIN_ITEMS`` items (where it is no faster).
    """
    users = np.asarray(users, dtype=np.int64)
    dense = data.n_items <= SCAN_MIN_ITEMS if dense is None else dense
    # A batch of users meets the scan's first FIRST_ITEM_SLICE items within the budget, or every item (dense).
    batch = max(1, budget // max(1, data.n_items if dense else FIRST_ITEM_SLICE))
    order = None if dense else NormOrder.of(V)
    out_u, out_i, out_r = [], [], []
    for a in range(0, len(users), batch):
        b = users[a : a + batch]
        seen, seen_ptr = data.user_positions(b)
        seen_items = data.item[seen].astype(np.intp)
        idx, _ = (
            top_n_unseen(U[b], V, seen_ptr, seen_items, n)
            if dense
            else top_n_unseen_pruned(U[b], order, seen_ptr, seen_items, n, budget)
        )
        rank = np.broadcast_to(np.arange(1, n + 1), idx.shape)
        ok = idx >= 0
        out_u.append(np.broadcast_to(b[:, None], idx.shape)[ok])
        out_i.append(idx[ok])
        out_r.append(rank[ok])
    if not out_u:
        return Targets.from_pairs([], [], [])
    return Targets.from_pairs(np.concatenate(out_u), np.concatenate(out_i), np.concatenate(out_r))


def recommend_from_blocks(U, V, data: Interactions, user: int, n: int) -> Targets:
    """One user's top-n unseen items, as ``recommend``, with the factors in row-block files
    (``models.blocks.Blocks``): the user's row is read here, each block of V scored by its own task,
    and the blocks' top-n lists merged here. ``data``: the user's rated items. Each block's float32
    product may round a score differently from one whole product, so two items tied to the last
    float32 unit can come in the other order."""
    from ..models.blocks import PerBlock

    u = U.take([user])
    seen = np.sort(data.item[data.user == user].astype(np.int64))
    cuts = V.cuts
    at = np.searchsorted(seen, cuts)
    per_block = PerBlock((int(a), seen[at[p] : at[p + 1]] - a) for p, a in enumerate(cuts[:-1]))
    found = V.apply(_block_top_n, u, per_block, n, name="top-n")
    idx, _ = top_n_merged(np.concatenate([i for i, _ in found]), np.concatenate([s for _, s in found]), n)
    return Targets.from_pairs(np.full(len(idx), user), idx, np.arange(1, len(idx) + 1))


def _block_top_n(V_block: np.ndarray, u: np.ndarray, first_and_seen: tuple, n: int):
    first, seen = first_and_seen
    idx, sc = top_n_unseen(u, V_block, np.array([0, len(seen)]), seen.astype(np.intp), n)
    ok = idx[0] >= 0
    return idx[0][ok] + first, sc[0][ok]
