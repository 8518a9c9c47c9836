"""Ground truth for tiny D: eq. 4–7 written out literally for one coalition, and Shapley values as a plain
loop over all D! permutations (eq. 9). Independent of the batched kernels (no Cholesky, no padding, no
fast expectations): the tests hold ASIPair to it, and ``loop_shapley`` is the per-coalition Python loop
the vectorised ASIPair is benchmarked against.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .shapley import Reference


def _inv_sqrt(S: np.ndarray) -> np.ndarray:
    lam, U = np.linalg.eigh(S)
    return (U / np.sqrt(lam)) @ U.T


def coalition_value(zeta, xi, xj, ref: Reference, T, sigma: float, eta: float, k1: int | None = None) -> float:
    """E[ζ(x_i, x_j) | x_i^T, x_j^T] by eq. 6, literally (T a collection of feature indices)."""
    T = sorted(T)
    D = ref.D
    if not T:  # nothing known: every reference pair counts the same
        return float(np.mean([zeta(a[None], b[None])[0] for a in ref.Ri for b in ref.Rj]))
    sides = []
    for x, R, Omega in ((xi, ref.Ri, ref.Omega_i), (xj, ref.Rj, ref.Omega_j)):
        W = _inv_sqrt(Omega[np.ix_(T, T)])  # Ω_T^{-1/2}
        mu = R[:, T].mean(0)
        xt = W @ (x[T] - mu)  # eq. 4
        Q = np.array([(xt - W @ (r[T] - mu)) @ (xt - W @ (r[T] - mu)) / len(T) for r in R])  # eq. 5
        w = np.exp(-(Q - Q.min()) / (2 * sigma**2))
        order = np.argsort(-w, kind="stable")
        sides.append((R, w[order], order))
    (Ri, wi, oi), (Rj, wj, oj) = sides
    if k1 is None:
        K1 = 1
        while K1 < max(len(wi), len(wj)) and wi[:K1].sum() * wj[:K1].sum() / (wi.sum() * wj.sum()) < eta:  # eq. 7
            K1 += 1
    else:
        K1 = k1
    known = np.zeros(D, bool)
    known[T] = True
    num = den = 0.0
    for a in range(min(K1, len(wi))):
        for b in range(min(K1, len(wj))):
            A = np.where(known, xi, Ri[oi[a]])
            B = np.where(known, xj, Rj[oj[b]])
            num += wi[a] * wj[b] * zeta(A[None], B[None])[0]
            den += wi[a] * wj[b]
    return float(num / den)


def brute_shapley(zeta, xi, xj, ref: Reference, sigma: float, eta: float, k1: int | None = None) -> np.ndarray:
    """φ by eq. 9: the mean over all D! orders of each feature's marginal contribution (values memoised)."""
    D = ref.D
    cache: dict[frozenset, float] = {}

    def v(T):
        key = frozenset(T)
        if key not in cache:
            cache[key] = coalition_value(zeta, xi, xj, ref, key, sigma, eta, k1)
        return cache[key]

    phi = np.zeros(D)
    for order in itertools.permutations(range(D)):
        before: list[int] = []
        for d in order:
            phi[d] += v(before + [d]) - v(before)
            before.append(d)
    return phi / math.factorial(D)


def loop_shapley(zeta, xi, xj, ref: Reference, sigma: float, eta: float, k1: int | None = None) -> np.ndarray:
    """φ by eq. 8 with a Python loop over the 2^D coalitions, each whitened and evaluated on its own with
    the same numpy kernels as ASIPair (vectorised within a coalition, not across coalitions): the
    baseline of the vectorisation benchmark."""
    from ..kernels import pairwise as K

    D = ref.D
    masks = K.coalition_masks(D)
    v = np.empty(2**D)
    v[0], v[-1] = ref.base, zeta(xi[None], xj[None])[0]
    for t in range(1, 2**D - 1):
        m = masks[t : t + 1]
        v[t] = K.coalition_values(
            zeta,
            xi,
            xj,
            ref.Ri,
            ref.Rj,
            m,
            K.masked_q(xi[None] - ref.Ri, ref.Omega_i, m),
            K.masked_q(xj[None] - ref.Rj, ref.Omega_j, m),
            sigma,
            eta,
            k1,
        )[0]
    return K.shapley_from_values(v, D)
