"""ASIPair (exact, eq. 8) and RAIPair (Algorithm 1) for one pair, on a reference (training) set.

Both use the conditional expectation of eq. 6 as the value of a coalition (``dxplain.kernels.pairwise``),
so Σ_d φ_d = ζ(x_i, x_j) − base, with base = v(∅) the mean of ζ over reference pairs (the paper writes
Σ φ = ζ, i.e. a zero base).

* ASIPair evaluates every coalition: 2^D values, whitened in batches (one padded Cholesky each), then
  φ by eq. 8. Its cost doubles with each feature, so D above ``max_d`` (default 16, at most 20) is
  refused with an error that points to RAIPair.
* RAIPair draws H random permutations. Along a permutation the coalitions are nested, so one Cholesky
  of Ω in that order whitens all D prefixes. The marginal contributions Δ^h are measured as
  b = A Δ̄ with a Bernoulli ±1/√M matrix A (M < D rows), and the deviation φ̂ = φ − φ̄·1 is recovered by
  ℓ1 minimisation (eq. 11) under ‖b − A(φ̄·1 + φ̂)‖ ≤ ε, solved by FISTA on its Lagrangian with λ set by
  bisection so that the residual meets ε. ε is the estimated noise of b: the norm of the standard
  errors of its M entries over the H permutations. φ̄ = (ζ − base)/D. The recovery is constrained to
  Σφ̂ = 0 (each FISTA step's prox is a soft threshold with an exact shift), so Σφ = ζ − base holds to
  rounding: efficiency, the property that makes the φ an explanation of this pair's score.

The reference may be a seeded sample of the training rows (``reference(..., rows=n)``): a coalition's
cost grows with the rows its neighbours are chosen from, and a sample keeps it fixed as the training set
grows. Ω and base are still computed on every row (one pass each), only the neighbours come from the sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, raise_if_nonfinite
from ..kernels import pairwise as K

MAX_D = 20  # 2^20 coalitions: the most ASIPair will ever try
DEFAULT_MAX_D = 16  # the default cap (seconds per pair on this machine's 2 cores at D = 13–16)
SIGMA, ETA, DELTA = 0.2, 0.95, 0.05
# Theorem 2's measurement error ε as a share of r (the bound on |ζ|): ε = r/√2, i.e. ε² = r²/2, so
# H = 4 ln(4M/δ). At ε = r (H = 2 ln(4M/δ), 13–15 on the UCI sets) the error may be as large as the score
# itself, and RAIPair's median relative ℓ2 error to the exact ASIPair was 0.64 on Heart and 0.42 on
# Diabetes; at r/√2 it is 0.59 and 0.37 for 1.3–1.6× the time (docs/pairwise.md).
EPS_OVER_R = 2**-0.5


@dataclass
class Reference:
    """The reference (training) instances of each side, their regularised covariances and v(∅)."""

    Ri: np.ndarray
    Rj: np.ndarray
    Omega_i: np.ndarray
    Omega_j: np.ndarray
    base: float
    full_rows: tuple[int, int] | None = None  # rows each side was sampled from (None: not sampled)
    values: tuple | None = None  # (ζ on mapped features, mapped Ri, mapped Rj) for a ζ with a feature map
    whiten: tuple | None = None  # ASIPair's per-coalition whitening, built where it is first used

    @property
    def D(self) -> int:
        return self.Ri.shape[1]


def check_features(X: np.ndarray, what: str) -> None:
    raise_if_nonfinite(
        X,
        lambda n, r, c: (
            f"{what} has {n} NaN or infinite feature values (first: row {r}, feature {c}, value "
            f"{X[r, c]}); drop or impute them before explaining"
        ),
    )


def reference(
    zeta,
    Ri: np.ndarray,
    Rj: np.ndarray | None = None,
    ridge: float = K.RIDGE,
    rows: int | None = None,
    seed: int = 0,
) -> Reference:
    """Checked reference set(s) (``Rj`` defaults to ``Ri``: one population, as in the paper). With ``rows``,
    a side with more rows keeps a seeded uniform sample of ``rows`` as its neighbour candidates; its Ω and
    the base v(∅) still come from every row."""
    Ri = np.asarray(Ri, dtype=float)
    Rj = Ri if Rj is None else np.asarray(Rj, dtype=float)
    for R, side in ((Ri, "reference data"), (Rj, "reference data (second side)")):
        if R.ndim != 2 or len(R) < 2:
            raise InputError(
                f"{side} has shape {R.shape}; give at least 2 instances as rows (K × D): the "
                "whitening needs a covariance"
            )
        check_features(R, side)
    if Ri.shape[1] != Rj.shape[1]:
        raise InputError(
            f"the two reference sets have {Ri.shape[1]} and {Rj.shape[1]} features; give the same D on both sides"
        )
    if rows is not None and rows < 2:
        raise InputError(f"--reference-rows {rows}: keep at least 2 reference rows (0 or unset keeps all)")
    Oi = K.regularised_covariance(Ri, ridge)
    Oj = Oi if Rj is Ri else K.regularised_covariance(Rj, ridge)
    base = K.base_value(zeta, Ri, Rj)
    Si = sample_rows(Ri, rows, seed, 0)
    Sj = Si if Rj is Ri else sample_rows(Rj, rows, seed, 1)
    values = None
    if hasattr(zeta, "features") and hasattr(zeta, "mapped"):
        Vi = zeta.features(Si)
        values = (zeta.mapped(), Vi, Vi if Sj is Si else zeta.features(Sj))
    return Reference(Si, Sj, Oi, Oj, base, full_rows=(len(Ri), len(Rj)), values=values)


def value_space(zeta, ref: Reference, xi: np.ndarray, xj: np.ndarray):
    """What eq. 6's composites are built from: (ζ, x_i, x_j, R_i, R_j) as given, or, for a ζ that maps each
    feature on its own (``features``, ``mapped``), the same in mapped features, the reference mapped once.
    A per-feature map commutes with taking each feature from x or from a reference row, so v(T) is the
    same; the neighbours are still chosen in the raw features."""
    if ref.values is None:
        return zeta, xi, xj, ref.Ri, ref.Rj
    model, Vi, Vj = ref.values
    return model, zeta.features(xi), zeta.features(xj), Vi, Vj


def sample_rows(R: np.ndarray, rows: int | None, seed: int, side: int) -> np.ndarray:
    """A seeded uniform sample of ``rows`` rows of R in their original order (all of R if it has no more)."""
    if rows is None or len(R) <= rows:
        return R
    keep = np.sort(np.random.default_rng([seed, 31, side]).choice(len(R), size=rows, replace=False))
    return R[keep]


def check_options(ref: Reference, sigma: float, eta: float, k1: int | None) -> None:
    """σ > 0, η ∈ (0, 1], and a fixed K₁ no larger than the reference (eq. 6 needs K₁ instances a side)."""
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise InputError(f"--sigma {sigma!r}: σ must be a number > 0 (the paper uses 0.2)")
    if not (isinstance(eta, (int, float)) and 0 < eta <= 1):
        raise InputError(f"--eta {eta!r}: η must be in (0, 1] (the share of weight mass the K₁ neighbours keep)")
    check_k1(k1, min(len(ref.Ri), len(ref.Rj)))


def check_k1(k1: int | None, n: int) -> None:
    if k1 is not None and k1 > n:
        raise InputError(
            f"--k1 {k1}: K₁ needs {k1} reference instances a side and there are only {n}; give "
            f"--k1 ≤ {n}, leave it unset (chosen by η-mass, eq. 7), or give more reference data"
        )


def check_pairs(ref: Reference, Xi: np.ndarray, Xj: np.ndarray) -> None:
    for X, side in ((Xi, "x_i"), (Xj, "x_j")):
        if X.ndim != 2 or X.shape[1] != ref.D:
            raise InputError(
                f"the pairs' {side} rows have shape {X.shape} but the reference data has D = {ref.D} "
                f"features; give pairs with the reference's {ref.D} features in its order"
            )
        check_features(X, f"the pairs' {side}")
    if len(Xi) != len(Xj):
        raise InputError(f"{len(Xi)} x_i rows but {len(Xj)} x_j rows; give one of each per pair")


def check_asipair_size(D: int, max_d: int = DEFAULT_MAX_D) -> None:
    if D > min(max_d, MAX_D):
        raise InputError(
            f"ASIPair is exact over 2^D coalitions and D = {D} is above its cap of {min(max_d, MAX_D)} "
            f"(2^{D} = {2**D:,} coalitions); use --method raipair (polynomial in D)"
            + (f", or raise --max-d up to {MAX_D}" if D <= MAX_D else "")
        )


class _Whitening:
    """Per reference side and chunk of coalitions: W_c and ‖W_c r_k‖² (pair-independent), built on first
    use where the pairs are explained (a worker) and kept for every later pair there."""

    def __init__(self, R: np.ndarray, Omega: np.ndarray):
        self.mu = R.mean(0)
        self.Rc, self.Omega, self.cache = R - self.mu, Omega, {}

    def __getstate__(self):  # ship the reference, not the cache: workers rebuild their own
        return {**self.__dict__, "cache": {}}

    def q(self, x: np.ndarray, key, masks: np.ndarray) -> np.ndarray:
        if key not in self.cache:
            W = K.coalition_whiteners(self.Omega, masks)
            size = masks.sum(1)
            self.cache[key] = (W, K.reference_norms(W, self.Rc, size), size)
        W, norms, size = self.cache[key]
        return K.whitened_q(W, norms, self.Rc, x - self.mu, size)


def asipair(
    zeta,
    xi: np.ndarray,
    xj: np.ndarray,
    ref: Reference,
    sigma: float = SIGMA,
    eta: float = ETA,
    k1: int | None = None,
    chunk: int = 128,
) -> tuple[np.ndarray, float]:
    """Exact φ (eq. 8) for one pair and ζ(x_i, x_j); v(∅) is ``ref.base``.

    Coalitions go ``chunk`` at a time: their (chunk × reference rows) passes then stay in cache rather than
    stream all 2^D − 2 coalitions through memory at once."""
    D = ref.D
    z = float(zeta(xi[None], xj[None])[0])
    v = np.empty(2**D)
    v[0], v[-1] = ref.base, z
    masks = K.coalition_masks(D)
    if ref.whiten is None:
        ref.whiten = (
            _Whitening(ref.Ri, ref.Omega_i),
            _Whitening(ref.Rj, ref.Omega_j) if ref.Rj is not ref.Ri else None,
        )
    wi, wj = ref.whiten
    wj = wj or wi
    model, vi, vj, Vi, Vj = value_space(zeta, ref, xi, xj)
    for a in range(1, 2**D - 1, chunk):  # whiten and evaluate a chunk of coalitions at a time
        c = slice(a, min(a + chunk, 2**D - 1))
        m = masks[c]
        v[c] = K.coalition_values(
            model, vi, vj, Vi, Vj, m, wi.q(xi, (D, a, chunk), m), wj.q(xj, (D, a, chunk), m), sigma, eta, k1
        )
    return K.shapley_from_values(v, D), z


def default_m(D: int, delta: float = DELTA) -> int:
    """Theorem 2's order M ≈ 2s ln(D/2s) + ln(2/δ) with sparsity s = ⌈D/10⌉ and the universal constant
    taken so that C·0.465⁻² = 1; at least 2 and at most D."""
    s = max(1, math.ceil(D / 10))
    return int(min(D, max(2, math.ceil(2 * s * math.log(max(D / (2 * s), 1.0)) + math.log(2 / delta)))))


def default_h(M: int, delta: float = DELTA, eps_over_r: float = EPS_OVER_R) -> int:
    """Theorem 2's order H ≥ (2r²/ε²) ln(4M/δ), with ε = ``eps_over_r`` · r (r bounds |ζ|)."""
    return int(math.ceil(2 / eps_over_r**2 * math.log(4 * M / delta)))


