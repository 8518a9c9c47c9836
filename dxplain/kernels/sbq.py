"""Sequential Bayesian quadrature (SBQ) over an explicit feature map, k(x, x') = φ(x)ᵀφ(x').

The Fisher kernels of ``kernels.fisher`` are all of this form (φ = L⁻¹g with F = LLᵀ), so a kernel
column k(·, s) = Φ φ_s is one matrix-vector product and the n×n kernel is never formed.

Objective (docs/methods.md §2): choose S and w to minimise ‖μ_T − Σ_s w_s φ(s)‖², μ_T the targets' mean
embedding. With z_x = φ(x)ᵀμ_T = (1/|T|)Σ_t k(x, t) and c = ‖μ_T‖², the optimum over w is
w = K_SS⁻¹ z_S and the residual is c − z_Sᵀ K_SS⁻¹ z_S.

Greedy (the paper's Algorithm 1) keeps a growing Cholesky factor K_SS = LLᵀ instead of the inverse of
Prop. 1 (the same algebra, better conditioned). Per candidate x it keeps

    c_x = L⁻¹ k_Sx           (one new entry per step: (k_xs − c_x·c_s) / d,  d = √v_s)
    v_x = k_xx − ‖c_x‖²      (the posterior variance of x given S)
    r_x = z_x − c_x·β        (β = L⁻¹ z_S, one new entry per step: r_s / d)

so the gain of adding x, (z_x − k_xS K_SS⁻¹ z_S)² / (k_xx − k_xS K_SS⁻¹ k_Sx), is r_x² / v_x, and the
objective after the step is c − ‖β‖². A step costs one kernel column plus O(n·|S|): memory O(n·m).

Candidates may be split into shards (``ShardState``): each keeps its own rows of c, v, r and reports its
best candidate; the driver (``greedy_select``) keeps L and β. One shard is the in-memory algorithm; many
shards on a mapper (``explain.prototypes.MappedShards``) run exactly the same arithmetic row by row.

A factor model's Fisher kernel is block-diagonal, so its embeddings are kept in block form
(``BlockRows``: per pair, a user half and an item half) and ``BlockShardState`` runs the same steps
storing c_x only for the candidates that share a user or an item with a selected point: every other
c_x is exactly zero. Its memory is O(n·k + touched·m) instead of O(n·m).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular

from .lookup import find_sorted

# A candidate whose posterior variance has fallen below this share of its prior variance lies in the
# span of the selected points: adding it would make K_SS singular, and its gain is rounding noise.
SPAN_TOL = 1e-9


@dataclass
class Selection:
    """Selected candidates in the order chosen, their quadrature weights, and the objective
    ‖μ_T − Σ w φ‖² before any selection (``objective[0] = c``) and after each step."""

    index: np.ndarray  # (m,) int64, global candidate indices
    weights: np.ndarray  # (m,)
    objective: np.ndarray  # (m + 1,)

    @property
    def reduction(self) -> float:
        """Objective reduction achieved, objective[0] − objective[-1]."""
        return float(self.objective[0] - self.objective[-1])


@dataclass
class Candidate:
    """What the driver needs to add candidate ``index``: its feature row, c_x, v_x, r_x and its gain."""

    index: int
    gain: float
    phi: np.ndarray | sp.csr_array  # (1, p) row
    c: np.ndarray  # (t,)
    v: float
    r: float


@dataclass
class BlockRows:
    """Fisher embeddings of factor-model pairs in block form: φ_x = [a_x at user block user[x], b_x at item
    block item[x]] in a (users + items)·k space (``kernels.fisher.mf_embedding`` is its CSR form).

    Two rows' kernel is [user equal]·⟨a, a'⟩ + [item equal]·⟨b, b'⟩: zero unless they share a user or an
    item, so a kernel column needs only the rows of one user and one item."""

    user: np.ndarray  # (n,) int64
    item: np.ndarray  # (n,) int64
    a: np.ndarray  # (n, k) user halves
    b: np.ndarray  # (n, k) item halves

    def __len__(self) -> int:
        return len(self.user)

    def __getitem__(self, rows) -> BlockRows:
        rows = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows)
        return BlockRows(self.user[rows], self.item[rows], self.a[rows], self.b[rows])

    def squared_norms(self) -> np.ndarray:
        return np.einsum("ij,ij->i", self.a, self.a) + np.einsum("ij,ij->i", self.b, self.b)

    def to_csr(self, n_users: int, n_items: int) -> sp.csr_array:
        n, k = self.a.shape
        cols = np.concatenate([block_columns(self.user, k), block_columns(n_users + self.item, k)], axis=1)
        return sp.csr_array(
            (np.concatenate([self.a, self.b], axis=1).ravel(), cols.ravel(), np.arange(0, 2 * k * n + 1, 2 * k)),
            shape=(n, (n_users + n_items) * k),
        )


def block_columns(block: np.ndarray, k: int) -> np.ndarray:
    """The k columns of each block (a user's, or n_users + an item's) in the (users + items)·k space."""
    return np.asarray(block, np.int64)[:, None] * k + np.arange(k)


@dataclass
class BlockMean:
    """μ_T of ``BlockRows`` targets: the mean of their halves per distinct user and per distinct item."""

    users: np.ndarray  # sorted distinct target users
    U: np.ndarray  # (len(users), k)
    items: np.ndarray
    V: np.ndarray

    @classmethod
    def of(cls, T: BlockRows) -> BlockMean:
        n = len(T)
        users, iu = np.unique(T.user, return_inverse=True)
        items, ii = np.unique(T.item, return_inverse=True)
        U, V = np.zeros((len(users), T.a.shape[1])), np.zeros((len(items), T.b.shape[1]))
        np.add.at(U, iu, T.a / n)
        np.add.at(V, ii, T.b / n)
        return cls(users, U, items, V)

    def to_csr(self, n_users: int, n_items: int) -> sp.csr_array:
        """μ as a (1, p) row of the space of ``BlockRows.to_csr``."""
        k = self.U.shape[1]
        cols = np.concatenate([block_columns(self.users, k).ravel(), block_columns(n_users + self.items, k).ravel()])
        return sp.csr_array(
            (np.concatenate([self.U.ravel(), self.V.ravel()]), (np.zeros(len(cols), np.int64), cols)),
            shape=(1, (n_users + n_items) * k),
        )

    def inner(self, other: BlockMean) -> float:
        _, i, j = np.intersect1d(self.users, other.users, assume_unique=True, return_indices=True)
        _, p, q = np.intersect1d(self.items, other.items, assume_unique=True, return_indices=True)
        return float(np.vdot(self.U[i], other.U[j]) + np.vdot(self.V[p], other.V[q]))

    def inner_rows(self, X: BlockRows) -> np.ndarray:
        """⟨φ_x, μ⟩ for every row x: its user half against μ's block of its user, the same for items."""
        return _half_inner(X.user, X.a, self.users, self.U) + _half_inner(X.item, X.b, self.items, self.V)


