"""Pairwise Shapley maths on arrays (Huai et al., AAAI 2020, "Towards Interpretation of Pairwise Learning").

The value of a coalition T ⊆ [D] for a pair (x_i, x_j) is the conditional expectation of eq. 6:

    Q_i^T(x_i, x_k) = (x_i^T − x_k^T)ᵀ Ω_T⁻¹ (x_i^T − x_k^T) / |T|          (eq. 4–5; μ_T cancels)
    w_T(x_i, x_k)   = exp(−Q_i^T / 2σ²)
    v(T) = Σ_{k'≤K₁} Σ_{k''≤K₁} p_{k'} q_{k''} ζ([x_{k'}^T̄, x_i^T], [x_{k''}^T̄, x_j^T])          (eq. 6)

with p, q the K₁ largest weights of each side, normalised, and K₁ the smallest L whose weight mass
(Σ_{≤L} w_i · Σ_{≤L} w_j) / (Σ w_i · Σ w_j) reaches η (eq. 7). ``v(∅)`` (no feature known) is the mean
of ζ over every reference pair and ``v([D]) = ζ(x_i, x_j)``.

Numerical choices, stated once:

* Ω is the reference covariance plus ``ridge`` times its diagonal (a constant feature's by
  ``max(tr Ω / D, 1)``), and Ω_T its T-block: every Ω_T is then positive definite, so a constant or
  collinear feature costs no error (a principal block of an SPD matrix is SPD), and the whitening does
  not depend on the features' units;
* weights are computed as exp(−(Q − min Q)/2σ²): dividing every weight by the largest leaves eq. 6 and
  eq. 7 unchanged and keeps the weights from underflowing to zero;
* ties in the weight order are broken by reference row (a stable sort), so K₁'s neighbours are
  deterministic.

``ζ`` is any batched callable ``zeta(A, B) -> scores`` on (n, D) arrays. If it also has
``expectation(A, p, B, q)`` (batched composites (C, K, D) and weights (C, K) → (C,)), that is used in
place of the K₁ × K₁ evaluations: a model whose score separates (OPAUC's wᵀ(a − b), a metric's
‖Lᵀ(a − b)‖²) needs only K₁ per side.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from .lasso import fista_loop

RIDGE = 1e-8


def regularised_covariance(R: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Ω = cov(R) + ridge · diag(cov) (population covariance, as the paper's μ_T, Ω_T): the ridge is
    relative per feature, so Ω's whitening is the same whatever unit each feature is in (a feature in
    10⁻⁶ beside one in 10⁶ keeps its say). A constant feature gets ridge · max(tr cov / D, 1)."""
    C = np.atleast_2d(np.cov(R, rowvar=False, bias=True))
    D = C.shape[0]
    d = np.diag(C).copy()
    d[d <= 0] = max(np.trace(C) / D, 1.0)
    return C + ridge * np.diag(d)


def coalition_masks(D: int) -> np.ndarray:
    """Every coalition as a boolean row: row t has feature d iff bit d of t is set, shape (2^D, D)."""
    t = np.arange(2**D, dtype=np.int64)
    return ((t[:, None] >> np.arange(D)) & 1).astype(bool)


def shapley_weights(D: int) -> np.ndarray:
    """w[s] = s! (D − s − 1)! / D!, the weight of a coalition of size s not holding the feature (eq. 8)."""
    return np.array([math.factorial(s) * math.factorial(D - s - 1) / math.factorial(D) for s in range(D)])


def shapley_from_values(v: np.ndarray, D: int) -> np.ndarray:
    """φ_d = Σ_{T ∌ d} w(|T|) (v(T ∪ {d}) − v(T)) (eq. 8) from v indexed by coalition bitmask."""
    t = np.arange(2**D, dtype=np.int64)
    size = np.bitwise_count(t.astype(np.uint64)).astype(np.int64)
    w = shapley_weights(D)
    phi = np.empty(D)
    for d in range(D):
        without = t[(t >> d) & 1 == 0]
        phi[d] = np.dot(w[size[without]], v[without | (1 << d)] - v[without])
    return phi