def permutation_deltas(
    zeta, xi, xj, ref: Reference, orders: np.ndarray, z: float, sigma: float, eta: float, k1: int | None
) -> np.ndarray:
    """Δ^h_d (H, D): d's marginal contribution to its predecessors in each permutation (Algorithm 1, 1–5)."""
    H, D = orders.shape
    masks, Qi, Qj = [], [], []
    for o in orders:
        prefix = np.zeros((D - 1, D), bool)
        prefix[np.arange(D - 1)[:, None] >= np.arange(D)[None]] = True  # row t: the first t + 1 of o
        m = np.zeros_like(prefix)
        m[:, o] = prefix
        masks.append(m)
        Qi.append(K.prefix_q(xi[None] - ref.Ri, ref.Omega_i, o)[:-1])
        Qj.append(K.prefix_q(xj[None] - ref.Rj, ref.Omega_j, o)[:-1])
    model, vi, vj, Vi, Vj = value_space(zeta, ref, xi, xj)
    inner = (
        K.coalition_values(
            model, vi, vj, Vi, Vj, np.concatenate(masks), np.concatenate(Qi), np.concatenate(Qj), sigma, eta, k1
        ).reshape(H, D - 1)
        if D > 1
        else np.empty((H, 0))
    )
    chain = np.concatenate([np.full((H, 1), ref.base), inner, np.full((H, 1), z)], axis=1)  # v(prefix_t), t=0..D
    delta = np.empty((H, D))
    np.put_along_axis(delta, orders, np.diff(chain, axis=1), axis=1)
    return delta


