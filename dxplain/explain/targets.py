"""Targets dxplain recommends itself: every user's top-N unseen items, in memory-bounded user blocks."""

from __future__ import annotations

import numpy as np

from ..interactions import Interactions, Targets
from ..kernels.representer import BLOCK_ELEMENTS, top_n_unseen


def recommend(U: np.ndarray, V: np.ndarray, data: Interactions, users: np.ndarray, n: int,
              budget: int = BLOCK_ELEMENTS) -> Targets:
    """Every given user's top-n unseen items by score, in user blocks sized so block × n_items ≤ budget."""
    users = np.asarray(users, dtype=np.int64)
    block = max(1, budget // max(1, data.n_items))
    out_u, out_i, out_r = [], [], []
    for a in range(0, len(users), block):
        b = users[a:a + block]
        seen, seen_ptr = data.user_positions(b)
        idx, _ = top_n_unseen(U[b], V, seen_ptr, data.item[seen].astype(np.intp), n)
        rank = np.broadcast_to(np.arange(1, n + 1), idx.shape)
        ok = idx >= 0
        out_u.append(np.broadcast_to(b[:, None], idx.shape)[ok])
        out_i.append(idx[ok])
        out_r.append(rank[ok])
    if not out_u:
        return Targets.from_pairs([], [], [])
    return Targets.from_pairs(np.concatenate(out_u), np.concatenate(out_i), np.concatenate(out_r))
