"""One by-user part's candidates during exact greedy SBQ over the parts (``explain.prototypes_parts``, which
says why only the live rows are scored and how the item whiteners arrive).
"""

from __future__ import annotations

import copy

import numpy as np

from ..interactions import Targets
from ..kernels import fisher
from ..kernels.pair_halves import HalvesMean, PairHalves, touched_column
from ..kernels.sbq import Candidate, ShardState
from ..models.factor_rows import source_rows
from .prototypes import residual_terms

USER_CHUNK = 4096  # users whose k×k whiteners are built at once: 4096·k² floats (32 MB at k = 32)
PASS_ROWS = 1 << 16  # rows scored at once in a pass over a part: their rows of U and V, 32 MB at k = 32


def _coded(values: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(distinct values, a byte per row) when there are at most 256 distinct values, else (None, values)."""
    distinct, codes = np.unique(values, return_inverse=True)
    return (distinct, codes.astype(np.uint8)) if len(distinct) <= 256 else (None, values)


def _bounds(sorted_keys: np.ndarray, keys) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) of each key in ``sorted_keys``. The keys are cast to its dtype: numpy would otherwise cast
    the whole sorted array (a copy of the part's column per lookup)."""
    keys = np.asarray(keys).astype(sorted_keys.dtype, copy=False)
    return np.searchsorted(sorted_keys, keys), np.searchsorted(sorted_keys, keys, side="right")


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """lo[0]..hi[0]−1, lo[1]..hi[1]−1, … concatenated."""
    n = hi - lo
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    return (starts + np.arange(int(n.sum()))).astype(np.int64)


class PartShard(ShardState):
    """The candidates of by-user part p during greedy SBQ.

    Held for the whole selection, per row, only what identifies it: its item, its rating's code (one byte
    when the ratings take at most 256 values, as labels and stars do; else the rating, 8) and the item
    order (the row at each place, and its item): 13 bytes a row. The rows are sorted by user, so a user's
    are a range (``indptr``). A row's residual and Fisher weight are recomputed from ⟨U_u, V_j⟩ whenever a
    step needs them rather than held (8 bytes each, and twice that while they are made).
    Beyond that: the *live* rows' scalars z, k_xx, r, v (rows sharing a user or an item with a target or
    a selected point: no other row can be chosen), c_x of the touched rows, and the item whiteners W_j it
    has been sent. The factors are not held: the rows of U and V a step needs are read where they are
    kept (``models.factor_rows.source_rows``)."""

    def __init__(self, parts, p: int, head, U, V, kind: str, offset: int):
        d = parts.read_part("user", p).data
        self.lo, self.U, self.V, self.kind, self.offset, self.head = int(parts.user_cuts[p]), U, V, kind, offset, head
        # The part's rows are sorted by user: a user's rows are indptr[u − lo]:indptr[u − lo + 1] (a number a
        # user, not a row), and a row's user is found by search.
        self.indptr = np.searchsorted(d.user, np.arange(self.lo, int(parts.user_cuts[p + 1]) + 1, dtype=d.user.dtype))
        self.item = d.item  # int32
        # Rows in item order, and their items: an int32 ``sorter`` for np.searchsorted would be copied to
        # int64 on every search, so the sorted items are kept.
        self.by_item = np.argsort(self.item, kind="stable").astype(np.int32)
        self.item_sorted = self.item[self.by_item]
        self.values, self.codes = _coded(d.rating)
        self.n, self.sigma2 = None, None  # the whole table's n and σ̂², once known (``weighted``)

    # --- a row's terms, recomputed from the factors ---

    def _rating(self, rows: np.ndarray) -> np.ndarray:
        return self.codes[rows] if self.values is None else self.values[self.codes[rows]]

    def _residuals(self, rows: np.ndarray, Uu: np.ndarray | None = None, Vj: np.ndarray | None = None):
        """(r, curvature) of these local rows; ``Uu``, ``Vj``: their rows of U and V, if already read."""
        Uu = source_rows(self.U, self.users_of(rows)) if Uu is None else Uu
        Vj = source_rows(self.V, self.item[rows]) if Vj is None else Vj
        return residual_terms(self.head, self._rating(rows), np.einsum("ij,ij->i", Uu, Vj))

    def _weights(self, rows: np.ndarray, Uu: np.ndarray | None = None, Vj: np.ndarray | None = None):
        return fisher.fisher_weights(self.kind, *self._residuals(rows, Uu, Vj), self.n, self.sigma2)

    def _passes(self):
        """The part's rows in item order, PASS_ROWS at a time, with their rows of U and V: a chunk's items
        are a narrow range, so it reads a block or two of V (and this part's block of U)."""
        for a in range(0, len(self.by_item), PASS_ROWS):
            rows = self.by_item[a : a + PASS_ROWS]
            yield rows, source_rows(self.U, self.users_of(rows)), source_rows(self.V, self.item[rows])

    def sums(self) -> tuple[int, float]:
        rss = 0.0
        for rows, Uu, Vj in self._passes():
            r = self._residuals(rows, Uu, Vj)[0]
            rss += float(r @ r)
        return len(self), rss

    def weighted(self, n: int, sigma2: float) -> PartShard:
        new = copy.copy(self)
        new.n, new.sigma2 = n, sigma2
        return new

    def traces(self) -> tuple[float, float]:
        """Σ over this part's rows of w‖V_j‖² and w‖U_u‖²: its share of Σ tr F_u and Σ tr F_j."""
        tu = tv = 0.0
        for rows, Uu, Vj in self._passes():
            w = self._weights(rows, Uu, Vj)
            tu += float(w @ np.einsum("ij,ij->i", Vj, Vj))
            tv += float(w @ np.einsum("ij,ij->i", Uu, Uu))
        return tu, tv

    # --- rows of some users or items ---

    def __len__(self) -> int:
        return len(self.item)

    def users_of(self, rows: np.ndarray) -> np.ndarray:
        """The user of each local row."""
        return self.lo + np.searchsorted(self.indptr, rows, side="right") - 1

    def _user_bounds(self, users) -> tuple[np.ndarray, np.ndarray]:
        """[lo, hi) of each user's rows here (empty for a user of another part)."""
        at = np.asarray(users, np.int64) - self.lo
        ok = (at >= 0) & (at < len(self.indptr) - 1)
        at = np.where(ok, at, 0)  # an index into indptr, also where ok is False (np.where reads both sides)
        lo = np.where(ok, self.indptr[at], 0)
        return lo, np.where(ok, self.indptr[at + 1], 0)

    def user_rows(self, users: np.ndarray) -> np.ndarray:
        """The local rows of ``users`` (ascending users give ascending rows)."""
        return _ranges(*self._user_bounds(users))

    def item_rows(self, items: np.ndarray) -> np.ndarray:
        """The local rows of ``items``, item by item (each item's ascending)."""
        return self.by_item[_ranges(*_bounds(self.item_sorted, items))]

    def items_of(self, users: np.ndarray) -> np.ndarray:
        return np.unique(self.item[self.user_rows(users)])

    def item_grams(self, items: np.ndarray, V_items: np.ndarray) -> np.ndarray:
        """This part's share of F_j for ``items`` (sorted; their rows of V, ``V_items``, come with them rather
        than each part map every block of V they fall in): Σ over their raters here of w U_u U_uᵀ."""
        rows = self.item_rows(items)
        owner = np.searchsorted(items, self.item[rows])
        Uu = source_rows(self.U, self.users_of(rows))
        return fisher.owner_grams(owner, Uu, self._weights(rows, Uu, V_items[owner]), len(items))

    def target_user_halves(self, T: Targets, delta_U: float) -> tuple[np.ndarray, np.ndarray]:
        """(positions in T, a_t = W_u V_j) of the targets whose user has rows in this part."""
        lo, hi = self._user_bounds(T.user)
        at = np.flatnonzero(hi > lo)
        return at, self._user_side(T.user[at].astype(np.int64), source_rows(self.V, T.item[at]), delta_U)

    def start(self, mu: HalvesMean, whiteners: fisher.ItemWhiteners, delta_U: float, m: int) -> PartShard:
        """The state before any selection: live rows are those of a target's user or item."""
        new = copy.copy(self)
        new.mu, new.W_items, new.delta_U = mu, (whiteners,), delta_U
        new.m, new.t, new.Ct, new.touched = m, 0, np.empty((m, 0)), np.empty(0, np.int64)
        new.live = np.empty(0, np.int64)  # sorted local rows; z, k_xx, r, v, open are over these
        new.z, new.kdiag, new.r, new.v = (np.empty(0) for _ in range(4))
        new.open = np.empty(0, bool)
        rows = np.union1d(self.user_rows(mu.users), self.item_rows(mu.items))
        for a in range(0, len(rows), PASS_ROWS):  # the halves of a popular item's raters, a chunk at a time
            new.admit(rows[a : a + PASS_ROWS], *new.halves(rows[a : a + PASS_ROWS]))
        return new

    def n_live(self) -> int:
        return len(self.live)

    def with_items(self, whiteners: fisher.ItemWhiteners) -> PartShard:
        new = copy.copy(self)
        new.W_items = (*self.W_items, whiteners)
        return new

    def admit(self, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """Make ``rows`` (ascending) live, with halves ``a``, ``b``: z and k_xx, and r = z, v = k_xx, as no
        selected point shares their user or item yet (c_x = 0). New arrays: earlier states keep theirs."""
        fresh = ~np.isin(rows, self.live, assume_unique=True)
        if not fresh.any():
            return
        rows, a, b = rows[fresh], a[fresh], b[fresh]
        X = PairHalves(self.users_of(rows), self.item[rows].astype(np.int64), a, b)
        kdiag, z = X.squared_norms(), self.mu.inner_rows(X)
        order = np.argsort(np.concatenate([self.live, rows]), kind="stable")
        merged = lambda old, add: np.concatenate([old, add])[order]  # noqa: E731
        self.live = merged(self.live, rows)
        self.z, self.kdiag, self.r, self.v = (
            merged(self.z, z),
            merged(self.kdiag, kdiag),
            merged(self.r, z),
            merged(self.v, kdiag),
        )
        self.open = merged(self.open, kdiag > 0)

    def halves(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of these local rows: a = W_u r V_j, b = W_j r U_u."""
        users = self.users_of(rows)
        Uu, Vj = source_rows(self.U, users), source_rows(self.V, self.item[rows])
        r = self._residuals(rows, Uu, Vj)[0][:, None]
        a = self._user_side(users, r * Vj, self.delta_U)
        gV = r * Uu
        if self.kind == "identity" or not len(rows):
            return a, gV
        items, owner = np.unique(self.item[rows], return_inverse=True)
        return a, fisher.apply_per_owner(fisher.whiteners_of(self.W_items, items), owner, gV)

    def _user_side(self, users: np.ndarray, g: np.ndarray, delta_U: float) -> np.ndarray:
        """W_u g for rows of ``users`` (all in this part): each user's whitener from the user's own rows,
        USER_CHUNK users at a time (their k×k matrices are the largest temporaries here)."""
        if self.kind == "identity" or not len(users):
            return g
        distinct, owner = np.unique(users, return_inverse=True)
        out = np.empty_like(g)
        for c in range(0, len(distinct), USER_CHUNK):
            chunk = distinct[c : c + USER_CHUNK]
            lo, hi = self._user_bounds(chunk)
            rows, owner_of = _ranges(lo, hi), np.repeat(np.arange(len(chunk)), hi - lo)
            Vj = source_rows(self.V, self.item[rows])
            Fu = fisher.owner_grams(owner_of, Vj, self._weights(rows, Vj=Vj), len(chunk))
            at = np.flatnonzero((owner >= c) & (owner < c + len(chunk)))
            out[at] = fisher.apply_per_owner(fisher.damped_inverse_factor(Fu, delta_U), owner[at] - c, g[at])
        return out

    def user_items(self, user: int) -> np.ndarray:
        return self.item[self.user_rows(np.array([user]))]

    def neighbours(self, user: int, item: int) -> np.ndarray:
        """The local rows of this user or this item, ascending."""
        return np.union1d(self.user_rows(np.array([user])), self.item_rows(np.array([item])))

    # ``ShardState.best`` over the live rows: position x of z, k_xx, r, v is local row live[x] (ascending,
    # so ties still go to the lowest row).
    def _row_of(self, x: int) -> int:
        return int(self.live[x])

    def _row(self, x: int) -> PairHalves:
        row = self._row_of(x)
        a, b = self.halves(np.array([row]))
        return PairHalves(self.users_of(np.array([row])), self.item[[row]].astype(np.int64), a, b)

    def _c(self, x: int) -> np.ndarray:
        row = self._row_of(x)
        pos = np.searchsorted(self.touched, row)
        if pos < len(self.touched) and self.touched[pos] == row:
            return self.Ct[: self.t, pos].copy()
        return np.zeros(self.t)

    def add(self, s: Candidate, d: float, beta_t: float) -> PartShard:
        """The state after appending s to S (``kernels.pair_halves.HalvesShardState.add``, over live rows): the rows of
        s's user and item turn live, their kernel column is appended to c_x, and r, v are updated."""
        new = copy.copy(self)
        rows = self.neighbours(int(s.phi.user[0]), int(s.phi.item[0]))
        a, b = self.halves(rows)
        new.admit(rows, a, b)
        touched, Ct, col = touched_column(
            self.touched, self.Ct, self.t, self.m, rows, self.users_of(rows), self.item[rows], a, b, s, d
        )
        new.t, new.touched, new.Ct = self.t + 1, touched, Ct
        at = np.searchsorted(new.live, touched)  # every touched row is live
        new.r, new.v = new.r.copy(), new.v.copy()
        new.r[at] -= col * beta_t
        new.v[at] -= col**2
        x = s.index - self.offset
        if 0 <= x < len(self):
            new.open = new.open.copy()
            new.open[np.searchsorted(new.live, x)] = False
        return new
