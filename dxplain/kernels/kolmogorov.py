"""Kolmogorov models (KM): the two block subproblems of IKM on in-memory arrays.

A KM writes P[user u likes item i] = θ_uᵀψ_i with θ_u on the probability simplex 𝒫 and ψ_i ∈ {0,1}^D
(Kolmogorov-model paper, eq. 2). Over the observed pairs 𝒦 the squared error splits into

* (Q₁) per user:  f(θ_u) = θ_uᵀ(Q_u + λI)θ_u − 2θ_uᵀr_u,   Q_u = Σ_{i∈𝒦_u} ψ_iψ_iᵀ, r_u = Σ ψ_i p_ui   (e.1, A.5)
* (Q₂) per item:  g(ψ_i) = ψ_iᵀS_iψ_i − 2c_iᵀψ_i,           S_i = Σ_{u∈𝒦_i} θ_uθ_uᵀ, v_i = Σ θ_u p_ui,
  c_i = v_i − (μ/2)1                                                                            (e.2, A.6)

Every function here works on a batch (leading axis = users or items), vectorised over the batch: D is
small (≤ 32) and the batch is large, so one numpy call per step beats a solver call per row.
"""

from __future__ import annotations

import numpy as np

EXHAUSTIVE_CAP = 16  # 2^16 candidate vectors per item; 2^17 doubles the time and memory again


# --- sufficient statistics (e.1, e.2) from a sparse block ------------------------------------------


def from_triu(T: np.ndarray, D: int) -> np.ndarray:
    """(n, D(D+1)/2) upper triangles → (n, D, D) symmetric matrices."""
    a, b = np.triu_indices(D)
    M = np.zeros((T.shape[0], D, D))
    M[:, a, b] = T
    M[:, b, a] = T
    return M