def masked_q(Delta: np.ndarray, Omega: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Q[c, k] = Δ_kᵀ Ω_T⁻¹ Δ_k / |T| restricted to each coalition T = masks[c] (non-empty), for the
    differences Δ = x − R (K, D).

    Ω_T is embedded in a D×D matrix with the identity on T̄, factored once per coalition (batched
    Cholesky), and applied to Δ zeroed on T̄: the T̄ block contributes nothing.
    """
    m = masks.astype(float)
    P = Omega[None] * m[:, :, None] * m[:, None, :] + np.eye(len(Omega))[None] * (1 - m)[:, None, :]
    Linv = np.linalg.inv(np.linalg.cholesky(P))  # (C, D, D), lower
    Z = Linv @ (m[:, :, None] * Delta.T[None])  # (C, D, K) whitened differences
    return np.einsum("cdk,cdk->ck", Z, Z) / m.sum(1)[:, None]


def coalition_whiteners(Omega: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """W_c = L_T⁻¹ embedded in D×D with zero columns off T (L_T the Cholesky factor of Ω_T), so that
    ‖W_c Δ‖² = Δ_Tᵀ Ω_T⁻¹ Δ_T for any Δ: the pair-independent half of eq. 4–5, computed once per reference."""
    m = masks.astype(float)
    P = Omega[None] * m[:, :, None] * m[:, None, :] + np.eye(len(Omega))[None] * (1 - m)[:, None, :]
    return np.linalg.inv(np.linalg.cholesky(P)) * m[:, None, :]


def whitened_q(W: np.ndarray, r_norms: np.ndarray, Rc: np.ndarray, xc: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Q[c, k] = ‖W_c(x − r_k)‖² / |T| = (‖W_c x‖² − 2 (W_cᵀW_c x)ᵀ r_k + ‖W_c r_k‖²) / |T|, with x and the
    reference rows R centred on the reference mean (so the expansion loses no precision worth the name)
    and ``r_norms[c, k] = ‖W_c r_k‖² / |T|`` precomputed: one (C, D) × (D, K) product and one pass per pair
    (these (C, K) passes are most of a pair's cost)."""
    u = W @ xc  # (C, D)
    Px = np.einsum("cde,cd->ce", W, u) * (-2.0 / size)[:, None]  # −2 W_cᵀ W_c x / |T|
    Q = Px @ Rc.T
    Q += r_norms
    Q += ((u * u).sum(1) / size)[:, None]
    return Q


def reference_norms(W: np.ndarray, Rc: np.ndarray, size: np.ndarray) -> np.ndarray:
    """‖W_c r_k‖² / |T| for every coalition c (of ``size`` features) and centred reference row k, (C, K)."""
    Z = (W.reshape(-1, W.shape[2]) @ Rc.T).reshape(W.shape[0], W.shape[1], len(Rc))
    return np.einsum("cdk,cdk->ck", Z, Z) / size[:, None]


def prefix_q(Delta: np.ndarray, Omega: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Q[t − 1, k] for the coalitions of the first t features of ``order`` (t = 1..D), with ONE Cholesky.

    The Cholesky factor of Ω[order, order] holds the factor of every leading block, and the first t
    entries of L⁻¹Δ depend only on that block, so Q_t = Σ_{s ≤ t} (L⁻¹Δ)_s² / t for all t at once.
    """
    L = np.linalg.cholesky(Omega[np.ix_(order, order)])
    Z = sla.solve_triangular(L, Delta[:, order].T, lower=True, check_finite=False)  # (D, K)
    return np.cumsum(Z * Z, axis=0) / np.arange(1, len(order) + 1)[:, None]


def neighbour_weights(Q: np.ndarray, sigma: float) -> np.ndarray:
    """w = exp(−(Q − min Q) / 2σ²) per row: eq. 5's weights divided by each row's largest (see module)."""
    w = Q - Q.min(axis=1, keepdims=True)
    w *= -1.0 / (2 * sigma * sigma)
    return np.exp(w, out=w)


def k1_by_mass(
    ws_i: np.ndarray,
    ws_j: np.ndarray,
    eta: float,
    S_i: np.ndarray | None = None,
    S_j: np.ndarray | None = None,
    complete: bool = True,
) -> np.ndarray:
    """Eq. 7: the smallest L with (Σ_{≤L} w_i)(Σ_{≤L} w_j) / (S_i S_j) ≥ η, from the leading weights in
    decreasing order (C, L_i) and (C, L_j) and the totals S (default: the rows' sums). A shorter side
    counts as complete beyond its length. With ``complete=False`` (only a prefix of the weights given)
    a row that does not reach η within it gets 0."""
    K = max(ws_i.shape[1], ws_j.shape[1])
    ci, cj = (np.pad(np.cumsum(w, axis=1), ((0, 0), (0, K - w.shape[1])), mode="edge") for w in (ws_i, ws_j))
    S_i = ci[:, -1] if S_i is None else S_i
    S_j = cj[:, -1] if S_j is None else S_j
    reached = ci * cj >= eta * (S_i * S_j)[:, None]
    if complete:
        reached[:, -1] = True  # the full sets always reach it (guards the rounding of ratio = 1)
    return np.where(reached.any(1), reached.argmax(axis=1) + 1, 0)


def leading_neighbours(w: np.ndarray, k0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The k0 largest weights of each row in decreasing order, ties by column (what a stable sort of the
    whole row would give for its first k0), their columns, and the next weight (−inf if none): an
    argpartition and a small sort instead of sorting all K."""
    C, K = w.shape
    if k0 >= K:
        o = np.argsort(-w, axis=1, kind="stable")
        return o, np.take_along_axis(w, o, 1), np.full(C, -np.inf)
    part = np.argpartition(w, K - k0 - 1, axis=1)  # the k0 largest last, the next largest before them
    top = np.sort(part[:, K - k0 :], axis=1)  # by column, so a stable sort breaks ties by column
    wt = np.take_along_axis(w, top, 1)
    o = np.argsort(-wt, axis=1, kind="stable")  # (half the time of a lexsort on (column, −w))
    return (
        np.take_along_axis(top, o, 1),
        np.take_along_axis(wt, o, 1),
        np.take_along_axis(w, part[:, K - k0 - 1 : K - k0], 1)[:, 0],
    )


def ordered_neighbours(wi: np.ndarray, wj: np.ndarray, eta: float, k1: int | None, k0: int = 64, grow: int = 4):
    """Per coalition: K₁ (eq. 7, or ``k1``) and the columns and weights of each side's neighbours in
    decreasing weight order (ties by reference row), at least K₁ of them.

    The first ``k0`` come from a partial selection. A row whose K₁ is not settled inside them (its mass
    reaches η later, or the K₁-th weight ties with the first one left out) is selected again with
    ``grow`` times the width, and so on up to a full sort: about one coalition in ten needs more than 64
    neighbours at D = 10 with 800 reference rows, and almost none needs all of them.
    """
    C, Ki = wi.shape
    Kj = wj.shape[1]
    K1 = np.zeros(C, np.int64)
    groups, todo, width = [], np.arange(C), k0
    while len(todo):
        ai, bi = wi[todo], wj[todo]
        oi, ws_i, next_i = leading_neighbours(ai, width)
        oj, ws_j, next_j = leading_neighbours(bi, width)
        full = oi.shape[1] == Ki and oj.shape[1] == Kj
        K = (
            np.full(len(todo), k1)
            if k1 is not None
            else k1_by_mass(ws_i, ws_j, eta, ai.sum(1), bi.sum(1), complete=full)
        )
        if full:
            settled = np.ones(len(todo), bool)
        else:
            rows, last = np.arange(len(todo)), np.maximum(K, 1) - 1
            settled = (K > 0) & (K <= ws_i.shape[1]) & (K <= ws_j.shape[1])
            settled &= ws_i[rows, np.minimum(last, ws_i.shape[1] - 1)] > next_i
            settled &= ws_j[rows, np.minimum(last, ws_j.shape[1] - 1)] > next_j
        K1[todo[settled]] = K[settled]
        groups.append((todo[settled], oi[settled], ws_i[settled], oj[settled], ws_j[settled]))
        todo, width = todo[~settled], width * grow
    out = []
    for side, size in ((1, Ki), (3, Kj)):
        width = min(size, max(k0, int(K1.max(initial=0))))
        O, W = np.zeros((C, width), np.int64), np.zeros((C, width))
        for g in groups:
            n = min(width, g[side].shape[1])
            O[g[0], :n], W[g[0], :n] = g[side][:, :n], g[side + 1][:, :n]
        out += [O, W]
    return K1, *out


def expectation(zeta, A: np.ndarray, p: np.ndarray, B: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Σ_a Σ_b p[c, a] q[c, b] ζ(A[c, a], B[c, b]) for each c (weights already normalised)."""
    fast = getattr(zeta, "expectation", None)
    if fast is not None:
        return fast(A, p, B, q)
    C, Ka, D = A.shape
    Kb = B.shape[1]
    s = zeta(
        np.broadcast_to(A[:, :, None, :], (C, Ka, Kb, D)).reshape(-1, D),
        np.broadcast_to(B[:, None, :, :], (C, Ka, Kb, D)).reshape(-1, D),
    ).reshape(C, Ka, Kb)
    return np.einsum("cab,ca,cb->c", s, p, q)


def coalition_values(
    zeta,
    xi: np.ndarray,
    xj: np.ndarray,
    Ri: np.ndarray,
    Rj: np.ndarray,
    masks: np.ndarray,
    Qi: np.ndarray,
    Qj: np.ndarray,
    sigma: float,
    eta: float,
    k1: int | None = None,
    budget: int = 1 << 22,
) -> np.ndarray:
    """v(T) of eq. 6 for the non-empty coalitions ``masks`` (C, D), given their distances Q (C, K).

    Coalitions are processed in chunks grouped by K₁ (so padding to a chunk's largest K₁ wastes little),
    each chunk's composites [x_k^T̄, x^T] built at once and ζ evaluated in one call. ``budget`` bounds the
    floats of a chunk's composites (K₁ × K₁ × D per coalition without a fast ``expectation``).
    """
    K1, oi, wi, oj, wj = ordered_neighbours(neighbour_weights(Qi, sigma), neighbour_weights(Qj, sigma), eta, k1)
    pair_cost = getattr(zeta, "expectation", None) is None
    v = np.empty(len(masks))
    by_k1 = np.argsort(K1, kind="stable")
    sorted_k1 = K1[by_k1]
    cost = masks.shape[1] * (sorted_k1**2 if pair_cost else 2 * sorted_k1)  # floats per coalition
    start = 0
    while start < len(by_k1):
        n = max(1, budget // int(cost[start]))
        while n > 1 and n * int(cost[min(len(cost), start + n) - 1]) > budget:  # sorted: the last is the largest
            n = max(1, budget // int(cost[min(len(cost), start + n) - 1]))
        stop = min(len(by_k1), start + n)
        # and K₁ at most doubles within a chunk, so padding at most doubles its work (K₁ spans 20–220 here)
        stop = max(start + 1, min(stop, int(np.searchsorted(sorted_k1, 2 * sorted_k1[start], side="right"))))
        c = by_k1[start:stop]
        v[c] = _chunk_values(zeta, xi, xj, Ri, Rj, masks[c], oi[c], oj[c], wi[c], wj[c], K1[c], int(K1[c].max()))
        start = stop
    return v


def _chunk_values(zeta, xi, xj, Ri, Rj, m, oi, oj, wi, wj, K1, k):
    ka, kb = min(k, Ri.shape[0]), min(k, Rj.shape[0])
    keep_a = np.arange(ka)[None] < K1[:, None]
    keep_b = np.arange(kb)[None] < K1[:, None]
    p = np.where(keep_a, wi[:, :ka], 0.0)
    q = np.where(keep_b, wj[:, :kb], 0.0)
    p /= p.sum(1, keepdims=True)
    q /= q.sum(1, keepdims=True)
    A = np.where(m[:, None, :], xi[None, None, :], Ri[oi[:, :ka]])  # [x_k'^T̄, x_i^T]
    B = np.where(m[:, None, :], xj[None, None, :], Rj[oj[:, :kb]])
    return expectation(zeta, A, p, B, q)


def base_value(zeta, Ri: np.ndarray, Rj: np.ndarray, budget: int = 1 << 22) -> float:
    """v(∅): the mean of ζ over every reference pair (all weights equal when nothing is known)."""
    Ki, D = Ri.shape
    if getattr(zeta, "expectation", None) is not None:
        return float(
            zeta.expectation(Ri[None], np.full((1, Ki), 1 / Ki), Rj[None], np.full((1, len(Rj)), 1 / len(Rj)))[0]
        )
    rows = max(1, budget // (D * len(Rj)))
    total = 0.0
    for a in range(0, Ki, rows):
        A = Ri[a : a + rows]
        total += zeta(np.repeat(A, len(Rj), axis=0), np.tile(Rj, (len(A), 1))).sum()
    return total / (Ki * len(Rj))


def bernoulli_matrix(M: int, D: int, rng: np.random.Generator) -> np.ndarray:
    """A ∈ {±1/√M}^{M×D}, each entry's sign a fair coin (Algorithm 1's measurement matrix)."""
    return np.where(rng.random((M, D)) < 0.5, -1.0, 1.0) / math.sqrt(M)


def fista_lasso(
    A: np.ndarray,
    r: np.ndarray,
    lam: float,
    x0: np.ndarray | None = None,
    iters: int = 2000,
    tol: float = 1e-10,
    sum_zero: bool = False,
) -> np.ndarray:
    """argmin_x ½‖A x − r‖² + λ‖x‖₁ (subject to Σx = 0 with ``sum_zero``) by FISTA (Beck & Teboulle 2009),
    step 1/‖A‖₂², compiled (``kernels.lasso``); stops when an iterate moves less than ``tol`` (relative)."""
    G, Atr = A.T @ A, A.T @ r  # the gradient Aᵀ(A y − r) = G y − Aᵀr in D×D
    step = 1.0 / max(np.linalg.eigvalsh(G)[-1], 1e-300)
    x = np.zeros(A.shape[1]) if x0 is None else np.asarray(x0, dtype=float)
    return fista_loop(
        np.ascontiguousarray(G), np.ascontiguousarray(Atr), step, float(lam), x, iters, tol, bool(sum_zero)
    )


def l1_recovery(
    A: np.ndarray, r: np.ndarray, eps: float, steps: int = 12, sum_zero: bool = False
) -> tuple[np.ndarray, float]:
    """Eq. 11, argmin ‖x‖₁ s.t. ‖r − A x‖₂ ≤ ε (and Σx = 0 with ``sum_zero``), through its Lagrangian
    ½‖A x − r‖² + λ‖x‖₁: λ is found by bisection (in log λ over [10⁻¹⁰, 1]·λ₀, warm-started FISTA) as the
    largest tried whose solution meets ‖r − A x‖ ≤ ε (the residual grows with λ; at λ ≥ λ₀ the solution
    is 0, λ₀ = ‖Aᵀr‖_∞, or (max − min)(Aᵀr)/2 under the constraint). Returns (x, λ)."""
    g = A.T @ r
    lam_hi = float((g.max() - g.min()) / 2 if sum_zero else np.max(np.abs(g)))
    if np.linalg.norm(r) <= eps or lam_hi == 0.0:
        return np.zeros(A.shape[1]), lam_hi
    lo, hi = math.log(lam_hi * 1e-10), math.log(lam_hi)
    best, best_lam, x = None, None, np.zeros(A.shape[1])
    for _ in range(steps):
        mid = (lo + hi) / 2
        x = fista_lasso(A, r, math.exp(mid), x0=x, iters=300, tol=1e-8, sum_zero=sum_zero)
        if np.linalg.norm(r - A @ x) <= eps:
            lo, best, best_lam = mid, x, math.exp(mid)
        else:
            hi = mid
    if best is None:  # ε below what any λ tried reaches: the smallest λ's solution
        best_lam = math.exp(lo)
        best = fista_lasso(A, r, best_lam, x0=x, sum_zero=sum_zero)
    return best, best_lam
