"""Pairwise Shapley (ASIPair, RAIPair): oracles on tiny cases, the Shapley axioms, the kernels, bad input."""

import itertools
import math

import numpy as np
import pytest

from dxplain.errors import InputError
from dxplain.kernels import pairwise as K
from dxplain.pairwise.brute import brute_shapley
from dxplain.pairwise.explain import explain_pairs, masking_curve
from dxplain.pairwise.models import OPAUC, DotProduct, LowRank, two_classes
from dxplain.pairwise.shapley import asipair, permutation_deltas, raipair, reference


def correlated(n, D, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D)) @ (np.eye(D) + 0.5 * rng.normal(size=(D, D)))
    y = (X @ rng.normal(size=D) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y


class Linear:
    """ζ = wᵀ(a − b) without a fast expectation: the generic K₁ × K₁ path."""

    def __init__(self, w):
        self.w = np.asarray(w, float)

    def __call__(self, A, B):
        return (A - B) @ self.w


class Metric:
    def __init__(self, L):
        self.L = np.asarray(L, float)

    def __call__(self, A, B):
        U = (A - B) @ self.L
        return (U * U).sum(-1)


class Plain:
    """A model seen only as a batched callable (no feature map, no fast expectation)."""

    def __init__(self, zeta):
        self.zeta = zeta

    def __call__(self, A, B):
        return self.zeta(A, B)


def fitted(kind, X, y):
    if kind == "opauc":
        return OPAUC(seed=0).fit(X, y)
    if kind == "fisher":
        return LowRank(rank=2, shrinkage=0.1, seed=0).fit(X, y)
    return LowRank(rank=2, lam=0.01, seed=0).fit(X, y)  # the pair loss: L with two columns


@pytest.mark.parametrize("kind", ["opauc", "lowrank", "fisher"])
@pytest.mark.parametrize("D", [3, 5, 6])
def test_asipair_equals_brute_force_shapley(kind, D):
    X, y = correlated(50, D, seed=D)
    zeta = fitted(kind, X, y)
    ref = reference(zeta, X[:30])
    for i, j in [(31, 40), (45, 33)]:
        phi, z = asipair(zeta, X[i], X[j], ref)
        truth = brute_shapley(zeta, X[i], X[j], ref, 0.2, 0.95)
        np.testing.assert_allclose(phi, truth, rtol=1e-9, atol=1e-11 * max(1.0, abs(z)))


@pytest.mark.parametrize("k1", [None, 4])
def test_generic_path_equals_brute_force_and_the_fast_expectation(k1):
    X, y = correlated(40, 4, seed=1)
    fast = LowRank(rank=2, seed=1).fit(X, y)
    slow = Plain(fast)  # the same ζ seen only through __call__: raw composites, K₁ × K₁ evaluations
    ref_f, ref_s = reference(fast, X[:25]), reference(slow, X[:25])
    assert ref_f.base == pytest.approx(ref_s.base, rel=1e-12)
    phi_s, _ = asipair(slow, X[30], X[35], ref_s, sigma=0.5, eta=0.8, k1=k1)
    phi_f, _ = asipair(fast, X[30], X[35], ref_f, sigma=0.5, eta=0.8, k1=k1)
    np.testing.assert_allclose(phi_s, brute_shapley(slow, X[30], X[35], ref_s, 0.5, 0.8, k1), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(phi_f, phi_s, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["opauc", "lowrank"])
def test_efficiency_on_every_pair(kind):
    X, y = correlated(120, 8, seed=3)
    zeta = fitted(kind, X, y)
    ref = reference(zeta, X[:80])
    Xi, Xj = X[80:100], X[100:120]
    phi, z = explain_pairs(zeta, ref, Xi, Xj, "asipair")
    np.testing.assert_allclose(z, zeta(Xi, Xj), rtol=1e-13)
    assert np.max(np.abs(phi.sum(1) - (z - ref.base))) <= 1e-9


def test_symmetry_of_interchangeable_features():
    # Features 0 and 1 enter ζ alike, the reference is closed under swapping them, and the pair has equal
    # values in both: v(T ∪ {0}) = v(T ∪ {1}) for every T, so φ_0 = φ_1 (with the paper's σ and η).
    rng = np.random.default_rng(5)
    R = rng.normal(size=(20, 4))
    R = np.vstack([R, R[:, [1, 0, 2, 3]]])
    xi, xj = rng.normal(size=4), rng.normal(size=4)
    xi[1], xj[1] = xi[0], xj[0]
    for zeta in (Linear([0.7, 0.7, -1.2, 0.4]), Metric(np.array([[1.0, 0.3], [1.0, 0.3], [0.2, -1.0], [0.5, 0.5]]))):
        phi, _ = asipair(zeta, xi, xj, reference(zeta, R))
        assert phi[0] == pytest.approx(phi[1], rel=1e-10, abs=1e-12)
        assert abs(phi[0] - phi[2]) > 1e-6  # not everything equal: the test can fail


def test_dummy_feature_gets_zero():
    # A feature ζ ignores is a dummy when knowing it does not move the neighbour weights: σ → ∞ makes every
    # weight exactly 1 and η = 1 keeps every neighbour, so v(T ∪ {d}) = v(T) for all T.
    X, _ = correlated(30, 5, seed=6)
    zeta = Linear([1.0, -2.0, 0.0, 0.5, 0.3])
    ref = reference(zeta, X[:20])
    phi, z = asipair(zeta, X[22], X[27], ref, sigma=1e10, eta=1.0)
    assert abs(phi[2]) <= 1e-12 * np.abs(phi).max()  # zero up to the rounding of the sums
    assert np.all(np.abs(np.delete(phi, 2)) > 1e-6)
    np.testing.assert_allclose(phi, brute_shapley(zeta, X[22], X[27], ref, 1e10, 1.0), rtol=1e-9, atol=1e-12)
    # with the paper's σ the same feature is informative about the others, and is not a dummy
    assert abs(asipair(zeta, X[22], X[27], ref)[0][2]) > 1e-6


def test_additivity():
    X, _ = correlated(40, 5, seed=7)
    z1, z2 = Linear([1, 0, -1, 2, 0]), Metric(np.random.default_rng(0).normal(size=(5, 2)))

    def both(A, B):
        return z1(A, B) + z2(A, B)

    args = (X[30], X[35])
    phis = [asipair(z, *args, reference(z, X[:25]))[0] for z in (z1, z2, both)]
    np.testing.assert_allclose(phis[2], phis[0] + phis[1], rtol=1e-9, atol=1e-12)


def test_singular_covariance_is_regularised():
    X, y = correlated(60, 5, seed=8)
    X[:, 3] = 2.0  # constant
    X[:, 4] = X[:, 0] - X[:, 1]  # collinear
    zeta = OPAUC(seed=0).fit(X, y)
    ref = reference(zeta, X[:40])
    phi, z = asipair(zeta, X[45], X[50], ref)
    assert np.all(np.isfinite(phi)) and abs(phi.sum() - (z - ref.base)) <= 1e-9
    np.testing.assert_allclose(phi, brute_shapley(zeta, X[45], X[50], ref, 0.2, 0.95), rtol=1e-7, atol=1e-10)


def test_masked_q_and_prefix_q_equal_the_literal_whitening():
    rng = np.random.default_rng(9)
    R, x = rng.normal(size=(15, 5)), rng.normal(size=5)
    Omega = K.regularised_covariance(R)
    masks = K.coalition_masks(5)[1:]
    Q = K.masked_q(x[None] - R, Omega, masks)
    for c, m in enumerate(masks):
        T = np.flatnonzero(m)
        S = np.linalg.inv(Omega[np.ix_(T, T)])
        d = x[T] - R[:, T]
        np.testing.assert_allclose(Q[c], np.einsum("kd,de,ke->k", d, S, d) / len(T), rtol=1e-10)
    order = rng.permutation(5)
    P = K.prefix_q(x[None] - R, Omega, order)
    for t in range(1, 6):
        m = np.zeros(5, bool)
        m[order[:t]] = True
        np.testing.assert_allclose(P[t - 1], K.masked_q(x[None] - R, Omega, m[None])[0], rtol=1e-10)


@pytest.mark.parametrize("k1", [None, 7])
@pytest.mark.parametrize("k0, grow", [(64, 4), (2, 2), (1, 3)])
def test_ordered_neighbours_equal_a_full_stable_sort(k0, grow, k1):
    """Partial selections widened round by round give what sorting every row in full gives: K₁ and, for
    the first K₁ neighbours of each side, the same columns and weights (ties included)."""
    rng = np.random.default_rng(4)
    C, Ki, Kj = 60, 40, 30
    wi = np.exp(-rng.gamma(0.5, 4.0, (C, Ki)) * rng.uniform(0.01, 3, (C, 1)))  # broad and sharp rows
    wj = np.exp(-rng.gamma(0.5, 4.0, (C, Kj)) * rng.uniform(0.01, 3, (C, 1)))
    wi[::5, :6] = wi[::5, :1]  # ties at the top
    wi[1::7] = 1.0  # all equal
    fi, fj = np.argsort(-wi, 1, kind="stable"), np.argsort(-wj, 1, kind="stable")
    gi, gj = np.take_along_axis(wi, fi, 1), np.take_along_axis(wj, fj, 1)
    want = np.full(C, k1) if k1 else K.k1_by_mass(gi, gj, 0.95, wi.sum(1), wj.sum(1))
    K1, oi, ws_i, oj, ws_j = K.ordered_neighbours(wi, wj, 0.95, k1, k0=k0, grow=grow)
    assert np.array_equal(K1, want) and (K1 > 4).any() and (K1 < 30).any()
    for c in range(C):
        n = K1[c]
        assert np.array_equal(oi[c, :n], fi[c, :n]) and np.array_equal(ws_i[c, :n], gi[c, :n])
        assert np.array_equal(oj[c, :n], fj[c, :n]) and np.array_equal(ws_j[c, :n], gj[c, :n])


def test_shapley_from_values_on_a_closed_form_game():
    # v(T) = Σ_{t∈T} a_t + c·[0 ∈ T and 1 ∈ T]: φ_d = a_d, plus c/2 for features 0 and 1
    a, c, D = np.array([1.0, -2.0, 0.5, 3.0]), 1.5, 4
    masks = K.coalition_masks(D)
    v = masks @ a + c * (masks[:, 0] & masks[:, 1])
    np.testing.assert_allclose(K.shapley_from_values(v, D), a + np.array([c / 2, c / 2, 0, 0]), atol=1e-14)


def test_all_permutations_average_to_asipair():
    # RAIPair's prefix chain over every one of the D! orders is eq. 9 exactly: it must equal ASIPair.
    X, y = correlated(40, 4, seed=10)
    zeta = OPAUC(seed=0).fit(X, y)
    ref = reference(zeta, X[:30])
    orders = np.array(list(itertools.permutations(range(4))))
    z = float(zeta(X[31][None], X[36][None])[0])
    delta = permutation_deltas(zeta, X[31], X[36], ref, orders, z, 0.2, 0.95, None)
    np.testing.assert_allclose(delta.mean(0), asipair(zeta, X[31], X[36], ref)[0], rtol=1e-9, atol=1e-12)


def test_fista_soft_thresholds_an_orthogonal_design():
    Q, _ = np.linalg.qr(np.random.default_rng(11).normal(size=(6, 6)))
    r, lam = np.random.default_rng(12).normal(size=6), 0.3
    u = Q.T @ r
    np.testing.assert_allclose(K.fista_lasso(Q, r, lam), np.sign(u) * np.maximum(np.abs(u) - lam, 0), atol=1e-8)


def test_l1_recovery_meets_the_noise_bound_and_finds_a_sparse_vector():
    rng = np.random.default_rng(13)
    D, M = 40, 20
    x = np.zeros(D)
    x[[3, 17]] = [2.0, -1.5]
    A = K.bernoulli_matrix(M, D, rng)
    r = A @ x + 0.01 * rng.normal(size=M)
    eps = 0.01 * math.sqrt(M) * 1.5
    xh, lam = K.l1_recovery(A, r, eps)
    assert np.linalg.norm(r - A @ xh) <= eps and lam > 0
    assert set(np.argsort(-np.abs(xh))[:2]) == {3, 17} and np.linalg.norm(xh - x) < 0.3


def test_raipair_approaches_asipair_with_enough_draws():
    X, y = correlated(80, 8, seed=14)
    zeta = OPAUC(seed=0).fit(X, y)
    ref = reference(zeta, X[:60])
    exact, _ = asipair(zeta, X[61], X[70], ref)
    errors = []
    for H in (4, 400, 4000):  # M = D: the recovery's only error is the permutations' sampling error
        approx, z, info = raipair(zeta, X[61], X[70], ref, np.random.default_rng(0), H=H, M=8)
        assert info["M"] == 8 and info["H"] == H and np.all(np.isfinite(approx))
        errors.append(np.linalg.norm(approx - exact) / np.linalg.norm(exact))
    assert errors[2] < errors[1] < errors[0] and errors[2] < 0.25


class Additive:
    """ζ(a, b) = wᵀ(a − b) without a fast expectation: with every reference row an equal neighbour (σ huge,
    η = 1) a coalition's value is wᵀ_T(x_i − x_j)_T + w_T̄ᵀ(mean R − mean R), so φ_d = w_d (x_i − x_j)_d."""

    def __init__(self, w):
        self.w = np.asarray(w, dtype=float)

    def __call__(self, A, B):
        return (A - B) @ self.w


@pytest.mark.parametrize("M", [5, 20])
def test_raipair_adds_up_and_recovers_a_closed_form(M):
    rng = np.random.default_rng(40)
    D = 20
    zeta = Additive(rng.normal(size=D))
    R = rng.normal(size=(30, D)) * np.logspace(-2, 2, D)
    ref = reference(zeta, R)
    xi, xj = rng.normal(size=D), rng.normal(size=D)
    truth = zeta.w * (xi - xj)
    phi, z, info = raipair(zeta, xi, xj, ref, np.random.default_rng(1), H=6, M=M, sigma=1e9, eta=1.0)
    # efficiency (the constrained recovery): Σφ = ζ − base to rounding, compressed (M < D) or not
    assert abs(phi.sum() - (z - ref.base)) <= 1e-12 * abs(z - ref.base)
    assert info["eps"] <= 1e-12  # every permutation's marginal contributions are the same: b is exact
    if M == D:  # A square and invertible: the recovery is the closed form
        np.testing.assert_allclose(phi, truth, rtol=1e-5, atol=1e-6 * np.abs(truth).max())


def test_the_sum_zero_soft_threshold_is_the_constrained_prox():
    # against the definition: no feasible point nearby has a smaller objective
    rng = np.random.default_rng(41)
    from dxplain.kernels.lasso import soft_threshold_sum_zero

    for t in (0.0, 0.1, 0.7, 5.0):
        g = rng.normal(size=12)
        x = soft_threshold_sum_zero(g, t)
        assert abs(x.sum()) <= 1e-14

        def obj(v):
            return 0.5 * np.sum((v - g) ** 2) + t * np.abs(v).sum()

        for _ in range(200):
            v = x + 1e-3 * rng.normal(size=12)
            v -= v.mean()
            assert obj(v) >= obj(x) - 1e-12


def test_raipair_is_reproducible_for_a_seed():
    X, y = correlated(50, 6, seed=15)
    zeta = LowRank(seed=0).fit(X, y)
    ref = reference(zeta, X[:40])
    a = raipair(zeta, X[41], X[45], ref, np.random.default_rng([3, 1]))[0]
    b = raipair(zeta, X[41], X[45], ref, np.random.default_rng([3, 1]))[0]
    assert np.array_equal(a, b)


def test_masking_the_only_informative_feature_removes_the_ranking():
    rng = np.random.default_rng(16)
    X = rng.normal(size=(200, 3))
    y = (X[:, 1] > 0).astype(int)
    zeta = Linear([0.0, 1.0, 0.0])
    zeta.auc = lambda Xm, ym: OPAUC.auc(type("W", (), {"score": lambda s, Z: Z @ zeta.w})(), Xm, ym)
    curve = masking_curve(
        zeta, X, y, X.mean(0), {"method": np.array([[1, 0, 2]]), "random": np.array([[0, 2, 1]])}, ps=(0.3,)
    )
    assert curve[0]["auc_method"] == 0.5 and curve[0]["auc_random"] == 1.0


def test_dot_product_expectation_matches_the_generic_sum():
    rng = np.random.default_rng(17)
    U, V = rng.normal(size=(12, 3)), rng.normal(size=(9, 3))
    fast = DotProduct()
    ref_f = reference(fast, U, V)
    ref_s = reference(lambda A, B: (A * B).sum(-1), U, V)
    a = asipair(fast, U[0], V[1], ref_f)[0]
    b = asipair(lambda A, B: (A * B).sum(-1), U[0], V[1], ref_s)[0]
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# --- bad input: each a named InputError ---


@pytest.fixture
def small():
    X, y = correlated(40, 4, seed=18)
    zeta = OPAUC(seed=0).fit(X, y)
    return X, y, zeta, reference(zeta, X[:30])


def test_feature_count_mismatch(small):
    X, _, zeta, ref = small
    with pytest.raises(InputError, match=r"D = 4 features"):
        explain_pairs(zeta, ref, X[30:32, :3], X[32:34, :3])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_features(small, bad):
    X, _, zeta, ref = small
    Xi = X[30:32].copy()
    Xi[1, 2] = bad
    with pytest.raises(InputError, match=r"NaN or infinite.*row 1, feature 2"):
        explain_pairs(zeta, ref, Xi, X[32:34])
    R = X[:30].copy()
    R[0, 0] = bad
    with pytest.raises(InputError, match="reference data has 1 NaN"):
        reference(zeta, R)


@pytest.mark.parametrize("eta", [0.0, -0.1, 1.01])
def test_eta_outside_unit_interval(small, eta):
    X, _, zeta, ref = small
    with pytest.raises(InputError, match=rf"--eta {eta!r}: η must be in \(0, 1\]"):
        explain_pairs(zeta, ref, X[30:31], X[31:32], eta=eta)


@pytest.mark.parametrize("sigma", [0.0, -1.0])
def test_sigma_not_positive(small, sigma):
    X, _, zeta, ref = small
    with pytest.raises(InputError, match=rf"--sigma {sigma!r}: σ must be a number > 0"):
        explain_pairs(zeta, ref, X[30:31], X[31:32], sigma=sigma)


def test_d_above_the_asipair_cap_points_to_raipair():
    X, y = correlated(40, 17, seed=19)
    zeta = Linear(np.ones(17))
    ref = reference(zeta, X[:30])
    with pytest.raises(InputError, match=r"D = 17 is above its cap of 16.*--method raipair"):
        explain_pairs(zeta, ref, X[30:31], X[31:32], "asipair")
    phi, _ = explain_pairs(zeta, ref, X[30:31], X[31:32], "raipair", permutations=2)  # RAIPair has no cap
    assert phi.shape == (1, 17)


def test_label_with_other_than_two_classes():
    X, _ = correlated(30, 3, seed=20)
    with pytest.raises(InputError, match=r"label column 'grade' has 3 classes \(0, 1, 2\); OPAUC needs exactly two"):
        OPAUC().fit(X, np.arange(30) % 3, label="grade")
    with pytest.raises(InputError, match="has 1 classes"):
        two_classes(np.zeros(5))


def test_fewer_reference_instances_than_k1_needs(small):
    X, _, zeta, ref = small
    with pytest.raises(InputError, match=r"--k1 31: K₁ needs 31 reference instances a side and there are only 30"):
        explain_pairs(zeta, ref, X[30:31], X[31:32], k1=31)
    with pytest.raises(InputError, match="at least 2 instances"):
        reference(zeta, X[:1])


def test_a_factor_model_explained_as_a_pairwise_model():
    from dxplain.models.base import FactorModel
    from dxplain.pairwise.models import factor_pairs

    rng = np.random.default_rng(21)
    m = FactorModel(U=rng.normal(size=(30, 4)), V=rng.normal(size=(25, 4)), mu=0.0, lam=None, n_train=100)
    zeta, U, V = factor_pairs(m)
    ref = reference(zeta, U, V)
    assert ref.base == pytest.approx(U.mean(0) @ V.mean(0), rel=1e-12)  # v(∅) = mean over all (user, item) pairs
    phi, z = asipair(zeta, U[3], V[7], ref)
    assert z == pytest.approx(m.predict(np.array([3]), np.array([7]))[0], rel=1e-12)
    assert abs(phi.sum() - (z - ref.base)) <= 1e-9
    np.testing.assert_allclose(
        phi, brute_shapley(lambda A, B: (A * B).sum(-1), U[3], V[7], ref, 0.2, 0.95), rtol=1e-9, atol=1e-12
    )


def test_opauc_is_the_minimiser_of_its_pairwise_objective():
    # ∇L(w) = λw − mean over (pos, neg) pairs of (1 − wᵀd) d, d = z_pos − z_neg, in standardised features
    rng = np.random.default_rng(42)
    N = rng.normal(size=(90, 6))
    y = (N @ rng.normal(size=6) + rng.normal(size=90) > 0).astype(int)
    X = N * np.logspace(-4, 5, 6) + 1e3  # badly scaled, offset
    m = OPAUC(lam=0.3).fit(X, y)
    Z = m.features(X)
    assert not m.features.logged.any()  # light tails: plain standardisation
    np.testing.assert_allclose(Z, (X - X.mean(0)) / X.std(0), atol=1e-9)
    w = m.w
    d = (Z[y == 1][:, None, :] - Z[y == 0][None, :, :]).reshape(-1, 6)
    grad = 0.3 * w - ((1 - d @ w)[:, None] * d).mean(0)
    assert np.linalg.norm(grad) <= 1e-10 * np.linalg.norm(w)
    # the scaling is folded in: the same model on rescaled features ranks identically
    s = np.logspace(3, -3, 6)
    assert OPAUC(lam=0.3).fit(X * s, y).auc(X * s, y) == pytest.approx(m.auc(X, y), abs=1e-12)


def test_opauc_chooses_lambda_by_cross_validation_and_keeps_it():
    X, y = correlated(120, 5, seed=43)
    m = OPAUC(seed=1).fit(X, y)
    assert m.lam in OPAUC.LAMBDAS
    fixed = OPAUC(lam=m.lam).fit(X, y)
    np.testing.assert_array_equal(fixed.w, m.w)


def test_auc_lower_bound_separates_chance_from_a_real_ranking():
    from dxplain.pairwise.models import auc_lower_bound

    assert auc_lower_bound(0.55, 20, 20) < 0.5 < auc_lower_bound(0.9, 20, 20) < 0.9
    assert auc_lower_bound(0.55, 2000, 2000) > 0.5  # the same AUC on many rows is above chance
    assert auc_lower_bound(0.9, 200, 200) > auc_lower_bound(0.9, 20, 20)


def test_a_sampled_reference_keeps_its_covariance_and_base_from_every_row():
    X, y = correlated(300, 4, seed=44)
    zeta = OPAUC(seed=0).fit(X, y)
    full, small = reference(zeta, X), reference(zeta, X, rows=50, seed=7)
    assert small.Ri.shape == (50, 4) and small.Rj is small.Ri and small.full_rows == (300, 300)
    assert np.array_equal(small.Omega_i, full.Omega_i) and small.base == full.base
    rows = {tuple(r) for r in X}
    assert all(tuple(r) in rows for r in small.Ri) and len({tuple(r) for r in small.Ri}) == 50
    assert np.array_equal(reference(zeta, X, rows=50, seed=7).Ri, small.Ri)
    assert not np.array_equal(reference(zeta, X, rows=50, seed=8).Ri, small.Ri)
    assert reference(zeta, X, rows=300).Ri is full.Ri or np.array_equal(reference(zeta, X, rows=300).Ri, X)
    with pytest.raises(InputError, match="--reference-rows 1"):
        reference(zeta, X, rows=1)


def test_permutation_baseline_ranks_the_feature_the_model_uses_first():
    from dxplain.pairwise.explain import permutation_rankings

    rng = np.random.default_rng(45)
    Xi, Xj = rng.normal(size=(40, 5)), rng.normal(size=(40, 5))
    w = np.array([0.2, 0.5, -0.7, 3.0, 1.1])
    order = permutation_rankings(Linear(w), Xi, Xj, seed=0, donors=40)
    # linear ζ, every pair a donor: pair n's drop for d is w_d ((x_i − x_j)_d − mean over pairs), exactly
    dev = (Xi - Xj) - (Xi - Xj).mean(0)
    np.testing.assert_array_equal(order, np.argsort(-(w * dev), axis=1, kind="stable"))
    assert order.shape == (40, 5)


def test_auc_from_ranks_is_the_mann_whitney_count_with_ties_as_half():
    from dxplain.pairwise.models import auc_scores

    rng = np.random.default_rng(46)
    s = rng.integers(0, 6, 200).astype(float)  # many ties
    y = rng.integers(0, 2, 200)
    diff = s[y == 1][:, None] - s[y == 0][None, :]
    brute = ((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size
    assert auc_scores(s, y) == pytest.approx(brute, abs=1e-14)


def test_heavy_tailed_features_go_through_a_log_that_ignores_units():
    from dxplain.pairwise.models import FeatureMap

    rng = np.random.default_rng(47)
    X = np.column_stack([rng.normal(size=500), rng.lognormal(0, 2, 500), rng.pareto(1.5, 500) * 1e4])
    fm = FeatureMap(X)
    assert fm.logged.tolist() == [False, True, True]
    Z = fm(X)
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(Z.std(0), 1, atol=1e-12)
    assert np.all(np.diff(Z[np.argsort(X[:, 2]), 2]) >= 0)  # monotone: the order of a feature is kept
    scaled = FeatureMap(X * [1e-6, 1e5, 3.0] + [7.0, -2.0, 1e6])
    np.testing.assert_allclose(scaled(X * [1e-6, 1e5, 3.0] + [7.0, -2.0, 1e6]), Z, atol=1e-6)  # offsets' rounding


@pytest.mark.parametrize("kind", ["opauc", "lowrank"])
def test_explanations_do_not_depend_on_the_features_units(kind):
    # the feature map and the relative ridge make the model, the neighbours and so φ unit-free
    X, y = correlated(90, 5, seed=48)
    s = np.array([1e-4, 1.0, 1e3, 1e6, 0.5])
    a, b = fitted(kind, X, y), fitted(kind, X * s, y)
    ref_a, ref_b = reference(a, X[:60]), reference(b, X[:60] * s)
    for i, j in [(61, 70), (75, 80)]:
        phi_a, z_a = asipair(a, X[i], X[j], ref_a)
        phi_b, z_b = asipair(b, X[i] * s, X[j] * s, ref_b)
        assert z_b == pytest.approx(z_a, rel=1e-6)
        np.testing.assert_allclose(phi_b, phi_a, rtol=1e-5, atol=1e-7 * max(1.0, abs(z_a)))


def test_lowrank_chooses_the_discriminant_with_few_rows_and_many_correlated_features_and_keeps_it():
    # the wide set's shape (benchmarks.pairwise.quality), smaller: the pair loss overfits here
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 10)) @ rng.normal(size=(10, 60)) * 0.3 + rng.normal(size=(120, 60))
    y = (X[:, :5] @ rng.normal(size=5) + rng.normal(size=120) > 0).astype(int)
    m = LowRank(rank=2, seed=2, n_pairs=2000).fit(X, y)
    assert m.fit_by == "fisher" and m.shrinkage in LowRank.SHRINKAGES and m.lam is None
    again = LowRank(rank=2, seed=2, n_pairs=2000, shrinkage=m.shrinkage).fit(X, y)
    np.testing.assert_array_equal(again.L, m.L)


def test_lowrank_chooses_lambda_among_the_pair_loss_candidates_and_keeps_it():
    class PairLossOnly(LowRank):
        SHRINKAGES = ()

    X, y = correlated(80, 4, seed=49)
    m = PairLossOnly(rank=2, seed=2, n_pairs=2000).fit(X, y)
    assert m.fit_by == "pairs" and m.lam in LowRank.LAMBDAS and m.shrinkage is None
    np.testing.assert_array_equal(LowRank(rank=2, seed=2, n_pairs=2000, lam=m.lam).fit(X, y).L, m.L)


def test_lowrank_fisher_estimator_is_the_shrunk_discriminant_direction():
    # two classes: one direction, L ∝ ((1 − ρ) S_w + ρ s̄ I)⁻¹ (μ₁ − μ₀), normalised so Lᵀ S L = 1
    X, y = correlated(120, 6, seed=50)
    rho = 0.3
    m = LowRank(rank=3, shrinkage=rho).fit(X, y)
    Z = m.features(X)
    S_w = sum(np.cov(Z[y == c].T, bias=True) * (y == c).sum() for c in (0, 1)) / len(Z)
    S = (1 - rho) * S_w + rho * np.trace(S_w) / 6 * np.eye(6)
    w = np.linalg.solve(S, Z[y == 1].mean(0) - Z[y == 0].mean(0))
    assert m.L.shape == (6, 1)
    np.testing.assert_allclose(abs(m.L[:, 0] @ w) / np.linalg.norm(w), np.linalg.norm(m.L[:, 0]), rtol=1e-9)
    np.testing.assert_allclose(m.L[:, 0] @ S @ m.L[:, 0], 1.0, rtol=1e-9)


def test_lowrank_refuses_settings_it_cannot_use():
    with pytest.raises(ValueError, match="not both"):
        LowRank(lam=0.1, shrinkage=0.5)
    for rho in (0.0, 1.5):
        with pytest.raises(ValueError, match="shrinkage"):
            LowRank(shrinkage=rho)
    with pytest.raises(ValueError, match="rank"):
        LowRank(rank=0)


def test_lowrank_fisher_estimator_keeps_one_direction_fewer_than_the_classes():
    X, y = correlated(150, 6, seed=51)
    y3 = y + (X[:, 0] > 1)  # three classes: at most two discriminant directions
    assert LowRank(rank=4, shrinkage=0.1).fit(X, y3).L.shape == (6, 2)
    assert LowRank(rank=1, shrinkage=0.1).fit(X, y3).L.shape == (6, 1)
