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

Candidates come as a dense array, a sparse matrix, or another form that registers its implementations of
the generic functions here (``n_rows``, ``as_rows``, ``mean_embedding``, ``inner``, ``shard_state``,
``as_matrix``): a factor model's pairs as a user half and an item half (``kernels.pair_halves``), whose
shard state keeps c_x only where it is not exactly zero.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import singledispatch

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular

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


@singledispatch
def n_rows(Phi) -> int:
    """The number of candidates (rows) in Φ."""
    return Phi.shape[0]


@singledispatch
def as_rows(Phi):
    """Φ in the form the steps index: CSR if sparse, else a C-contiguous float64 array."""
    return sp.csr_array(Phi) if sp.issparse(Phi) else np.ascontiguousarray(Phi, dtype=np.float64)


@singledispatch
def as_matrix(Phi, mu) -> tuple:
    """(Φ, μ) as matrices, for the variants that multiply them whole (stochastic greedy, matching pursuit)."""
    return Phi, mu


@singledispatch
def mean_embedding(Phi_T):
    """μ_T = (1/|T|) Σ_t φ(t) as a (1, p) row (sparse if Φ_T is)."""
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


@singledispatch
def inner(a, b) -> float:
    """⟨a, b⟩ of two (1, p) rows, dense or sparse."""
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
        return object.__sizeof__(self) + sum(v.nbytes for v in self.held() if isinstance(v, np.ndarray))

    def held(self) -> list:
        """What this state holds, for ``__sizeof__``: its attributes (a subclass adds the arrays inside them)."""
        return list(vars(self).values())

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


@singledispatch
def shard_state(Phi, mu, m: int, offset: int = 0) -> ShardState:
    """The shard state for these rows (``ShardState`` for a dense or sparse Φ)."""
    return ShardState(Phi, mu, m, offset)


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
