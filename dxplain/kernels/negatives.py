"""Aggregated importance of negative samples (docs/methods.md §1 "Negative-sample aggregation", paper App. C).

Summing Definition 1 over every positive (i', j') ∈ P that shares the negative's user or item:

    I_neg(i, j) = α_ij (⟨Ũ_i, S^U_j⟩ + ⟨Ṽ_j, S^V_i⟩) = α_ij ⟨[Ũ_i, S^V_i], [S^U_j, Ṽ_j]⟩
    S^U_j = Σ_{i':(i',j)∈P} Ũ_{i'},   S^V_i = Σ_{j':(i,j')∈P} Ṽ_{j'},   α_ij = −w σ(s_ij)/(λ|D|)

so after one pass of segment sums each negative costs O(k), and a tile of users × the catalogue is
three matrix products. FIA aggregates the same way with other row/column embeddings (explain/negatives.py),
so every method is "a coefficient of s_ij times ⟨R_i, Q_j⟩" — or a plain function of s_ij (loss), or
seeded noise (random). The lowest p% over all unobserved pairs is kept by a streaming selection whose
result does not depend on how the pairs were split into tiles or shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .als import pair_scores

# Pairs in one scored tile of users × the catalogue (float32): the tile and its few temporaries stay well below 64 MB.
SCAN_ELEMENTS = 1 << 22


@dataclass
class NegativeScore:
    """How one method scores a negative (i, j); lower = more likely a false negative.

    kind ``aggregate``: coef · σ(⟨Us_i, Vs_j⟩) · ⟨R_i, Q_j⟩ with R_i = [Us_i, A_i], Q_j = [B_j, Vs_j]
                        (representer, FIA); R and Q are never formed: ⟨R_i, Q_j⟩ = ⟨Us_i, B_j⟩ + ⟨A_i, Vs_j⟩
                        (two users × k arrays fewer to hold, one fewer to send: 1 GB each at 20M Amazon-like)
    kind ``loss``:      −w · softplus(⟨Us_i, Vs_j⟩) (the highest-loss negatives come first)
    kind ``random``:    uniform noise, seeded per user
    """

    kind: str
    Us: np.ndarray
    Vs: np.ndarray
    A: np.ndarray | None = None
    B: np.ndarray | None = None
    coef: float = 1.0
    w: float = 1.0
    seed: int = 0
    row0: int = 0  # the user of Us's (and A's) first row: a part's users only
    items: np.ndarray | None = None  # the items of Vs's (and B's) rows, sorted; None: every item, in order

    def pairs(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Scores of a list of pairs in float64, O(k) each (the sampled-negatives table)."""
        if self.kind == "random":
            return pair_uniform(u, i, self.seed)  # of the user's index, not its row
        u, i = np.asarray(u, np.intp) - self.row0, np.asarray(i, np.intp)
        if self.items is not None:
            i = np.searchsorted(self.items, i)
        s = pair_scores(self.Us, self.Vs, u, i)
        if self.kind == "aggregate":
            return self.coef * expit(s) * (pair_scores(self.Us, self.B, u, i) + pair_scores(self.A, self.Vs, u, i))
        return -self.w * np.logaddexp(0.0, s)  # loss

    def tile(self, a: int, b: int) -> np.ndarray:
        """Scores of users a:b against the whole catalogue, float32, (b − a, n_items): a rule over whole
        factors (row0 = 0, every item)."""
        Us, Vs = self.Us[a:b].astype(np.float32), self.Vs.astype(np.float32)
        if self.kind == "random":
            return np.random.default_rng([self.seed, a]).random((b - a, len(self.Vs)), dtype=np.float32)
        S = Us @ Vs.T
        if self.kind == "loss":
            np.logaddexp(np.float32(0.0), S, out=S)
            S *= np.float32(-self.w)
            return S
        L = Us @ self.B.astype(np.float32).T
        L += self.A[a:b].astype(np.float32) @ Vs.T
        expit(S, out=S)
        S *= L
        S *= np.float32(self.coef)
        return S


def pair_uniform(u: np.ndarray, i: np.ndarray, seed: int) -> np.ndarray:
    """A uniform [0, 1) value per (user, item) pair and seed (splitmix64 of the pair): the same value
    however the pairs are split into parts or ordered."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    z = (np.asarray(u).astype(np.uint64) << np.uint64(32)) ^ np.asarray(i).astype(np.uint64)
    with np.errstate(over="ignore"):  # numpy warns when a uint64 scalar product wraps: splitmix64 wants it to
        z = z + np.uint64(seed) * golden + golden
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def scan_rows(n_items: int) -> int:
    """User rows per scanned tile (``SCAN_ELEMENTS`` pairs)."""
    return max(1, SCAN_ELEMENTS // max(1, n_items))


class LowestK:
    """The K lowest (value, row, col) triples seen so far, in the total order (value, row, col).

    Candidates are buffered and compacted to K whenever the buffer passes 2K, so memory stays O(K)
    however many pairs stream through. Ties are broken by (row, col), which makes the result
    independent of the order in which tiles or shards arrive — the cluster and in-memory scans agree.
    """

    def __init__(self, K: int, threshold: float = np.inf):
        self.K = int(K)
        # Values above ``threshold`` are never candidates: a known upper bound on the K-th lowest
        # keeps the buffer small from the first tile on.
        self.threshold = threshold
        self._v, self._r, self._c = [], [], []
        self._n = 0

    def push_tile(self, values: np.ndarray, row0: int) -> None:
        """Offer a dense tile whose row r is user row0 + r; +inf entries are never candidates."""
        if self.K == 0:
            return
        flat = values.ravel()
        idx = np.flatnonzero(flat <= self.threshold) if np.isfinite(self.threshold) else np.flatnonzero(flat < np.inf)
        n_cols = values.shape[1]
        self.push(flat[idx], idx // n_cols + row0, idx % n_cols)

    def push(self, v: np.ndarray, r: np.ndarray, c: np.ndarray) -> None:
        if self.K == 0 or len(v) == 0:
            return
        self._v.append(v)
        self._r.append(np.asarray(r, np.int32))  # user and item indices fit int32 (< 2³¹); halves the buffer
        self._c.append(np.asarray(c, np.int32))
        self._n += len(v)
        if self._n > 2 * self.K:
            self._compact()

    def _compact(self) -> None:
        if not self._v:
            self._v, self._r, self._c = [np.empty(0)], [np.empty(0, np.int32)], [np.empty(0, np.int32)]
        v, r, c = (np.concatenate(x) for x in (self._v, self._r, self._c))
        if len(v) > self.K:
            kth = np.partition(v, self.K - 1)[self.K - 1]
            less = np.flatnonzero(v < kth)
            eq = np.flatnonzero(v == kth)
            eq = eq[np.lexsort((c[eq], r[eq]))][: self.K - len(less)]
            keep = np.concatenate([less, eq])
            v, r, c = v[keep], r[keep], c[keep]
            self.threshold = kth
        self._v, self._r, self._c, self._n = [v], [r], [c], len(v)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values, rows, cols) of the K lowest, sorted by (value, row, col)."""
        self._compact()
        v, r, c = self._v[0], self._r[0], self._c[0]
        order = np.lexsort((c, r, v))
        return v[order], r[order].astype(np.int64), c[order].astype(np.int64)
