"""SBQ over the Fisher embeddings of a factor model's pairs, kept as a user half and an item half.

A factor model's Fisher F keeps only per-owner k×k matrices (one per user and per item,
``kernels.fisher``), so a pair's embedding φ_x is two halves: a_x in its user's k columns and b_x in its
item's (``PairHalves``), and two rows' kernel is [user equal]·⟨a, a'⟩ + [item equal]·⟨b, b'⟩. The
targets' mean μ_T is a half per distinct user and item (``HalvesMean``). ``HalvesShardState`` runs
``kernels.sbq.ShardState``'s steps storing c_x only for the candidates that share a user or an item with
a selected point: every other c_x is exactly zero. Its memory is O(n·k + touched·m) instead of O(n·m).

The generic functions of ``kernels.sbq`` (``n_rows``, ``as_rows``, ``mean_embedding``, ``inner``,
``shard_state``, ``as_matrix``) take these forms through the implementations registered here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import sbq
from .lookup import find_sorted
from .sbq import Candidate, ShardState


def owner_columns(owner: np.ndarray, k: int) -> np.ndarray:
    """The k columns of each owner (a user, or n_users + an item) in the (users + items)·k space."""
    return np.asarray(owner, np.int64)[:, None] * k + np.arange(k)


def _half_inner(owner: np.ndarray, X: np.ndarray, keys: np.ndarray, M: np.ndarray) -> np.ndarray:
    pos, hit = find_sorted(keys, owner)
    out = np.zeros(len(owner))
    out[hit] = np.einsum("ij,ij->i", X[hit], M[pos[hit]])
    return out


def touched_column(
    touched: np.ndarray,
    Ct: np.ndarray,
    t: int,
    m: int,
    rows: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    s: Candidate,
    d: float,
):
    """Step t's entry of c_x = L⁻¹k_Sx once s joins S, for the touched rows: the earlier touched ones and
    ``rows`` (s's neighbours: their ``users``, ``items`` and halves ``a``, ``b``). Returns the new touched
    rows (sorted), their (m, touched) c buffer with row t written, and that row."""
    kcol = np.where(users == s.phi.user[0], a @ s.phi.a[0], 0.0)
    kcol += np.where(items == s.phi.item[0], b @ s.phi.b[0], 0.0)
    grown = np.union1d(touched, rows)
    C = np.zeros((m, len(grown)))
    C[:t, np.searchsorted(grown, touched)] = Ct[:t]
    k_all = np.zeros(len(grown))
    k_all[np.searchsorted(grown, rows)] = kcol
    col = (k_all - s.c @ C[:t]) / d
    C[t] = col
    return grown, C, col


@dataclass
class PairHalves:
    """Fisher embeddings of factor-model pairs as two halves: φ_x = [a_x in user[x]'s k columns, b_x in
    item[x]'s] of a (users + items)·k space (``kernels.fisher.mf_embedding`` is its CSR form).

    Two rows' kernel is [user equal]·⟨a, a'⟩ + [item equal]·⟨b, b'⟩: zero unless they share a user or an
    item, so a kernel column needs only the rows of one user and one item."""

    user: np.ndarray  # (n,) int64
    item: np.ndarray  # (n,) int64
    a: np.ndarray  # (n, k) user halves
    b: np.ndarray  # (n, k) item halves

    def __len__(self) -> int:
        return len(self.user)

    def __getitem__(self, rows) -> PairHalves:
        rows = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows)
        return PairHalves(self.user[rows], self.item[rows], self.a[rows], self.b[rows])

    def squared_norms(self) -> np.ndarray:
        return np.einsum("ij,ij->i", self.a, self.a) + np.einsum("ij,ij->i", self.b, self.b)

    def to_csr(self, n_users: int, n_items: int) -> sp.csr_array:
        n, k = self.a.shape
        cols = np.concatenate([owner_columns(self.user, k), owner_columns(n_users + self.item, k)], axis=1)
        return sp.csr_array(
            (np.concatenate([self.a, self.b], axis=1).ravel(), cols.ravel(), np.arange(0, 2 * k * n + 1, 2 * k)),
            shape=(n, (n_users + n_items) * k),
        )


@dataclass
class HalvesMean:
    """μ_T of ``PairHalves`` targets: the mean of their halves per distinct user and per distinct item."""

    users: np.ndarray  # sorted distinct target users
    U: np.ndarray  # (len(users), k)
    items: np.ndarray
    V: np.ndarray

    @classmethod
    def of(cls, T: PairHalves) -> HalvesMean:
        n = len(T)
        users, iu = np.unique(T.user, return_inverse=True)
        items, ii = np.unique(T.item, return_inverse=True)
        U, V = np.zeros((len(users), T.a.shape[1])), np.zeros((len(items), T.b.shape[1]))
        np.add.at(U, iu, T.a / n)
        np.add.at(V, ii, T.b / n)
        return cls(users, U, items, V)

    def to_csr(self, n_users: int, n_items: int) -> sp.csr_array:
        """μ as a (1, p) row of the space of ``PairHalves.to_csr``."""
        k = self.U.shape[1]
        cols = np.concatenate([owner_columns(self.users, k).ravel(), owner_columns(n_users + self.items, k).ravel()])
        return sp.csr_array(
            (np.concatenate([self.U.ravel(), self.V.ravel()]), (np.zeros(len(cols), np.int64), cols)),
            shape=(1, (n_users + n_items) * k),
        )

    def inner(self, other: HalvesMean) -> float:
        _, i, j = np.intersect1d(self.users, other.users, assume_unique=True, return_indices=True)
        _, p, q = np.intersect1d(self.items, other.items, assume_unique=True, return_indices=True)
        return float(np.vdot(self.U[i], other.U[j]) + np.vdot(self.V[p], other.V[q]))

    def inner_rows(self, X: PairHalves) -> np.ndarray:
        """⟨φ_x, μ⟩ for every row x: its user half against μ's half of its user, the same for items."""
        return _half_inner(X.user, X.a, self.users, self.U) + _half_inner(X.item, X.b, self.items, self.V)


class HalvesShardState(ShardState):
    """``ShardState`` for ``PairHalves``: the same steps, with c_x kept only for the rows that share a user or
    an item with a selected point (``touched``). Every other row's kernel with S is zero, so its c_x is
    zero and its r and v stay z and k_xx, as in the dense state (the same values up to rounding: kernel
    entries are dot products of halves rather than sparse column sums); memory is O(touched·m).

    Subclasses may hold the halves elsewhere: they override ``halves`` (a and b of some rows) and
    ``admit`` (rows whose z and k_xx are first needed, before a step touches them)."""

    def __init__(self, Phi: PairHalves, mu: HalvesMean, m: int, offset: int = 0):
        self.Phi = Phi
        self._index(Phi.user, Phi.item, m, offset)
        self.kdiag = Phi.squared_norms()
        self.z = mu.inner_rows(Phi)
        self.r, self.v = self.z.copy(), self.kdiag.copy()
        self.open = self.kdiag > 0

    def _index(self, user: np.ndarray, item: np.ndarray, m: int, offset: int) -> None:
        self.user, self.item, self.m, self.offset = user, item, m, offset
        self.by_user, self.by_item = np.argsort(user, kind="stable"), np.argsort(item, kind="stable")
        self.user_sorted, self.item_sorted = user[self.by_user], item[self.by_item]
        self.touched = np.empty(0, np.int64)  # sorted local rows whose c_x is stored
        self.Ct = np.empty((m, 0))  # their c_x, column by column
        self.t = 0

    def held(self) -> list:
        return [*super().held(), self.Phi.user, self.Phi.item, self.Phi.a, self.Phi.b]

    def halves(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of these local rows."""
        return self.Phi.a[rows], self.Phi.b[rows]

    def admit(self, new: HalvesShardState, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """Give ``new`` (the next state, its r and v already copied) z and k_xx of ``rows``, whose halves
        are ``a``, ``b``: here every row's are known from the start."""

    def _row(self, x: int) -> PairHalves:
        a, b = self.halves(np.array([x]))
        return PairHalves(self.user[[x]], self.item[[x]], a, b)

    def _c(self, x: int) -> np.ndarray:
        pos = np.searchsorted(self.touched, x)
        if pos < len(self.touched) and self.touched[pos] == x:
            return self.Ct[: self.t, pos].copy()
        return np.zeros(self.t)

    def neighbours(self, user: int, item: int) -> np.ndarray:
        """The local rows of this user or this item, ascending."""
        u0, u1 = np.searchsorted(self.user_sorted, [user, user + 1])
        i0, i1 = np.searchsorted(self.item_sorted, [item, item + 1])
        return np.union1d(self.by_user[u0:u1], self.by_item[i0:i1])

    def add(self, s: Candidate, d: float, beta_t: float) -> HalvesShardState:
        """As ``ShardState.add``, over the touched rows and s's neighbours only. The touched rows and their
        c_x are copied into the new state (O(touched·m)), so replaying a step gives the same values."""
        new = copy.copy(self)
        new.r, new.v = self.r.copy(), self.v.copy()
        rows = self.neighbours(int(s.phi.user[0]), int(s.phi.item[0]))
        a, b = self.halves(rows)
        self.admit(new, rows, a, b)
        touched, Ct, col = touched_column(
            self.touched, self.Ct, self.t, self.m, rows, self.user[rows], self.item[rows], a, b, s, d
        )
        new.t, new.touched, new.Ct = self.t + 1, touched, Ct
        new.r[touched] -= col * beta_t
        new.v[touched] -= col**2
        x = s.index - self.offset
        if 0 <= x < len(new.open):
            new.open = new.open.copy() if new.open is self.open else new.open
            new.open[x] = False
        return new


@sbq.n_rows.register
def _(Phi: PairHalves) -> int:
    return len(Phi)


@sbq.as_rows.register
def _(Phi: PairHalves) -> PairHalves:
    return Phi


@sbq.mean_embedding.register
def _(Phi_T: PairHalves) -> HalvesMean:
    return HalvesMean.of(Phi_T)


@sbq.inner.register
def _(a: HalvesMean, b) -> float:
    return a.inner(b)


@sbq.shard_state.register
def _(Phi: PairHalves, mu, m: int, offset: int = 0) -> HalvesShardState:
    return HalvesShardState(Phi, mu, m, offset)


@sbq.as_matrix.register
def _(Phi: PairHalves, mu: HalvesMean) -> tuple[sp.csr_array, sp.csr_array]:
    n_users = int(max(Phi.user.max(initial=-1), mu.users.max(initial=-1))) + 1
    n_items = int(max(Phi.item.max(initial=-1), mu.items.max(initial=-1))) + 1
    return Phi.to_csr(n_users, n_items), mu.to_csr(n_users, n_items)
