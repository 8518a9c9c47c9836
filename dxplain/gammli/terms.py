"""Features as bases, and the additive part of GAMMLI as a list of terms (intercept, main effects, pairs).

A numeric feature becomes a cubic B-spline basis (``N_MAIN`` functions for a main effect, ``N_PAIR`` per
margin of an interaction) with a second-difference penalty (a P-spline); a categorical feature, or a
numeric one with at most two distinct values (a flag), becomes one-hot levels with a ridge penalty.
Every basis row sums to one, which the constraints of ``kernels.gammli`` rely on.

A ``Term`` holds its basis rows for every user or item (small: entities × basis size), so the columns of
any interaction (u, i) are a lookup: ``B_u[u]`` for a user main effect, ``kron(A_u[u], B_i[i])`` for a pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..io.features import FeatureTable
from ..kernels import gammli as G

N_MAIN = 12
N_PAIR = 8


@dataclass(frozen=True)
class Feature:
    """How one feature column is encoded: ``spline`` over [lo, hi], or ``levels``."""

    side: str
    name: str
    kind: str
    lo: float = 0.0
    hi: float = 0.0
    levels: tuple = ()

    @property
    def label(self) -> str:
        return f"{self.side}:{self.name}"

    def size(self, n_basis: int) -> int:
        return n_basis if self.kind == "spline" else len(self.levels)

    def codes(self, values: np.ndarray) -> np.ndarray:
        """Level index of each value, −1 for a level not seen when the encoding was made."""
        lookup = {v: k for k, v in enumerate(self.levels)}
        return np.array([lookup.get(v, -1) for v in values.tolist()], dtype=np.int64)

    def basis(self, values: np.ndarray, n_basis: int) -> np.ndarray:
        if self.kind == "spline":
            return G.bspline_basis(values, self.lo, self.hi, n_basis)
        return G.levels_basis(self.codes(values), len(self.levels))

    def penalty(self, n_basis: int) -> np.ndarray:
        d = self.size(n_basis)
        return G.difference_penalty(d) if self.kind == "spline" else np.eye(d)

    def to_json(self) -> dict:
        return {
            "side": self.side,
            "name": self.name,
            "kind": self.kind,
            "lo": self.lo,
            "hi": self.hi,
            "levels": list(self.levels),
        }

    @classmethod
    def from_json(cls, d: dict) -> Feature:
        return cls(d["side"], d["name"], d["kind"], d["lo"], d["hi"], tuple(d["levels"]))


def encode_features(ft: FeatureTable) -> list[Feature]:
    """One ``Feature`` per column of ``ft``: its range or its levels, as seen in the table."""
    out = []
    for name, x in ft.numeric.items():
        uniq = np.unique(x)
        if len(uniq) <= 2:  # a flag: two coefficients, not a spline through two points
            out.append(Feature(ft.side, name, "levels", levels=tuple(float(v) for v in uniq)))
        else:
            out.append(Feature(ft.side, name, "spline", float(uniq[0]), float(uniq[-1])))
    for name, x in ft.categorical.items():
        out.append(Feature(ft.side, name, "levels", levels=tuple(sorted(set(x.tolist())))))
    return out


def column(ft: FeatureTable, f: Feature) -> np.ndarray:
    return ft.numeric[f.name] if f.name in ft.numeric else ft.categorical[f.name]


def cluster_matrix(ft: FeatureTable, features: list[Feature]) -> np.ndarray:
    """What K-means sees: numeric features standardised, categorical ones one-hot (unit-length rows)."""
    blocks = []
    for f in features:
        x = column(ft, f)
        if f.kind == "spline":
            s = x.std()
            blocks.append(((x - x.mean()) / (s if s > 0 else 1.0))[:, None])
        else:
            blocks.append(G.levels_basis(f.codes(x), len(f.levels)))
    return np.hstack(blocks)


@dataclass
class Term:
    """Columns of the design for one effect. ``Bu``/``Bi``: basis rows per user/item (None if unused)."""

    name: str
    kind: str  # intercept | user | item | pair
    Bu: np.ndarray | None = None
    Bi: np.ndarray | None = None
    P: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))

    @property
    def size(self) -> int:
        if self.kind == "intercept":
            return 1
        if self.kind == "pair":
            return self.Bu.shape[1] * self.Bi.shape[1]
        return (self.Bu if self.kind == "user" else self.Bi).shape[1]

    def columns(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        if self.kind == "intercept":
            return np.ones((len(u), 1))
        if self.kind == "user":
            return self.Bu[u]
        if self.kind == "item":
            return self.Bi[i]
        return G.row_kron(self.Bu[u], self.Bi[i])

    def values(self, u: np.ndarray, i: np.ndarray, c: np.ndarray) -> np.ndarray:
        """h(u, i) = columns(u, i) c, without forming the Kronecker columns for a pair."""
        if self.kind == "pair":
            C = c.reshape(self.Bu.shape[1], self.Bi.shape[1])
            return np.einsum("nk,nk->n", self.Bu[u] @ C, self.Bi[i])
        return self.columns(u, i) @ c

    def constraints(self, G1: np.ndarray) -> np.ndarray:
        """C with Cc = 0: centring over Ω for a main effect; orthogonality to both margins for a pair.
        ``G1`` is this term's unweighted Gram Σ_Ω x xᵀ; its column sums are Σ_Ω x (rows sum to one)."""
        if self.kind == "intercept":
            return np.zeros((0, 1))
        if self.kind == "pair":
            return G.pair_constraints(G1, self.Bu.shape[1], self.Bi.shape[1])
        return G1.sum(axis=0, keepdims=True)


def main_term(f: Feature, B: np.ndarray) -> Term:
    kw = {"Bu": B} if f.side == "user" else {"Bi": B}
    return Term(f.label, f.side, P=f.penalty(B.shape[1]), **kw)


def pair_term(fa: Feature, fb: Feature, Ba: np.ndarray, Bb: np.ndarray) -> Term:
    P = G.tensor_penalty(fa.penalty(Ba.shape[1]), fb.penalty(Bb.shape[1]))
    return Term(f"{fa.label} x {fb.label}", "pair", Bu=Ba, Bi=Bb, P=P)


@dataclass
class Additive:
    """A fitted additive predictor η(u, i) = Σ_t h_t(u, i) over ``terms`` with coefficients ``coefs``."""

    terms: list[Term] = field(default_factory=list)
    coefs: list[np.ndarray] = field(default_factory=list)

    def contributions(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """(n, n_terms): h_t(u_r, i_r) for every term t."""
        if not self.terms:
            return np.zeros((len(u), 0))
        return np.column_stack([t.values(u, i, c) for t, c in zip(self.terms, self.coefs)])

    def eta(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        return self.contributions(u, i).sum(axis=1)

    def plus(self, other: Additive) -> Additive:
        return Additive(self.terms + other.terms, self.coefs + other.coefs)
