"""Many pairs at once: the reference put once, pairs sharded over a mapper, and the masking curves.

Each pair's randomness (RAIPair's permutations and A) comes from ``default_rng([seed, pair])``, so the
result does not depend on how pairs are sharded or where a shard runs: ``LocalMapper`` and
``DaskMapper`` give the same bits.
"""

from __future__ import annotations

import math

import numpy as np

from ..mapper import LocalMapper, Mapper
from .shapley import (
    DEFAULT_MAX_D,
    ETA,
    SIGMA,
    Reference,
    asipair,
    check_asipair_size,
    check_options,
    check_pairs,
    raipair,
)

METHODS = ("asipair", "raipair")
MASK_P = (0.001, 0.01, 0.05, 0.1, 0.15, 0.2, 0.25)


def explain_shard(
    zeta, ref: Reference, Xi: np.ndarray, Xj: np.ndarray, pair_ids: np.ndarray, method: str, options: dict, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(φ (n, D), ζ (n,)) for one shard of pairs (a module-level task, shipped to workers)."""
    phi, z = np.empty(Xi.shape), np.empty(len(Xi))
    for n, pid in enumerate(pair_ids):
        if method == "asipair":
            phi[n], z[n] = asipair(zeta, Xi[n], Xj[n], ref, options["sigma"], options["eta"], options["k1"])
        else:
            phi[n], z[n], _ = raipair(
                zeta,
                Xi[n],
                Xj[n],
                ref,
                np.random.default_rng([seed, int(pid)]),
                options["h"],
                options["m"],
                options["sigma"],
                options["eta"],
                options["k1"],
            )
    return phi, z


def check_explain(
    ref: Reference,
    Xi,
    Xj,
    method: str,
    sigma: float = SIGMA,
    eta: float = ETA,
    k1: int | None = None,
    max_d: int = DEFAULT_MAX_D,
) -> None:
    """Every refusal before any work: D mismatch, NaN/inf, σ, η, K₁ vs the reference, ASIPair's cap."""
    check_pairs(ref, Xi, Xj)
    check_options(ref, sigma, eta, k1)
    if method == "asipair":
        check_asipair_size(ref.D, max_d)


def explain_pairs(
    zeta,
    ref: Reference,
    Xi: np.ndarray,
    Xj: np.ndarray,
    method: str = "asipair",
    seed: int = 0,
    sigma: float = SIGMA,
    eta: float = ETA,
    k1: int | None = None,
    permutations: int | None = None,
    measurements: int | None = None,
    max_d: int = DEFAULT_MAX_D,
    mapper: Mapper | None = None,
    shards: int | None = None,
    report=None,
) -> tuple[np.ndarray, np.ndarray]:
    """φ (N, D) and ζ (N,) for the pairs (Xi[n], Xj[n]); the model and reference are ``put`` once."""
    Xi, Xj = np.asarray(Xi, dtype=float), np.asarray(Xj, dtype=float)
    check_explain(ref, Xi, Xj, method, sigma, eta, k1, max_d)
    mapper = mapper or LocalMapper()
    N = len(Xi)
    shards = max(1, min(N, shards or 4 * mapper.workers))
    cuts = np.linspace(0, N, shards + 1).astype(int)
    zeta_h, ref_h = mapper.put(zeta, broadcast=True), mapper.put(ref, broadcast=True)
    options = {"sigma": sigma, "eta": eta, "k1": k1, "h": permutations, "m": measurements}
    args = [
        (zeta_h, ref_h, Xi[a:b], Xj[a:b], np.arange(a, b), method, options, seed)
        for a, b in zip(cuts[:-1], cuts[1:])
        if b > a
    ]
    parts = mapper.map(explain_shard, args, name=f"pairwise-{method}", report=report)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


EFFICIENCY_TOL = 1e-6  # the largest |Σφ − (ζ − base)| / |ζ − base| a run accepts without saying it misses


def efficiency_gap(phi: np.ndarray, zeta: np.ndarray, base: float) -> float:
    """max over pairs of |Σ_d φ_d − (ζ − base)|: rounding for ASIPair and for RAIPair's constrained recovery."""
    return float(np.max(np.abs(phi.sum(1) - (zeta - base)))) if len(phi) else 0.0


def relative_efficiency_gap(phi: np.ndarray, zeta: np.ndarray, base: float) -> float:
    """max over pairs of |Σ_d φ_d − (ζ − base)| / |ζ − base| (pairs with ζ = base count their absolute gap)."""
    if not len(phi):
        return 0.0
    gap = np.abs(phi.sum(1) - (zeta - base))
    return float(np.max(gap / np.maximum(np.abs(zeta - base), np.finfo(float).tiny)))


def permutation_rankings(
    zeta, Xi: np.ndarray, Xj: np.ndarray, seed: int, donors: int = 32, signs: np.ndarray | None = None
) -> np.ndarray:
    """The model-agnostic baseline: permutation importance on the explained pairs, per pair. Feature d's
    importance for pair n is the mean drop of ζ(x_i^n, x_j^n) when d's value in both instances is taken from
    another explained pair (each of ``donors`` seeded ones in turn): what permuting d across the pairs
    costs that pair's score (times ``signs``, as φ is for the masking curves). Returns each pair's
    features by decreasing importance, ties by index, the shape ``top_features`` gives for φ."""
    N, D = Xi.shape
    pick = np.random.default_rng([seed, 5_000_011]).choice(N, size=min(N, donors), replace=False)
    z = zeta(Xi, Xj)
    drop = np.empty((N, D))
    for d in range(D):
        Ai = np.repeat(Xi, len(pick), axis=0)
        Aj = np.repeat(Xj, len(pick), axis=0)
        Ai[:, d], Aj[:, d] = np.tile(Xi[pick, d], N), np.tile(Xj[pick, d], N)
        drop[:, d] = z - zeta(Ai, Aj).reshape(N, len(pick)).mean(1)
    if signs is not None:
        drop *= np.asarray(signs)[:, None]
    return np.argsort(-drop, axis=1, kind="stable")


def top_features(phi: np.ndarray) -> np.ndarray:
    """Each pair's features by decreasing φ (the most support for the pair's score first), ties by index."""
    return np.argsort(-phi, axis=1, kind="stable")


def masked_count(p: float, D: int) -> int:
    """Features masked at share p: ⌈p·D⌉ (at least one for any p > 0)."""
    return min(D, max(1, math.ceil(p * D - 1e-9)))


def masking_curve(
    model, X: np.ndarray, y: np.ndarray, fill: np.ndarray, rankings: dict[str, np.ndarray], ps=MASK_P
) -> list[dict]:
    """Test AUC after replacing the top ⌈p·D⌉ features of each ranking by ``fill`` (the training mean) in
    every test instance, averaged over the rankings (one per explained pair), for each named ranking
    set: ``[{"p": p, "auc_<name>": mean, "auc_<name>_sd": sd}, ...]``."""
    D = X.shape[1]
    cache: dict[frozenset, float] = {}

    def auc_without(cols) -> float:
        key = frozenset(int(c) for c in cols)
        if key not in cache:
            Xm = X.copy()
            Xm[:, list(key)] = fill[list(key)]
            cache[key] = model.auc(Xm, y)
        return cache[key]

    curve = []
    for p in ps:
        k = masked_count(p, D)
        row = {"p": p, "masked": k}
        for name, ranks in rankings.items():
            aucs = np.array([auc_without(r[:k]) for r in ranks])
            row[f"auc_{name}"] = float(aucs.mean())
            row[f"auc_{name}_sd"] = float(aucs.std())
        curve.append(row)
    return curve


def random_rankings(N: int, D: int, seed: int) -> np.ndarray:
    """One uniformly random feature order per pair (the paper's random-masking baseline)."""
    rng = np.random.default_rng([seed, 1_000_003])
    return np.stack([rng.permutation(D) for _ in range(N)]) if N else np.empty((0, D), int)
