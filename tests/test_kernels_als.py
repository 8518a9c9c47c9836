import numpy as np
import pytest

from dxplain.kernels import als
from dxplain.models.mf import ALSMF

from conftest import random_interactions


def _pattern(d):
    return als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)


@pytest.mark.parametrize("k", [3, 12])  # degrees 1..~15: k=12 takes the Woodbury (d < k) path for most rows
def test_ridge_solve_rows_matches_per_row_solve(small, k):
    rng = np.random.default_rng(1)
    V = rng.normal(size=(small.n_items, k))
    X = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=0.7)
    deg = small.user_degree()
    assert deg.min() < k or k == 3
    for u in range(small.n_users):
        s, e = small.user_indptr[u], small.user_indptr[u + 1]
        Vd = V[small.item[s:e]]
        ref = np.linalg.solve(Vd.T @ Vd + 0.7 * np.eye(k), Vd.T @ small.rating[s:e])
        np.testing.assert_allclose(X[u], ref, rtol=1e-10, atol=1e-12)


def test_ridge_solve_rows_batches_when_block_is_small(small, monkeypatch):
    rng = np.random.default_rng(2)
    V = rng.normal(size=(small.n_items, 4))
    full = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=1.0)
    monkeypatch.setattr(als, "BLOCK_ELEMENTS", 16)  # forces one row per batch
    tiny = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=1.0)
    np.testing.assert_allclose(full, tiny, rtol=1e-12)


def test_gradient_and_hessian_match_finite_differences(small):
    rng = np.random.default_rng(3)
    P = _pattern(small)
    U, V = rng.normal(size=(small.n_users, 3)), rng.normal(size=(small.n_items, 3))
    y, lam = small.rating - small.rating.mean(), 0.05
    gU, gV = als.gradient(U, V, P, y, lam)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    h = 1e-6
    fd = (als.objective(U + h * dU, V + h * dV, P, y, lam) - als.objective(U - h * dU, V - h * dV, P, y, lam)) / (2 * h)
    assert fd == pytest.approx(np.sum(gU * dU) + np.sum(gV * dV), rel=1e-6)
    r = y - als.pair_scores(U, V, P.u, P.i)
    hU, hV = als.hessian_vector(U, V, dU, dV, P, r, lam)
    gU2, gV2 = als.gradient(U + h * dU, V + h * dV, P, y, lam)
    gU1, gV1 = als.gradient(U - h * dU, V - h * dV, P, y, lam)
    np.testing.assert_allclose(hU, (gU2 - gU1) / (2 * h), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hV, (gV2 - gV1) / (2 * h), rtol=1e-5, atol=1e-7)


def test_als_converges_on_the_gradient_norm_and_is_deterministic():
    d = random_interactions(60, 50, 0.25, seed=4)
    m1 = ALSMF(k=6, lam=2e-3, tol=1e-9, seed=7).fit(d)
    m2 = ALSMF(k=6, lam=2e-3, tol=1e-9, seed=7).fit(d)
    assert m1.grad_norm <= 1e-9
    gU, gV = als.gradient(m1.U, m1.V, _pattern(d), d.rating - m1.mu, 2e-3)
    assert np.sqrt(np.sum(gU**2) + np.sum(gV**2)) == pytest.approx(m1.grad_norm, rel=1e-6, abs=1e-12)
    np.testing.assert_array_equal(m1.U, m2.U)
    # At a stationary point of the variational nuclear-norm form, UᵀU = VᵀV.
    np.testing.assert_allclose(m1.U.T @ m1.U, m1.V.T @ m1.V, atol=1e-7)
    assert m1.mu == pytest.approx(d.rating.mean())
