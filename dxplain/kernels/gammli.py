"""GAMMLI's maths on in-memory blocks: bases, penalties, Gram blocks, constraints, group-constrained ridge.

GAMMLI (Guo et al., the paper's eq. 2) predicts

    η(u, i) = μ + Σ_a h_a(x_ua) + Σ_b h_b(z_ib) + Σ_(a,b) h_ab(x_ua, z_ib) + ⟨U_u, V_i⟩.

Here every effect is linear in a basis whose rows sum to one (a partition of unity): cubic B-splines
for a numeric feature, one-hot levels for a categorical one, row-wise Kronecker products of the two for
a user×item interaction. Fitting an effect is then penalised least squares, and its normal equations
are Gram matrices XᵀWX summed over shards of the interactions (``gram``), so no shard ever needs
another's rows. Identifiability (centring, and the interactions' orthogonality to their own main
effects) is a linear constraint Cc = 0 on the coefficients: the fit runs in the null space of C
(``null_space_of``), so it holds exactly, not approximately.

The latent part solves the paper's eq. 4 with weights w (ones in GAMMLI) and a small ridge μ (eq. 4′):

    min_{U,V} Σ_Ω w_uj (m_uj − ⟨U_u,V_j⟩)² + λ(‖U − Ũ‖² + ‖V − Ṽ‖²) + μ(‖U‖² + ‖V‖²),

where Ũ_u is the mean of U over u's cluster. ``group_moments`` and ``group_rows`` give the exact
minimiser over U for fixed V (the cluster means move with U; see ``group_rows``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.interpolate import BSpline


def bspline_basis(x: np.ndarray, lo: float, hi: float, n_basis: int, degree: int = 3) -> np.ndarray:
    """(n, n_basis) cubic B-spline design on equally spaced knots over [lo, hi]; x is clipped to the range
    (a new value beyond the training range takes the boundary's value), so every row sums to one."""
    n_inner = n_basis - degree + 1
    inner = np.linspace(lo, hi, n_inner) if hi > lo else np.linspace(lo - 0.5, lo + 0.5, n_inner)
    h = inner[1] - inner[0]
    knots = np.concatenate([inner[0] - h * np.arange(degree, 0, -1), inner, inner[-1] + h * np.arange(1, degree + 1)])
    xc = np.clip(np.asarray(x, dtype=np.float64), inner[0], inner[-1])
    return BSpline.design_matrix(xc, knots, degree, extrapolate=False).toarray()


def levels_basis(codes: np.ndarray, n_levels: int) -> np.ndarray:
    """(n, n_levels) one-hot rows; code −1 (a level unseen in training) is a zero row: no effect."""
    B = np.zeros((len(codes), n_levels))
    ok = codes >= 0
    B[np.flatnonzero(ok), codes[ok]] = 1.0
    return B


def difference_penalty(n: int, order: int = 2) -> np.ndarray:
    """DᵀD for the ``order``-th differences of n coefficients (the P-spline roughness penalty)."""
    if n <= order:
        return np.zeros((n, n))
    D = np.diff(np.eye(n), order, axis=0)
    return D.T @ D


def tensor_penalty(Pa: np.ndarray, Pb: np.ndarray) -> np.ndarray:
    """Pa ⊗ I + I ⊗ Pb: roughness along each margin of a tensor-product surface (row-major kron order)."""
    return np.kron(Pa, np.eye(len(Pb))) + np.kron(np.eye(len(Pa)), Pb)


def row_kron(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise Kronecker product: row r is kron(A_r, B_r), column (k, l) at k·B.shape[1] + l."""
    return (A[:, :, None] * B[:, None, :]).reshape(len(A), -1)


def gram(X: np.ndarray, z: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(XᵀWX, XᵀWz): one shard's share of the normal equations."""
    Xw = X if w is None else X * w[:, None]
    return Xw.T @ X, Xw.T @ z


def null_space_of(C: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis Z of {c : Cc = 0}; coefficients c = Zθ satisfy the constraints exactly."""
    if C.size == 0:
        return np.eye(C.shape[1])
    return sla.null_space(C, rcond=rtol)


def pair_constraints(G: np.ndarray, da: int, db: int) -> np.ndarray:
    """Constraints that make h_ab = t(x,z)ᵀc orthogonal (over Ω) to every function of x alone and of z alone.

    t = kron(a, b) with Σ_k a_k = Σ_l b_l = 1 on every row. Then Σ_Ω a_k(x)·t ᵀc = Σ_l (Gc)_(k,l) and
    Σ_Ω b_l(z)·tᵀc = Σ_k (Gc)_(k,l), where G = Σ_Ω t tᵀ: the marginal sums of G's rows. Orthogonality to
    the constant (centring) is implied.
    """
    G3 = G.reshape(da, db, da * db)
    return np.vstack([G3.sum(axis=1), G3.sum(axis=0)])


def penalised_solve(G: np.ndarray, b: np.ndarray, P: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """c = Z θ with θ = argmin θᵀZᵀGZθ − 2bᵀZθ + θᵀZᵀPZθ: penalised least squares in the constraint null space."""
    A = Z.T @ (G + P) @ Z
    rhs = Z.T @ b
    try:
        theta = sla.solve(A, rhs, assume_a="pos")
    except (sla.LinAlgError, ValueError):
        theta = sla.lstsq(A, rhs)[0]
    return Z @ theta


def sigmoid(eta: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * eta))  # no overflow for large |η|


def log_loss(y: np.ndarray, eta: np.ndarray) -> float:
    """Mean −[y log p + (1−y) log(1−p)] with p = σ(η), computed on the logit scale (stable)."""
    return float(np.mean(np.logaddexp(0.0, eta) - y * eta))


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula, ties given half credit."""
    from scipy.stats import rankdata

    pos = y > 0.5
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = rankdata(score)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def kmeans(X: np.ndarray, n_clusters: int, seed: int = 0, iters: int = 100) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding; returns the (n_clusters, d) centroids."""
    rng = np.random.default_rng(seed)
    n = len(X)
    C = [X[rng.integers(n)]]
    d2 = ((X - C[0]) ** 2).sum(1)
    for _ in range(1, n_clusters):
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1.0 / n)
        C.append(X[rng.choice(n, p=p)])
        d2 = np.minimum(d2, ((X - C[-1]) ** 2).sum(1))
    C = np.array(C)
    for _ in range(iters):
        g = nearest(X, C)
        C_new = np.array([X[g == k].mean(0) if np.any(g == k) else C[k] for k in range(n_clusters)])
        if np.allclose(C_new, C):
            break
        C = C_new
    return C


def nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid of each row (ties to the lower index)."""
    d2 = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None, :]
    return np.argmin(d2, axis=1)


def _row_systems(indptr, cols, m, w, F, lam):
    """A_u = Σ_j w_uj F_j F_jᵀ + λI and b_u = Σ_j w_uj m_uj F_j for every CSR row u: (n, r, r), (n, r).

    λ here is the whole diagonal, λ + μ of eq. 4′.
    """
    n, r = len(indptr) - 1, F.shape[1]
    A = np.zeros((n, r, r))
    b = np.zeros((n, r))
    full = np.flatnonzero(np.diff(indptr) > 0)
    if len(full):
        Fc = F[cols]
        wF = w[:, None] * Fc
        # Rows are contiguous (CSR): reduceat sums each row's block in one pass; empty rows are skipped.
        A[full] = np.add.reduceat(wF[:, :, None] * Fc[:, None, :], indptr[full], axis=0)
        b[full] = np.add.reduceat(m[:, None] * wF, indptr[full], axis=0)
    A += lam * np.eye(r)
    return A, b


def group_moments(indptr, cols, m, w, F, lam, mu, groups, n_groups):
    """One shard's per-cluster sums S_k = Σ_{u∈k} A_u⁻¹ and t_k = Σ_{u∈k} A_u⁻¹ b_u, and the counts n_k,
    with A_u = Σ_j w F_jF_jᵀ + (λ + μ)I.

    ``groups`` is each row's cluster. Summed over shards they give the cluster means (``group_means``).
    """
    A, b = _row_systems(indptr, cols, m, w, F, lam + mu)
    Ainv = np.linalg.inv(A)
    r = F.shape[1]
    S, t = np.zeros((n_groups, r, r)), np.zeros((n_groups, r))
    np.add.at(S, groups, Ainv)
    np.add.at(t, groups, np.einsum("nij,nj->ni", Ainv, b))
    return S, t, np.bincount(groups, minlength=n_groups)


def group_means(S, t, counts, lam) -> np.ndarray:
    """Ū_k from the stationarity of the U half-step, where U_u = A_u⁻¹(b_u + λŪ_k) and Ū_k = mean_{u∈k} U_u:

    Ū_k = (n_k I − λ S_k)⁻¹ t_k        (0 for a cluster with no rows; A_u includes μ)
    """
    r = t.shape[1]
    out = np.zeros_like(t)
    for k in np.flatnonzero(counts):
        out[k] = np.linalg.lstsq(counts[k] * np.eye(r) - lam * S[k], t[k], rcond=None)[0]
    return out


def group_rows(indptr, cols, m, w, F, lam, mu, groups, means) -> np.ndarray:
    """U_u = (Σ_j w F_jF_jᵀ + (λ+μ)I)⁻¹(Σ_j w m F_j + λŪ_{k(u)}): with ``means`` from ``group_means`` this
    is the exact minimiser over U, for fixed V, of Σ w(m − ⟨U_u,V_j⟩)² + λ‖U − Ũ‖² + μ‖U‖², even though
    Ũ = cluster means of U itself: λ‖(I−C)U‖² (C the cluster-averaging projector) has gradient 2λ(U − CU)."""
    A, b = _row_systems(indptr, cols, m, w, F, lam + mu)
    return np.linalg.solve(A, (b + lam * means[groups])[:, :, None])[:, :, 0]
