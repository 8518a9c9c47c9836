"""Targets to explain: (user, item) index pairs with their recommendation rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..interactions import Interactions
from ..kernels.representer import BLOCK_ELEMENTS, top_n_unseen


@dataclass
class Targets:
    """Pairs to explain, sorted by user; ``rec_rank`` is 1-based (0 when supplied without a rank)."""

    user: np.ndarray
    item: np.ndarray
    rec_rank: np.ndarray

    def __len__(self) -> int:
        return len(self.user)

    @classmethod
    def from_pairs(cls, user, item, rec_rank=None) -> "Targets":
        user, item = np.asarray(user, np.int32), np.asarray(item, np.int32)
        rank = np.zeros(len(user), np.int32) if rec_rank is None else np.asarray(rec_rank, np.int32)
        order = np.lexsort((rank, item, user)) if rec_rank is None else np.lexsort((rank, user))
        return cls(user[order], item[order], rank[order])

    def take(self, mask_or_index) -> "Targets":
        return Targets(self.user[mask_or_index], self.item[mask_or_index], self.rec_rank[mask_or_index])

    def for_users(self, users: np.ndarray) -> "Targets":
        return self.take(np.isin(self.user, users))


def recommend(U: np.ndarray, V: np.ndarray, data: Interactions, users: np.ndarray, n: int,
              budget: int = BLOCK_ELEMENTS) -> Targets:
    """Every given user's top-n unseen items by score, in user blocks sized so block × n_items ≤ budget."""
    users = np.asarray(users, dtype=np.int64)
    block = max(1, budget // max(1, data.n_items))
    out_u, out_i, out_r = [], [], []
    for a in range(0, len(users), block):
        b = users[a:a + block]
        starts, stops = data.user_indptr[b], data.user_indptr[b + 1]
        seen_ptr = np.concatenate([[0], np.cumsum(stops - starts)])
        seen = data.item[np.concatenate([np.arange(s, e) for s, e in zip(starts, stops)])] if len(b) else []
        idx, _ = top_n_unseen(U[b], V, seen_ptr, np.asarray(seen, np.intp), n)
        rank = np.broadcast_to(np.arange(1, n + 1), idx.shape)
        ok = idx >= 0
        out_u.append(np.broadcast_to(b[:, None], idx.shape)[ok])
        out_i.append(idx[ok])
        out_r.append(rank[ok])
    if not out_u:
        return Targets.from_pairs([], [], [])
    return Targets.from_pairs(np.concatenate(out_u), np.concatenate(out_i), np.concatenate(out_r))