def _half_inner(owner: np.ndarray, X: np.ndarray, keys: np.ndarray, M: np.ndarray) -> np.ndarray:
    pos, hit = find_sorted(keys, owner)
    out = np.zeros(len(owner))
    out[hit] = np.einsum("ij,ij->i", X[hit], M[pos[hit]])
    return out


def n_rows(Phi) -> int:
    return len(Phi) if isinstance(Phi, BlockRows) else Phi.shape[0]


def as_rows(Phi) -> np.ndarray | sp.csr_array | BlockRows:
    if isinstance(Phi, BlockRows):
        return Phi
    return sp.csr_array(Phi) if sp.issparse(Phi) else np.ascontiguousarray(Phi, dtype=np.float64)


def mean_embedding(Phi_T) -> np.ndarray | sp.csr_array | BlockMean:
    """μ_T = (1/|T|) Σ_t φ(t) as a (1, p) row (sparse if Φ_T is; a ``BlockMean`` of ``BlockRows``)."""
    if isinstance(Phi_T, BlockRows):
        return BlockMean.of(Phi_T)
    if sp.issparse(Phi_T):  # a sparse product keeps μ sparse even when p is (users + items)·k
        n = Phi_T.shape[0]
        return sp.csr_array(sp.csr_array(np.full((1, n), 1.0 / n)) @ Phi_T)
    return np.asarray(Phi_T, dtype=np.float64).mean(axis=0, keepdims=True)


def kernel_column(Phi, phi_s, Phi_csc=None) -> np.ndarray:
    """k(x, s) = φ(x)ᵀφ(s) for every row x of Φ: one (sparse) matrix-vector product.

    For sparse Φ pass its CSC copy as well: then only the columns where φ_s is nonzero are read, so an MF
    kernel column costs O(ratings of the user and the item) instead of a pass over all n rows.
    """
    if sp.issparse(phi_s):
        row = sp.csr_array(phi_s)
        if Phi_csc is not None:
            return np.asarray(Phi_csc[:, row.indices] @ row.data).ravel()
        phi_s = row.toarray()
    return np.asarray(Phi @ np.ravel(phi_s)).ravel()