def block_stats(B, F: np.ndarray, budget: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
    """Q = Σ_j b_j f_j f_jᵀ and r = Σ_j b_j f_j p_j for every row of a sparse block.

    ``B`` is a scipy CSR block (rows = users and columns = items for (e.1), or the transpose for (e.2))
    holding p; ``F`` the other side's factors (Ψ or Θ). Q comes from sparse × dense products with the
    upper triangles of f_jf_jᵀ (never a users × items dense matrix), a group of triangle entries at a
    time so the dense operand stays under ``budget`` values (2M users × 136 entries would be 2 GiB).
    """
    D = F.shape[1]
    pattern = B.copy()
    pattern.data = np.ones_like(pattern.data)
    a, b = np.triu_indices(D)
    T = np.empty((B.shape[0], len(a)))
    step = max(1, budget // max(1, len(F)))
    for lo in range(0, len(a), step):
        T[:, lo : lo + step] = pattern @ (F[:, a[lo : lo + step]] * F[:, b[lo : lo + step]])
    return from_triu(T, D), np.asarray(B @ F)


# --- θ-step (Q₁): Frank–Wolfe over the simplex (Table 1) ---------------------------------------------


def theta_objective(Q: np.ndarray, r: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """f(θ) = θᵀQθ − 2θᵀr per row (Q already holds λI)."""
    return np.einsum("nd,nde,ne->n", theta, Q, theta) - 2 * np.einsum("nd,nd->n", theta, r)


def frank_wolfe(
    Q: np.ndarray,
    r: np.ndarray,
    theta0: np.ndarray,
    lam: float = 0.0,
    step: str = "pairwise",
    tol: float = 1e-12,
    max_iter: int = 5000,
) -> tuple[np.ndarray, dict]:
    """Minimise f(θ_u) = θᵀ(Q_u + λI)θ − 2θᵀr_u over the simplex for every row, from ``theta0``.

    ``step``:

    * ``simple`` — Table 1: vertex e_{j*}, j* = argmin ∇f (Prop. 2), step α_k = 2/(k+2) (Jaggi 2013); the
      iterates are not monotone, so the best one seen (including θ⁰) is returned;
    * ``exact`` — the same vertex with the exact line search of the quadratic,
      α* = clip(−∇fᵀd / (2dᵀQd), 0, 1), d = e_{j*} − θ;
    * ``pairwise`` — pairwise FW (Lacoste-Julien & Jaggi 2015) with exact line search: moves mass from the
      worst support coordinate a to j*, d = e_{j*} − e_a, α ≤ θ_a. Linear rate on this strongly convex
      problem, so it reaches the QP optimum to ~1e-12 where plain FW zig-zags at O(1/k).

    Stops a row when its FW gap ∇fᵀ(θ − e_{j*}) (an upper bound on f(θ) − f*) is ≤ ``tol``·(1 + |f|).
    Never returns a θ with a higher f than ``theta0``.
    """
    n, D = theta0.shape
    Qr = Q + lam * np.eye(D)
    theta = theta0.copy()
    f0 = theta_objective(Qr, r, theta0)
    best, fbest = theta.copy(), f0.copy()
    active = np.ones(n, bool)
    gap = np.full(n, np.inf)
    k = 0
    rows = np.arange(n)
    for k in range(max_iter):
        idx = rows[active]
        if len(idx) == 0:
            break
        th, Qa = theta[idx], Qr[idx]
        grad = 2 * (np.einsum("nde,ne->nd", Qa, th) - r[idx])
        j = np.argmin(grad, axis=1)
        gap[idx] = np.einsum("nd,nd->n", grad, th) - grad[np.arange(len(idx)), j]
        f = np.einsum("nd,nd->n", th, grad / 2 - r[idx])
        done = gap[idx] <= tol * (1 + np.abs(f))
        if step == "pairwise":
            masked = np.where(th > 0, grad, -np.inf)
            a = np.argmax(masked, axis=1)
            d = np.zeros_like(th)
            d[np.arange(len(idx)), j] += 1
            d[np.arange(len(idx)), a] -= 1
            amax = th[np.arange(len(idx)), a]
        else:
            d = -th.copy()
            d[np.arange(len(idx)), j] += 1
            amax = np.ones(len(idx))
        if step == "simple":
            alpha = np.full(len(idx), 2.0 / (k + 2))
        else:
            curv = 2 * np.einsum("nd,nde,ne->n", d, Qa, d)
            slope = np.einsum("nd,nd->n", grad, d)
            with np.errstate(divide="ignore", invalid="ignore"):
                alpha = np.where(curv > 0, -slope / curv, np.where(slope < 0, amax, 0.0))
            alpha = np.clip(alpha, 0.0, amax)
        alpha[done] = 0.0
        new = th + alpha[:, None] * d
        if step == "pairwise":
            # the vertex a left the support exactly when α = θ_a: make it an exact zero
            hit = alpha >= amax
            new[np.arange(len(idx))[hit], a[hit]] = 0.0
        np.clip(new, 0.0, None, out=new)
        new /= new.sum(axis=1, keepdims=True)
        theta[idx] = new
        if step == "simple":
            fnew = theta_objective(Qr[idx], r[idx], new)
            better = fnew < fbest[idx]
            best[idx[better]], fbest[idx[better]] = new[better], fnew[better]
        active[idx[done]] = False
    if step != "simple":
        best, fbest = theta, theta_objective(Qr, r, theta)
        worse = fbest > f0  # rounding only: a line search never raises f
        best[worse], fbest[worse] = theta0[worse], f0[worse]
    return best, {"iterations": k + 1, "max_gap": float(gap.max(initial=0.0)), "objective": fbest}


# --- ψ-step (Q₂) ------------------------------------------------------------------------------------


def psi_objective(S: np.ndarray, c: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """g(ψ) = ψᵀSψ − 2cᵀψ; ``psi`` is (n, D) or (n, M, D) candidates per row."""
    psi = psi.astype(np.float64, copy=False)
    if psi.ndim == 2:
        return np.einsum("nd,nde,ne->n", psi, S, psi) - 2 * np.einsum("nd,nd->n", psi, c)
    return np.einsum("nmd,nde,nme->nm", psi, S, psi) - 2 * np.einsum("nmd,nd->nm", psi, c)


def binary_vectors(D: int) -> np.ndarray:
    """All 2^D vectors of {0,1}^D, (2^D, D) uint8, bit d of the row number in column d."""
    return ((np.arange(1 << D)[:, None] >> np.arange(D)) & 1).astype(np.uint8)


def exhaustive_psi(S: np.ndarray, c: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """The exact minimiser of (Q₂) for every row by search over all 2^D binary vectors (D ≤ 16).

    g over every candidate and every row is one matrix product per chunk of candidates:
    g(ψ) = [triu(ψψᵀ) with off-diagonal 2] · triu(S) − 2ψᵀc. Ties go to the lowest candidate number.
    """
    n, D = c.shape
    a, b = np.triu_indices(D)
    weights = np.where(a == b, 1.0, 2.0)
    rhs = np.concatenate([S[:, a, b] * weights, -2 * c], axis=1).T  # (D(D+1)/2 + D, n)
    best = np.full(n, np.inf)
    arg = np.zeros(n, np.int64)
    for lo in range(0, 1 << D, chunk):
        cand = ((np.arange(lo, min(lo + chunk, 1 << D))[:, None] >> np.arange(D)) & 1).astype(np.float64)
        g = np.concatenate([cand[:, a] * cand[:, b], cand], axis=1) @ rhs  # (chunk, n)
        m = np.argmin(g, axis=0)
        val = g[m, np.arange(n)]
        better = val < best
        best[better], arg[better] = val[better], lo + m[better]
    psi = ((arg[:, None] >> np.arange(D)) & 1).astype(np.uint8)
    return psi, psi_objective(S, c, psi)


def sdr_matrix(S: np.ndarray, c: np.ndarray) -> np.ndarray:
    """S̃ of eq. (6): with z = 2ψ − 1 and an auxiliary sign w, g(ψ) = xᵀS̃x + const for x = [z; w]:

    S̃ = [[S/4, −t/2], [−tᵀ/2, 0]],  t = c − S1/2.
    """
    n, D = c.shape
    t = c - S.sum(axis=2) / 2
    St = np.zeros((n, D + 1, D + 1))
    St[:, :D, :D] = S / 4
    St[:, :D, D] = -t / 2
    St[:, D, :D] = -t / 2
    return St


def sdr_constant(S: np.ndarray, c: np.ndarray) -> np.ndarray:
    """g(ψ) − xᵀS̃x, the same for every ψ: 1ᵀS1/4 − cᵀ1 (so SDP value + constant bounds min g from below)."""
    return S.sum(axis=(1, 2)) / 4 - c.sum(axis=1)


# Newton decrement below which a row is near the central path: μ may shrink (Nesterov & Nemirovski's 1/4).
NEAR_PATH = 0.25
# The last centring: Newton steps at the final μ until the decrement is this small (quadratic, ~4 steps),
# so diag(μM⁻¹) ≈ 1 and rescaling it to a feasible X moves the value by far less than the gap.
CENTRED = 1e-5
CENTRING_STEPS = 6
# Below this relative tolerance M⁻¹ is too ill-conditioned for the gap to be certified (measured: asked
# 1e-8, the certified gap reached 2.3e-7 on some rows; 1e-7 holds everywhere measured).
TOL_FLOOR = 1e-8


def barrier_start(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A strictly feasible dual point y (C − Diag y ≻ 0) and the μ that puts it nearest the central path."""
    n, m, _ = C.shape
    scale = np.maximum(np.abs(C).max(axis=(1, 2)), 1e-300)
    y = np.repeat((np.linalg.eigvalsh(C)[:, 0] - scale)[:, None], m, axis=1)
    return y, m / np.trace(np.linalg.inv(C - diag_matrix(y)), axis1=1, axis2=2)


def diag_matrix(y: np.ndarray) -> np.ndarray:
    """(n, m) → (n, m, m) diagonal matrices."""
    out = np.zeros(y.shape + y.shape[-1:])
    out[:, np.arange(y.shape[1]), np.arange(y.shape[1])] = y
    return out


def barrier_sdp(
    C: np.ndarray, tol: float = 1e-7, sigma: float = 0.2, max_newton: int = 400
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Solve min tr(CX) s.t. X ⪰ 0, diag X = 1 for every row of ``C`` (n, m, m), to a certified ``tol``.

    A dual barrier method: the dual is max 1ᵀy s.t. M = C − Diag y ⪰ 0, and Newton's method on
    1ᵀy + μ·logdet M (gradient 1 − μ·diag M⁻¹, Hessian μ·M⁻¹∘M⁻¹, both m × m) follows its central path
    while μ shrinks by ``sigma`` each time a row is near it (long steps). Steps are damped by the Newton
    decrement λ (t = 1/(1+λ)), which keeps M ≻ 0 for this self-concordant barrier: no line search.

    When m·μ ≤ ``tol``/2·|1ᵀy| a row is centred once more and stops. Then X = μM⁻¹ has diag ≈ 1; its
    diagonal rescaling X̂ is primal feasible and y dual feasible, so gap = tr(CX̂) − 1ᵀy bounds the
    distance to the optimum from both sides. Unlike first-order methods (the mixing method crawls, for
    thousands of sweeps, on rows whose optimum has small nonzero eigenvalues), the Newton steps per row
    hardly vary: ~60 at tol 1e-7. Each step is a few batched LAPACK calls on m × m matrices over the rows
    still running, so a compiled twin has little left to gain.

    Returns X̂ (n, m, m), the value tr(CX̂), the certified gap and the Newton steps per row.
    """
    if tol < TOL_FLOOR:
        raise ValueError(
            f"barrier_sdp: tol={tol:g} is below what double precision certifies here "
            f"({TOL_FLOOR:g}); ask for ≥ {TOL_FLOOR:g}"
        )
    C = np.ascontiguousarray(C, np.float64)
    n, m, _ = C.shape
    y, mu = barrier_start(C)
    steps = np.zeros(n, np.int64)
    Minv = np.linalg.inv(C - diag_matrix(y))
    centring = np.full(n, -1)  # −1 while μ still shrinks, then the centring steps taken
    zero = ~np.abs(C).any(axis=(1, 2))  # every X is optimal (an item nobody rated, μ = 0): X = I
    active = np.flatnonzero(~zero)
    while len(active):
        a = active
        grad = mu[a, None] * np.einsum("nkk->nk", Minv[a]) - 1.0
        d = -np.linalg.solve(mu[a, None, None] * Minv[a] ** 2, grad[..., None])[..., 0]
        dec = np.sqrt(np.maximum(-np.einsum("nk,nk->n", grad, d), 0.0) / mu[a])
        done = (centring[a] >= 0) & ((dec <= CENTRED) | (centring[a] >= CENTRING_STEPS))
        done |= steps[a] >= max_newton
        go, dec, d = a[~done], dec[~done], d[~done]
        y[go] += np.where(dec < NEAR_PATH, 1.0, 1.0 / (1.0 + dec))[:, None] * d
        Minv[go] = np.linalg.inv(C[go] - diag_matrix(y[go]))
        steps[go] += 1
        centring[go[centring[go] >= 0]] += 1
        near = go[(dec < NEAR_PATH) & (centring[go] < 0)]
        reached = m * mu[near] <= 0.5 * tol * np.abs(y[near].sum(axis=1))
        centring[near[reached]] = 0
        mu[near[~reached]] *= sigma
        active = go
    X = mu[:, None, None] * Minv
    dg = np.sqrt(np.einsum("nkk->nk", X))
    X /= dg[:, :, None] * dg[:, None, :]
    X[zero], y[zero] = np.eye(m), 0.0
    value = np.einsum("nkl,nkl->n", C, X)
    return X, value, value - y.sum(axis=1), steps


def psd_factor(X: np.ndarray) -> np.ndarray:
    """V with VVᵀ = X for PSD (n, m, m) X (eigenvalues below 0 from rounding are cut): the rounding's vectors."""
    w, Q = np.linalg.eigh(X)
    return Q * np.sqrt(np.clip(w, 0.0, None))[:, None, :]


def round_psi(
    V: np.ndarray, S: np.ndarray, c: np.ndarray, draws: int, rng: np.random.Generator, keep: int = 1
) -> np.ndarray:
    """Table 2's randomisation: x = sign(Vg) for Gaussian g, ψ = (x_{1:D}·x_{D+1} + 1)/2; the ``keep``
    best of ``draws`` candidates per row, (n, keep, D), best first."""
    n, m, rank = V.shape
    G = rng.standard_normal((draws, rank))
    X = np.einsum("nkr,sr->nsk", V, G)
    X = np.where(X >= 0, 1, -1).astype(np.int8)
    psi = ((X[:, :, :-1] * X[:, :, -1:] + 1) // 2).astype(np.uint8)
    g = psi_objective(S, c, psi)
    top = np.argsort(g, axis=1, kind="stable")[:, :keep]
    return psi[np.arange(n)[:, None], top]


def local_search(S: np.ndarray, c: np.ndarray, psi: np.ndarray, max_passes: int = 64) -> np.ndarray:
    """Greedy search over the flips of one or two bits: apply the move that lowers g most, while one does.

    Flipping bit k changes g by Δ_k = S_kk + s_k(2(Sψ)_k − 2c_k), s_k = 1 − 2ψ_k; flipping k and l ≠ k
    by Δ_k + Δ_l + 2 s_k s_l S_kl. O(D²) per row and pass; never raises g.
    """
    psi = psi.copy()
    n, D = psi.shape
    rows = np.arange(n)
    diag = np.einsum("nkk->nk", S)
    off = ~np.eye(D, dtype=bool)
    for _ in range(max_passes):
        p = psi.astype(np.float64)
        s = 1 - 2 * p
        delta = diag + s * (2 * np.einsum("nkl,nl->nk", S, p) - 2 * c)
        pair = delta[:, :, None] + delta[:, None, :] + 2 * s[:, :, None] * s[:, None, :] * S
        pair = np.where(off, pair, delta[:, :, None] * np.eye(D))  # the diagonal holds the single flips
        flat = pair.reshape(n, D * D)
        best = np.argmin(flat, axis=1)
        gain = flat[rows, best]
        improve = gain < -1e-12 * (1 + np.abs(delta).max(axis=1))
        if not improve.any():
            break
        k, l = np.divmod(best[improve], D)
        psi[rows[improve], k] ^= 1
        two = k != l
        psi[rows[improve][two], l[two]] ^= 1
    return psi


def sdr_psi(
    S: np.ndarray,
    c: np.ndarray,
    incumbent: np.ndarray | None,
    rng: np.random.Generator,
    draws: int = 128,
    polish: int = 4,
    tol: float = 1e-7,
) -> tuple[np.ndarray, dict]:
    """The ψ-step by SDR + randomisation (Table 2): solve (6) for all rows (``barrier_sdp``, to ``tol``
    relative, certified), round from a factor of its X, keep the
    best of the rounded candidates and the ``incumbent`` (so the step never raises g).

    ``polish`` > 0 runs ``local_search`` from the ``polish`` best rounded candidates and from the incumbent (a
    local search after the randomisation: it only lowers g).

    Returns ψ (n, D) uint8 and ``{"sdp_value", "sdp_gap", "newton_steps", "rounded"}`` (the best rounded
    candidate before incumbent and polish: what the paper's error rate counts).
    """
    X, value, gap, steps = barrier_sdp(sdr_matrix(S, c), tol=tol)
    psi, rounded = psi_from_relaxation(psd_factor(X), S, c, incumbent, rng, draws, polish)
    return psi, {"sdp_value": value + sdr_constant(S, c), "sdp_gap": gap, "newton_steps": steps, "rounded": rounded}


def psi_from_relaxation(
    V: np.ndarray,
    S: np.ndarray,
    c: np.ndarray,
    incumbent: np.ndarray | None,
    rng: np.random.Generator,
    draws: int = 128,
    polish: int = 4,
) -> tuple[np.ndarray, np.ndarray]:
    """ψ from a factor V of the SDR solution X = VVᵀ (any solver's): (best ψ, best rounded candidate)."""
    cands = round_psi(V, S, c, draws, rng, keep=max(1, polish))
    rounded = cands[:, 0]
    pool = [cands[:, t] for t in range(cands.shape[1])] + ([incumbent] if incumbent is not None else [])
    if polish:
        pool = [local_search(S, c, p) for p in pool]
    psi, best = rounded, psi_objective(S, c, rounded)
    for p in pool:
        g = psi_objective(S, c, p)
        better = g < best
        psi = np.where(better[:, None], p, psi)
        best = np.minimum(best, g)
    return psi.astype(np.uint8), rounded
