"""The in-memory interaction table: contiguous int32 indices, original ids, by-user and by-item views.

Interactions are kept sorted by (user, item), so the by-user view is just ``user_indptr`` over the
arrays themselves; the by-item view is a stable permutation ``item_order`` with ``item_indptr``.
Both views are built once, at construction, and shared by training, recommendation and explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import scipy.sparse as sp


@dataclass(frozen=True, eq=False)
class Interactions:
    """Explicit-feedback interactions (u, i, y) indexed 0..n_users-1 and 0..n_items-1.

    Attributes
    ----------
    user, item : int32 arrays, sorted by (user, item), no duplicate pairs
    rating : float64 array of the observed ratings y
    user_ids, item_ids : pyarrow arrays mapping index -> original id (string or integer)
    timestamp : optional int64 array
    """

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    user_ids: pa.Array
    item_ids: pa.Array
    timestamp: np.ndarray | None = None

    def __post_init__(self):
        # Kernels rely on the sort order; make it an invariant rather than a convention.
        key = self.user.astype(np.int64) * max(1, self.n_items) + self.item
        if len(key) > 1 and not np.all(key[1:] > key[:-1]):
            raise ValueError("Interactions must be sorted by (user, item) without duplicates; "
                             "build them with Interactions.from_indices")

    @classmethod
    def from_indices(cls, user, item, rating, user_ids, item_ids, timestamp=None) -> "Interactions":
        """Sort by (user, item) and build the views. Duplicates must have been rejected before."""
        user = np.asarray(user, dtype=np.int32)
        item = np.asarray(item, dtype=np.int32)
        order = np.lexsort((item, user))
        ts = None if timestamp is None else np.asarray(timestamp, dtype=np.int64)[order]
        return cls(user[order], item[order], np.asarray(rating, dtype=np.float64)[order],
                   user_ids, item_ids, ts)

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return len(self.user)

    @cached_property
    def user_indptr(self) -> np.ndarray:
        """Interactions of user u are positions user_indptr[u]:user_indptr[u+1]."""
        return np.searchsorted(self.user, np.arange(self.n_users + 1)).astype(np.int64)

    @cached_property
    def item_order(self) -> np.ndarray:
        """Positions of the interactions sorted by item (stable, so users stay sorted within an item)."""
        item = self.item
        if len(item) and int(item.max()) - int(item.min()) < 1 << 16:
            # Items of one by-item part span few ids: numpy's stable sort of 16-bit keys is a radix sort,
            # 17× faster than its int32 timsort on a 2M-row part (measured); the order is the same.
            return np.argsort((item - item.min()).astype(np.uint16), kind="stable").astype(np.int64)
        return np.argsort(item, kind="stable").astype(np.int64)

    @cached_property
    def item_indptr(self) -> np.ndarray:
        """Interactions of item j are positions item_order[item_indptr[j]:item_indptr[j+1]]."""
        return np.searchsorted(self.item[self.item_order], np.arange(self.n_items + 1)).astype(np.int64)

    def user_positions(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the given users' interactions, concatenated, and the pointer per user."""
        return segment_positions(self.user_indptr, users)

    def item_positions(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in data order) of the given items' interactions, concatenated, and the pointer per item."""
        pos, ptr = segment_positions(self.item_indptr, items)
        return self.item_order[pos], ptr

    def user_degree(self) -> np.ndarray:
        return np.diff(self.user_indptr)

    def item_degree(self) -> np.ndarray:
        return np.diff(self.item_indptr)

    def by_user(self, values: np.ndarray | None = None) -> sp.csr_array:
        """Sparse users x items view (CSR) holding ``values`` (default: ratings) — never densified."""
        data = self.rating if values is None else values
        return sp.csr_array((data, self.item, self.user_indptr), shape=(self.n_users, self.n_items))

    def by_item(self, values: np.ndarray | None = None) -> sp.csr_array:
        """Sparse items x users view (CSR over the by-item order) holding ``values`` given in data order."""
        data = (self.rating if values is None else values)[self.item_order]
        return sp.csr_array((data, self.user[self.item_order], self.item_indptr), shape=(self.n_items, self.n_users))

    def subset(self, mask: np.ndarray) -> "Interactions":
        """The interactions where ``mask`` holds, over the same id spaces (for splits and deletions)."""
        ts = None if self.timestamp is None else self.timestamp[mask]
        return Interactions(self.user[mask], self.item[mask], self.rating[mask],
                            self.user_ids, self.item_ids, ts)

    def fingerprint(self) -> str:
        """Content hash of (user, item, rating) and the id lists: ties a model to its data."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        # Hashes the whole table; a refresh asks for it several times (model path, store, run plan).
        import hashlib

        h = hashlib.sha256()
        for arr in (self.user, self.item, self.rating):
            h.update(np.ascontiguousarray(arr).tobytes())
        for ids in (self.user_ids, self.item_ids):
            h.update(str(ids.type).encode())
            # concat_arrays re-bases a sliced array at offset 0, so its buffers are its content.
            for buf in pa.concat_arrays([ids]).buffers():
                if buf is not None:
                    h.update(buf)
        return h.hexdigest()[:16]


def segment_positions(indptr: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ranges indptr[g]:indptr[g+1] for each g in ``ids``, and the pointer into them."""
    ids = np.asarray(ids, dtype=np.int64)
    starts, lengths = indptr[ids], indptr[ids + 1] - indptr[ids]
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    pos = np.arange(ptr[-1]) - np.repeat(ptr[:-1] - starts, lengths)
    return pos.astype(np.int64), ptr


@dataclass
class Targets:
    """(user, item) index pairs to explain, sorted by user; ``rec_rank`` is 1-based (0 when supplied without one)."""

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

    def for_user_range(self, lo: int, hi: int) -> "Targets":
        """The targets of users lo:hi: one slice, since targets are sorted by user."""
        a, b = np.searchsorted(self.user, [lo, hi])
        return self.take(slice(int(a), int(b)))

    def take(self, index: np.ndarray) -> "Targets":
        """The targets at ``index`` (positions or a mask), in that order."""
        return Targets(self.user[index], self.item[index], self.rec_rank[index])


def equal_cuts(indptr: np.ndarray, n_parts: int) -> np.ndarray:
    """Boundaries of contiguous row ranges holding about equal numbers of interactions (rows never split).

    ``indptr`` is a CSR pointer (by user or by item); returns ``edges`` with part p = rows edges[p]:edges[p+1].
    """
    n = len(indptr) - 1
    bounds = np.searchsorted(indptr, np.linspace(0, indptr[-1], max(1, n_parts) + 1)[1:-1])
    return np.unique(np.concatenate([[0], np.clip(bounds, 0, n), [n]])).astype(np.int64)
