"""SoftImpute: the nuclear-norm optimum, its representer identity (Cor. 4), and agreement with ALS-MF."""

import numpy as np
import pytest
from conftest import random_interactions

from dxplain.explain.representer import Preprocessed
from dxplain.models.als.trainer import ALSMF
from dxplain.models.softimpute import SoftImpute


@pytest.fixture(scope="module")
def fitted():
    d = random_interactions(30, 25, 0.35, seed=12)
    return d, SoftImpute(lam=0.05, max_rank=20, tol=1e-12).fit(d)


def test_softimpute_reaches_a_low_rank_stationary_point(fitted):
    d, m = fitted
    assert 0 < m.info["rank"] < 20
    assert m.grad_norm < 1e-8
    np.testing.assert_allclose(m.U.T @ m.U, m.V.T @ m.V, atol=1e-10)  # Ũ = U√Σ, Ṽ = V√Σ are balanced


def test_representer_identity_holds_for_the_svd_factors(fitted):
    d, m = fitted
    pre = Preprocessed.from_model(m, d)
    # Σ_k α_uk Ṽ_k = Ũ_u and Σ_i α_ij Ũ_i = Ṽ_j: every target's user side and item side sum to its score.
    np.testing.assert_allclose(pre.A, pre.Ut, atol=1e-8)
    np.testing.assert_allclose(pre.B, pre.Vt, atol=1e-8)


def test_softimpute_and_als_find_the_same_completion(fitted):
    d, m = fitted
    als = ALSMF(k=20, lam=0.05, seed=0, tol=1e-10).fit(d)
    u, i = np.meshgrid(np.arange(d.n_users), np.arange(d.n_items), indexing="ij")
    np.testing.assert_allclose(m.predict(u.ravel(), i.ravel()), als.predict(u.ravel(), i.ravel()), atol=1e-5)


def test_too_small_a_rank_is_an_error():
    d = random_interactions(30, 25, 0.35, seed=12)
    with pytest.raises(RuntimeError, match="max_rank"):
        SoftImpute(lam=1e-4, max_rank=3).fit(d)


def test_warm_start_from_the_optimum_stays_there(fitted):
    d, m = fitted
    again = SoftImpute(lam=0.05, max_rank=20, tol=1e-12).fit(d, init=m)
    assert again.info["iterations"] < m.info["iterations"]
    np.testing.assert_allclose(again.U @ again.V.T, m.U @ m.V.T, atol=1e-7)