def raipair(
    zeta,
    xi: np.ndarray,
    xj: np.ndarray,
    ref: Reference,
    rng: np.random.Generator,
    H: int | None = None,
    M: int | None = None,
    sigma: float = SIGMA,
    eta: float = ETA,
    k1: int | None = None,
) -> tuple[np.ndarray, float, dict]:
    """Algorithm 1 for one pair: (φ̃ = φ̄·1 + φ̂*, ζ, diagnostics {M, H, eps, lam, phi_hat})."""
    D = ref.D
    M = default_m(D) if M is None else min(M, D)
    H = default_h(M) if H is None else H
    z = float(zeta(xi[None], xj[None])[0])
    orders = np.stack([rng.permutation(D) for _ in range(H)])
    delta = permutation_deltas(zeta, xi, xj, ref, orders, z, sigma, eta, k1)
    A = K.bernoulli_matrix(M, D, rng)
    Y = A @ delta.T  # Y[m, h] = Σ_d A_md Δ_d^h
    b = Y.mean(1)
    eps = float(np.linalg.norm(Y.std(1, ddof=1)) / math.sqrt(H)) if H > 1 else 0.0
    phi_bar = (z - ref.base) / D
    phi_hat, lam = K.l1_recovery(A, b - phi_bar * A.sum(1), eps, sum_zero=True)
    return phi_bar + phi_hat, z, {"M": M, "H": H, "eps": eps, "lam": lam, "phi_hat": phi_hat}