def squared_norms(Phi) -> np.ndarray:
    if sp.issparse(Phi):
        return np.ravel(Phi.multiply(Phi).sum(axis=1))
    return np.einsum("ij,ij->i", Phi, Phi)


def inner(a, b) -> float:
    """⟨a, b⟩ of two (1, p) rows, dense or sparse (or ‖μ‖² of a ``BlockMean``)."""
    if isinstance(a, BlockMean):
        return a.inner(b)
    if sp.issparse(a) or sp.issparse(b):
        prod = (a @ b.T) if sp.issparse(a) else (b @ np.ravel(a))
        return float(prod.toarray().sum() if sp.issparse(prod) else np.sum(prod))
    return float(np.ravel(a) @ np.ravel(b))


class ShardState:
    """One shard's candidates (rows ``offset …`` of the global candidate list) during greedy SBQ.

    ``Ct`` holds c_x column by column as rows of an (m, n) buffer; step t writes row t only, so a
    replay of the same steps rewrites identical values.
    """

    def __init__(self, Phi, mu, m: int, offset: int = 0):
        self.Phi = as_rows(Phi)
        self.Phi_csc = sp.csc_array(self.Phi) if sp.issparse(self.Phi) else None
        self.offset = offset
        self.kdiag = squared_norms(self.Phi)
        self.z = kernel_column(self.Phi, mu)
        self.r = self.z.copy()
        self.v = self.kdiag.copy()
        self.Ct = np.empty((m, self.Phi.shape[0]))
        self.t = 0
        self.open = self.kdiag > 0  # a zero embedding can never reduce the objective

    def __sizeof__(self) -> int:
        # What Dask weighs a task's inputs by when it places the next step: a state is kept where it is
        # only if its arrays count (an object's own size is a few dozen bytes).
        arrays = list(vars(self).values())
        arrays += [getattr(v, f) for v in arrays if isinstance(v, BlockRows) for f in ("user", "item", "a", "b")]
        return object.__sizeof__(self) + sum(v.nbytes for v in arrays if isinstance(v, np.ndarray))

    def best(self) -> Candidate | None:
        """The shard's candidate of largest gain r²/v (the lowest index among equal gains)."""
        ok = self.open & (self.v > SPAN_TOL * self.kdiag)
        if not ok.any():
            return None
        gain = np.where(ok, self.r**2 / np.where(ok, self.v, 1.0), -np.inf)
        x = int(np.argmax(gain))  # argmax returns the first maximum: ties go to the lowest index
        return Candidate(
            index=self.offset + self._row_of(x),
            gain=float(gain[x]),
            phi=self._row(x),
            c=self._c(x),
            v=float(self.v[x]),
            r=float(self.r[x]),
        )

    def _row_of(self, x: int) -> int:
        """The local row at position x of r, v (every row here; a subclass may keep only some, ascending)."""
        return x

    def _row(self, x: int):
        return self.Phi[[x]]

    def _c(self, x: int) -> np.ndarray:
        return self.Ct[: self.t, x].copy()

    def add(self, s: Candidate, d: float, beta_t: float) -> ShardState:
        """The state after appending s to S: the new entry of L⁻¹k_S· for every candidate, then r, v.

        Returns a new state (r, v and the open mask are copied, O(n)); only row t of the shared buffer
        is written, with the same values however often the step is replayed, so a Dask task that is
        retried or recomputed after a lost worker gives the same result."""
        col = (kernel_column(self.Phi, s.phi, self.Phi_csc) - s.c @ self.Ct[: self.t]) / d
        self.Ct[self.t] = col
        new = copy.copy(self)
        new.t = self.t + 1
        new.r = self.r - col * beta_t
        new.v = self.v - col**2
        x = s.index - self.offset
        if 0 <= x < len(self.open):
            new.open = self.open.copy()
            new.open[x] = False
        return new


class BlockShardState(ShardState):
    """``ShardState`` for ``BlockRows``: the same steps, with c_x kept only for the rows that share a user or
    an item with a selected point (``touched``). Every other row's kernel with S is zero, so its c_x is
    zero and its r and v stay z and k_xx, as in the dense state (the same values up to rounding: kernel
    entries are dot products of halves rather than sparse column sums); memory is O(touched·m).

    Subclasses may hold the halves elsewhere: they override ``halves`` (a and b of some rows) and
    ``admit`` (rows whose z and k_xx are first needed, before a step touches them)."""

    def __init__(self, Phi: BlockRows, mu: BlockMean, m: int, offset: int = 0):
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

    def halves(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of these local rows."""
        return self.Phi.a[rows], self.Phi.b[rows]

    def admit(self, new: BlockShardState, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """Give ``new`` (the next state, its r and v already copied) z and k_xx of ``rows``, whose halves
        are ``a``, ``b``: here every row's are known from the start."""

    def _row(self, x: int) -> BlockRows:
        a, b = self.halves(np.array([x]))
        return BlockRows(self.user[[x]], self.item[[x]], a, b)

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

    def add(self, s: Candidate, d: float, beta_t: float) -> BlockShardState:
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


def shard_state(Phi, mu, m: int, offset: int = 0) -> ShardState:
    """The shard state for these rows: block form for ``BlockRows``, dense otherwise."""
    return (BlockShardState if isinstance(Phi, BlockRows) else ShardState)(Phi, mu, m, offset)


def greedy_select(shards, m: int, c: float) -> Selection:
    """Algorithm 1 over candidate shards: ``shards.best()`` returns every shard's best ``Candidate``
    (or None), ``shards.add(s, d, beta_t)`` appends s on every shard. Stops early when no candidate
    can reduce the objective any further."""
    L = np.zeros((m, m))
    beta = np.zeros(m)
    chosen, objective = [], [c]
    for t in range(m):
        found = [b for b in shards.best() if b is not None and b.gain > 0]
        if not found:
            break
        s = max(found, key=lambda b: (b.gain, -b.index))
        d = np.sqrt(s.v)
        L[t, :t], L[t, t] = s.c, d
        beta[t] = s.r / d
        shards.add(s, d, beta[t])
        chosen.append(s.index)
        objective.append(c - float(beta[: t + 1] @ beta[: t + 1]))
    n = len(chosen)
    w = solve_triangular(L[:n, :n].T, beta[:n], lower=False) if n else np.zeros(0)  # w = L⁻ᵀβ = K_SS⁻¹z_S
    return Selection(np.asarray(chosen, dtype=np.int64), w, np.asarray(objective))


class LocalShards:
    """Shards held in this process, as a list: what ``greedy`` runs on (in a GreeDi part's task, too)."""

    def __init__(self, states: list[ShardState]):
        self.states = states

    def best(self):
        return [s.best() for s in self.states]

    def add(self, cand, d, beta_t):
        self.states = [s.add(cand, d, beta_t) for s in self.states]


def split_rows(n: int, n_shards: int) -> list[tuple[int, int]]:
    cuts = np.linspace(0, n, max(1, min(n_shards, n)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def local_shards(Phi, mu, m: int, n_shards: int = 1) -> LocalShards:
    """The rows of Φ split into ``n_shards`` in-memory ``ShardState``s, ready for ``greedy_select``."""
    return LocalShards([shard_state(Phi[a:b], mu, m, a) for a, b in split_rows(n_rows(Phi), n_shards)])


def greedy(Phi, mu, m: int, n_shards: int = 1, wrap=None) -> Selection:
    """Greedy SBQ selecting up to m rows of Φ to represent μ (a (1, p) row, e.g. ``mean_embedding``).
    ``wrap(shards, m)`` may wrap the shards, e.g. to log progress."""
    Phi = as_rows(Phi)
    m = min(m, n_rows(Phi))
    shards = local_shards(Phi, mu, m, n_shards)
    return greedy_select(wrap(shards, m) if wrap else shards, m, inner(mu, mu))


def greedi(Phi, mu, m: int, n_parts: int, seed: int = 0, map_parts=None) -> Selection:
    """GreeDi (Mirzasoleiman et al. 2013): greedy on each of ``n_parts`` random parts of the candidates,
    then greedy over the union of their selections; the better of that and the best part's selection.

    ``map_parts(parts)`` runs ``greedy(part, mu, m)`` on each part (the built-in ``map`` here; the Dask
    version maps them over workers), so the in-memory and distributed runs are the same computation.
    """
    Phi = as_rows(Phi)
    n = n_rows(Phi)
    part_rows = [np.sort(p) for p in np.array_split(np.random.default_rng(seed).permutation(n), n_parts)]
    parts = [Phi[r] for r in part_rows]
    local = (map_parts or (lambda ps: [greedy(p, mu, m) for p in ps]))(parts)
    found = [Selection(r[s.index], s.weights, s.objective) for r, s in zip(part_rows, local)]
    union = np.unique(np.concatenate([s.index for s in found]))
    merged = greedy(Phi[union], mu, m)
    found.append(Selection(union[merged.index], merged.weights, merged.objective))
    return min(found, key=lambda s: s.objective[-1])


def objective_of(Phi, mu, index: np.ndarray, weights: np.ndarray) -> float:
    """‖μ − Σ_s w_s φ(s)‖² for any selection and weights (an independent check of the recursion)."""
    Phi_S = as_rows(Phi)[np.asarray(index)]
    K = Phi_S @ Phi_S.T
    K = K.toarray() if sp.issparse(K) else K
    z = kernel_column(Phi_S, mu)
    return float(inner(mu, mu) - 2 * weights @ z + weights @ K @ weights)


def matching_pursuit(Phi, mu, m: int) -> Selection:
    """Matching pursuit: each step picks the atom most correlated with the residual μ − Σwφ and moves
    its weight by the 1-D optimum, without refitting earlier weights (O(n) memory; an atom may recur).

    ρ_x = z_x − Σ_s w_s k(x, s);  pick argmax ρ_x²/k_xx;  w_s += ρ_s/k_ss;  objective −= ρ_s²/k_ss.
    """
    Phi = as_rows(Phi)
    kdiag = squared_norms(Phi)
    rho = kernel_column(Phi, mu)
    Phi_csc = sp.csc_array(Phi) if sp.issparse(Phi) else None
    obj = [inner(mu, mu)]
    weights: dict[int, float] = {}
    ok = kdiag > 0
    for _ in range(min(m, Phi.shape[0])):
        gain = np.where(ok, rho**2 / np.where(ok, kdiag, 1.0), -np.inf)
        s = int(np.argmax(gain))
        if not gain[s] > 0:
            break
        a = rho[s] / kdiag[s]
        weights[s] = weights.get(s, 0.0) + a
        rho -= a * kernel_column(Phi, Phi[[s]], Phi_csc)
        obj.append(obj[-1] - gain[s])
    idx = np.fromiter(weights, dtype=np.int64, count=len(weights))
    return Selection(idx, np.array([weights[i] for i in idx]), np.asarray(obj))


def stochastic_greedy(Phi, mu, m: int, eps: float = 0.01, seed: int = 0) -> Selection:
    """Stochastic greedy (Mirzasoleiman et al. 2015): each step scores only a random sample of
    ⌈(n/m)·log(1/ε)⌉ unselected candidates. Their c_x = L⁻¹k_Sx are computed afresh from the selected
    rows, so memory is O(sample·m) instead of O(n·m)."""
    Phi = as_rows(Phi)
    n = Phi.shape[0]
    m = min(m, n)
    rng = np.random.default_rng(seed)
    size = min(n, int(np.ceil(n / m * np.log(1 / eps))))
    kdiag, z = squared_norms(Phi), kernel_column(Phi, mu)
    L, beta = np.zeros((m, m)), np.zeros(m)
    open_ = kdiag > 0
    chosen, objective = [], [inner(mu, mu)]
    for t in range(m):
        pool = np.flatnonzero(open_)
        if len(pool) == 0:
            break
        R = np.sort(rng.choice(pool, size=min(size, len(pool)), replace=False))
        K_SR = Phi[np.asarray(chosen, dtype=np.int64)] @ Phi[R].T if t else np.zeros((0, len(R)))
        K_SR = K_SR.toarray() if sp.issparse(K_SR) else K_SR
        C = solve_triangular(L[:t, :t], K_SR, lower=True) if t else K_SR
        v = kdiag[R] - np.einsum("ij,ij->j", C, C)
        r = z[R] - beta[:t] @ C
        ok = v > SPAN_TOL * kdiag[R]
        if not ok.any():
            break
        gain = np.where(ok, r**2 / np.where(ok, v, 1.0), -np.inf)
        b = int(np.argmax(gain))
        if not gain[b] > 0:
            break
        d = np.sqrt(v[b])
        L[t, :t], L[t, t], beta[t] = C[:, b], d, r[b] / d
        chosen.append(int(R[b]))
        open_[R[b]] = False
        objective.append(objective[0] - float(beta[: t + 1] @ beta[: t + 1]))
    k = len(chosen)
    w = solve_triangular(L[:k, :k].T, beta[:k], lower=False) if k else np.zeros(0)
    return Selection(np.asarray(chosen, dtype=np.int64), w, np.asarray(objective))
