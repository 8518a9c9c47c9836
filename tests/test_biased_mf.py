"""Biased MF: the half-steps against dense least squares, stationarity of the original objective, the identity on
both sides (bias rows included) against brute force, its failure off stationarity, the store, and selection."""

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import random_interactions

from dxplain.errors import InputError
from dxplain.explain.representer import Preprocessed, RepresenterExplainer, balanced_factors
from dxplain.explain.targets import recommend
from dxplain.interactions import Targets
from dxplain.kernels.balance import rescaling
from dxplain.models.als.trainer import ALSMF
from dxplain.models.base import FactorModel
from dxplain.models.biased_mf import BiasedHalfSteps, BiasedMF, augment, biases, interaction_factors, kappa_of
from dxplain.models.biased_select import SELECT_MISS_TOL, select

LAM, LAM_BIAS = 3e-3, 1e-2


@pytest.fixture(scope="module")
def data():
    return random_interactions(40, 30, 0.3, seed=1)


@pytest.fixture(scope="module")
def fitted(data):
    return BiasedMF(k=4, lam=LAM, lam_bias=LAM_BIAS, miss_tol=1e-13).fit(data)


def all_pairs(d) -> Targets:
    u, i = np.meshgrid(np.arange(d.n_users), np.arange(d.n_items), indexing="ij")
    return Targets.from_pairs(u.ravel(), i.ravel())


def side_totals(tab):
    """Σ importance and the score per (user, item, side) of the written rows."""
    g = tab.group_by(["user", "item", "side"]).aggregate([("importance", "sum"), ("score", "max")])
    return g.column("importance_sum").to_numpy(), g.column("score_max").to_numpy()


def dense_ridge(F, y, ridges):
    """argmin ‖y − F x‖² + Σ ridges_c x_c² by least squares on the stacked system [F; diag(√ridges)]."""
    A = np.vstack([F, np.diag(np.sqrt(ridges))])
    return np.linalg.lstsq(A, np.concatenate([y, np.zeros(len(ridges))]), rcond=None)[0]


def test_half_steps_equal_dense_least_squares_in_the_original_parameters(data):
    """A user's half-step minimises Σ (y − μ − b_u − c_i − ⟨U_u,V_i⟩)² + (λ|D|/2)‖U_u‖² + (λ_b|D|/2) b_u² over
    (U_u, b_u): solved densely with the bias as its own unknown, not through κ; the items' likewise."""
    k, n, mu = 3, len(data), data.rating_mean()
    kappa = kappa_of(LAM, LAM_BIAS)
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(data.n_users, k)), rng.normal(size=(data.n_items, k))
    b, c = rng.normal(size=data.n_users), rng.normal(size=data.n_items)
    Ut, Vt = augment(U, V, b, c, kappa)
    h = BiasedHalfSteps(data, mu, LAM * n / 2, kappa=kappa)
    ridges = np.r_[np.full(k, LAM * n / 2), LAM_BIAS * n / 2]
    Un = h.users(Vt)
    Vn = h.items(Ut)
    np.testing.assert_array_equal(Un[:, k + 1], kappa)
    np.testing.assert_array_equal(Vn[:, k], kappa)
    for u in range(data.n_users):
        at = data.user == u
        x = dense_ridge(
            np.column_stack([V[data.item[at]], np.ones(at.sum())]), data.rating[at] - mu - c[data.item[at]], ridges
        )
        np.testing.assert_allclose(Un[u, :k], x[:k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(kappa * Un[u, k], x[k], rtol=1e-9, atol=1e-12)
    for i in range(data.n_items):
        at = data.item == i
        x = dense_ridge(
            np.column_stack([U[data.user[at]], np.ones(at.sum())]), data.rating[at] - mu - b[data.user[at]], ridges
        )
        np.testing.assert_allclose(Vn[i, :k], x[:k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(kappa * Vn[i, k + 1], x[k], rtol=1e-9, atol=1e-12)


def test_trained_model_is_stationary_for_the_original_objective(data, fitted):
    """∂f/∂U, ∂f/∂V, ∂f/∂b, ∂f/∂c of the un-augmented objective vanish at the trained (U, V, b, c)."""
    U, V = interaction_factors(fitted)
    b, c = biases(fitted)
    n, u, i = len(data), data.user, data.item
    r = data.rating - fitted.mu - b[u] - c[i] - np.einsum("nk,nk->n", U[u], V[i])
    R = data.by_user(r)
    scale = np.abs(r).max()
    np.testing.assert_allclose(-(2 / n) * (R @ V) + LAM * U, 0, atol=1e-12 * scale)
    np.testing.assert_allclose(-(2 / n) * (R.T @ U) + LAM * V, 0, atol=1e-12 * scale)
    np.testing.assert_allclose(-(2 / n) * np.bincount(u, r, data.n_users) + LAM_BIAS * b, 0, atol=1e-12 * scale)
    np.testing.assert_allclose(-(2 / n) * np.bincount(i, r, data.n_items) + LAM_BIAS * c, 0, atol=1e-12 * scale)
    assert fitted.kind == "biased-mf" and fitted.lam == LAM and fitted.settings["lam_bias"] == LAM_BIAS
    assert fitted.U.shape == (data.n_users, 6) and max(fitted.info["miss_bound"].values()) <= 1e-13


def test_predictions_are_mu_plus_biases_plus_the_factor_product(data, fitted):
    U, V = interaction_factors(fitted)
    b, c = biases(fitted)
    u, i = np.divmod(np.arange(data.n_users * data.n_items), data.n_items)
    expected = fitted.mu + b[u] + c[i] + np.einsum("nk,nk->n", U[u], V[i])
    np.testing.assert_allclose(fitted.predict(u, i), expected, rtol=1e-14, atol=1e-13)
    assert np.abs(b).max() > 1e-2 and np.abs(c).max() > 1e-2  # the biases carry signal here
    Ut, Vt = augment(U, V, b, c, fitted.settings["kappa"])
    np.testing.assert_allclose(Ut, fitted.U, rtol=1e-15)
    np.testing.assert_allclose(Vt, fitted.V, rtol=1e-15)


def brute_force_rows(d, m, t):
    """Every attribution of every target by its formula: {(target, side, train position or −1): importance}."""
    U, V = interaction_factors(m)
    b, c = biases(m)
    kappa_sq = m.settings["kappa"] ** 2
    s = m.predict(d.user, d.item) - m.mu
    alpha = 2 * (d.rating - m.mu - s) / (m.lam * len(d))
    out = {}
    for n_t, (u, j) in enumerate(zip(t.user, t.item)):
        for p in np.flatnonzero(d.user == u):
            out[(n_t, "item", p)] = alpha[p] * (V[d.item[p]] @ V[j] + kappa_sq)
        for p in np.flatnonzero(d.item == j):
            out[(n_t, "user", p)] = alpha[p] * (U[d.user[p]] @ U[u] + kappa_sq)
        out[(n_t, "item", -1)], out[(n_t, "user", -1)] = c[j], b[u]
    return out


def test_rows_equal_the_brute_force_attributions_and_each_side_sums_to_the_score(data, fitted):
    rng = np.random.default_rng(3)
    t = Targets.from_pairs(rng.integers(0, data.n_users, 25), rng.integers(0, data.n_items, 25))
    tab = RepresenterExplainer.of(fitted, data).explain(t, top_k=0).to_pandas()
    ref = brute_force_rows(data, fitted, t)
    pos = {(u, i): p for p, (u, i) in enumerate(zip(data.user, data.item))}
    uid = {str(x): n for n, x in enumerate(data.user_ids.to_pylist())}
    iid = {str(x): n for n, x in enumerate(data.item_ids.to_pylist())}
    seen = {}
    for n_t in range(len(t)):  # targets may repeat a pair: compare by pair
        key_rows = tab[
            (tab.user == data.user_ids[t.user[n_t]].as_py()) & (tab.item == data.item_ids[t.item[n_t]].as_py())
        ]
        for row in key_rows.itertuples():
            p = -1 if row.kind == "bias" else pos[(uid[row.train_user], iid[row.train_item])]
            seen[(n_t, row.side, p)] = row.importance
    assert set(seen) == set(ref)
    np.testing.assert_allclose([seen[x] for x in ref], [ref[x] for x in ref], rtol=1e-10, atol=1e-14)
    total, score = side_totals(RepresenterExplainer.of(fitted, data).explain(all_pairs(data), top_k=0))
    assert np.max(np.abs(total - score) / np.abs(score)) <= 1e-6


def test_bias_rows_hold_kappa_times_the_bias_column(data, fitted):
    t = all_pairs(data)
    tab = RepresenterExplainer.of(fitted, data).explain(t, top_k=3)
    bias = tab.filter(pc.equal(tab.column("kind").cast("string"), "bias")).to_pandas()
    assert len(bias) == 2 * len(t)  # one per target and side, whatever top_k
    kappa, k = fitted.settings["kappa"], fitted.settings["rank"]
    uid = {str(x): n for n, x in enumerate(data.user_ids.to_pylist())}
    iid = {str(x): n for n, x in enumerate(data.item_ids.to_pylist())}
    item_side, user_side = bias[bias.side == "item"], bias[bias.side == "user"]
    assert item_side.train_user.isna().all() and (item_side.train_item == item_side.item).all()
    assert user_side.train_item.isna().all() and (user_side.train_user == user_side.user).all()
    np.testing.assert_allclose(
        item_side.importance, kappa * fitted.V[[iid[x] for x in item_side.item], k + 1], rtol=1e-14
    )
    np.testing.assert_allclose(user_side.importance, kappa * fitted.U[[uid[x] for x in user_side.user], k], rtol=1e-14)
    np.testing.assert_allclose(bias.local_importance, kappa**2)


def test_side_sums_equal_the_rows_and_the_identity_fails_off_stationarity(data, fitted):
    t = all_pairs(data)
    for m, stationary in (
        (fitted, True),
        (BiasedMF(k=4, lam=LAM, lam_bias=LAM_BIAS, max_sweeps=2, newton_steps=0).fit(data), False),
    ):
        e = RepresenterExplainer.of(m, data)
        item_sum, user_sum = e.side_sums(t)
        total, score = side_totals(e.explain(t, top_k=0))  # grouped by (user, item, side): item rows first per pair
        np.testing.assert_allclose(np.sort(total), np.sort(np.concatenate([item_sum, user_sum])), rtol=1e-9, atol=1e-12)
        worst = max(e.fidelity(t)[side]["max_rel_error"] for side in ("item", "user"))
        assert (worst <= 1e-6) == stationary, worst
    assert worst > 1e-3  # the two-sweep model misses by far more than rounding


def test_newton_polish_keeps_the_fixed_columns_and_reaches_the_bound(data):
    """Plain sweeps cut short hand over to the Newton polish, whose steps are projected onto the free coordinates."""
    m = BiasedMF(k=4, lam=LAM, lam_bias=LAM_BIAS, anderson=0, max_sweeps=3, miss_tol=1e-11).fit(data)
    assert m.info["sweeps"] == 3 and 0 < m.info["newton_iters"] < 200
    kappa = m.settings["kappa"]
    np.testing.assert_array_equal(m.U[:, 5], kappa)
    np.testing.assert_array_equal(m.V[:, 4], kappa)
    assert max(m.info["miss_bound"].values()) <= 1e-11


def test_the_rescaling_between_sweeps_keeps_every_score_and_lowers_the_penalty(data):
    """``HalfSteps.rescaled`` on biased MF's factors: ⟨U_u, V_i⟩'s columns become balanced (UᵀU = VᵀV there), every
    score and the bias and fixed columns stay, and the penalty falls; a balanced pair is left as it is."""
    rng = np.random.default_rng(3)
    k = 4
    U, V = augment(
        rng.normal(size=(data.n_users, k)) * 3.0,
        rng.normal(size=(data.n_items, k)) * 0.2,
        rng.normal(size=data.n_users),
        rng.normal(size=data.n_items),
        kappa_of(LAM, LAM_BIAS),
    )
    hs = BiasedHalfSteps(data, 0.0, 1.0, kappa=kappa_of(LAM, LAM_BIAS))
    U2, V2 = hs.rescaled(U, V)
    np.testing.assert_allclose(U2 @ V2.T, U @ V.T, rtol=0, atol=1e-12 * np.abs(U @ V.T).max())
    np.testing.assert_array_equal(U2[:, k:], U[:, k:])
    np.testing.assert_array_equal(V2[:, k:], V[:, k:])
    np.testing.assert_allclose(U2[:, :k].T @ U2[:, :k], V2[:, :k].T @ V2[:, :k], rtol=1e-9, atol=1e-9)
    assert hs.sqnorm(U2) + hs.sqnorm(V2) < 0.5 * (hs.sqnorm(U) + hs.sqnorm(V))
    U3, V3 = hs.rescaled(U2, V2)
    np.testing.assert_allclose(U3, U2, rtol=0, atol=1e-9)
    np.testing.assert_allclose(V3, V2, rtol=0, atol=1e-9)


def test_a_rescaled_fit_stores_what_a_fresh_measure_of_its_factors_gives(data):
    """The sweeps rescale between sweeps; what the model stores (f, ‖∇f‖, the bound) is a measure of the returned
    factors themselves, whether the sweeps stop on the bound or on their budget."""
    for budget in ({"miss_tol": 1e-10}, {"max_sweeps": 7, "newton_steps": 0}):
        m = BiasedMF(k=4, lam=LAM, lam_bias=LAM_BIAS, **budget).fit(data)
        hs = BiasedHalfSteps(data, data.rating_mean(), LAM * len(data) / 2, kappa=m.settings["kappa"])
        rss, gsq, bound = hs.stationarity(np.asarray(m.U), np.asarray(m.V), LAM, bound=True)
        f = rss / len(data) + 0.5 * LAM * (hs.sqnorm(np.asarray(m.U)) + hs.sqnorm(np.asarray(m.V)))
        assert m.info["objective"] == pytest.approx(f, rel=1e-12)
        assert m.grad_norm == pytest.approx(np.sqrt(gsq), rel=1e-9)
        assert max(m.info["miss_bound"].values()) == pytest.approx(max(bound), rel=1e-9)


def test_rescaling_refuses_what_it_cannot_rescale_well():
    """``kernels.balance.rescaling``: P P⁻¹ = I and P balances the Grams; None for an empty, a near-singular or a
    non-finite Gram."""
    rng = np.random.default_rng(4)
    U, V = rng.normal(size=(30, 3)), rng.normal(size=(20, 3)) * 4.0
    P, P_inv = rescaling(U.T @ U, V.T @ V)
    np.testing.assert_allclose(P @ P_inv, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(P @ U.T @ U @ P, P_inv @ V.T @ V @ P_inv, rtol=1e-9, atol=1e-9)
    singular = np.outer(U[0], U[0])
    assert rescaling(singular, V.T @ V) is None and rescaling(U.T @ U, np.zeros((3, 3))) is None
    assert rescaling(np.full((3, 3), np.nan), V.T @ V) is None and rescaling(np.zeros((0, 0)), np.zeros((0, 0))) is None


def test_huge_bias_penalty_gives_the_plain_model(data):
    """λ_b → ∞ leaves the plain model. At k = 30 (= the items) above the optimum's rank every local minimum of
    either objective is the global one, so the two trainers' predictions can be compared."""
    plain = ALSMF(k=30, lam=3e-2, tol=1e-12).fit(data)
    m = BiasedMF(k=30, lam=3e-2, lam_bias=1e8, miss_tol=1e-12).fit(data)
    assert np.linalg.matrix_rank(plain.U, tol=1e-6) < 30
    b, c = biases(m)
    assert np.abs(b).max() < 1e-7 and np.abs(c).max() < 1e-7
    u, i = np.divmod(np.arange(data.n_users * data.n_items), data.n_items)
    np.testing.assert_allclose(m.predict(u, i), plain.predict(u, i), atol=1e-6)


def test_bias_only_model_is_the_ridge_bias_baseline(data):
    """k = 0: b_u = Σ (y − μ − c_i)/(n_u + ρ_b) and the items' likewise, at the fixed point (ρ_b = λ_b|D|/2)."""
    m = BiasedMF(k=0, lam=LAM, lam_bias=LAM_BIAS, miss_tol=1e-14).fit(data)
    b, c = biases(m)
    rho = LAM_BIAS * len(data) / 2
    y = data.rating - m.mu
    np.testing.assert_allclose(b, np.bincount(data.user, y - c[data.item]) / (data.user_degree() + rho), atol=1e-12)
    np.testing.assert_allclose(c, np.bincount(data.item, y - b[data.user]) / (data.item_degree() + rho), atol=1e-12)


def test_store_round_trip_keeps_the_settings_and_the_biases(tmp_path, data, fitted):
    fitted.save(tmp_path / "m.zarr", data)
    back = FactorModel.load(tmp_path / "m.zarr", data)
    assert back.kind == "biased-mf" and back.settings == fitted.settings
    for x, y in zip(biases(back), biases(fitted)):
        np.testing.assert_array_equal(x, y)


def test_the_explainer_uses_the_raw_factors_and_zeroes_each_sides_own_bias_column(data, fitted):
    """Scores with the raw augmented factors (no balancing); the training rows' factors lose their own bias column,
    so their inner product with a target's is the interaction kernel plus κ²."""
    pre = Preprocessed.from_model(fitted, data)
    Ut, Vt = balanced_factors(fitted)
    np.testing.assert_array_equal(Ut, fitted.U)
    np.testing.assert_array_equal(Vt, fitted.V)
    np.testing.assert_array_equal(pre.Ut, fitted.U)
    np.testing.assert_array_equal(pre.Vt, fitted.V)
    U, V = interaction_factors(fitted)
    kappa_sq = fitted.settings["kappa"] ** 2
    np.testing.assert_allclose(pre.Vh @ pre.Vt.T, V @ V.T + kappa_sq, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pre.Uh @ pre.Ut.T, U @ U.T + kappa_sq, rtol=1e-12, atol=1e-12)


def test_select_picks_the_best_validation_rmse_and_refits_on_all(data):
    trainer = BiasedMF(k=2, miss_tol=1e-10)
    m = select(data, ks=(1, 2), lams=(1e-3, 1e-2), lam_biases=(1e-2,), seed=4, trainer=trainer)
    sel = m.settings["selected"]
    assert len(sel["grid"]) == 4 and all(row["converged"] for row in sel["grid"])
    best = min(sel["grid"], key=lambda row: row["val_rmse"])
    assert (sel["k"], sel["lam"], sel["lam_bias"]) == (best["k"], best["lam"], best["lam_bias"])
    assert (m.k - 2, m.lam, m.settings["lam_bias"]) == (best["k"], best["lam"], best["lam_bias"])
    # the grid's validation RMSE is that of a fit on the other rows with the same ridge
    holdout = np.random.default_rng(4).random(len(data)) < 0.1
    part, val = data.subset(~holdout), data.subset(holdout)
    scale = len(data) / len(part)
    fit = BiasedMF(k=best["k"], lam=best["lam"] * scale, lam_bias=1e-2 * scale, miss_tol=SELECT_MISS_TOL, seed=4)
    again = fit.fit(part)
    rmse = np.sqrt(np.mean((again.predict(val.user, val.item) - val.rating) ** 2))
    assert rmse == pytest.approx(best["val_rmse"], rel=1e-12)
    assert sel["validation"]["rows"] == int(holdout.sum())


def test_select_refuses_empty_grids_and_bad_holdouts(data):
    with pytest.raises(InputError, match="lams"):
        select(data, lams=())
    with pytest.raises(InputError, match="holdout"):
        select(data, holdout=np.zeros(len(data), bool))
    with pytest.raises(InputError, match="share"):
        select(data, share=1.5)


def test_identity_on_movielens_100k_both_sides(ml100k):
    d = ml100k.interactions
    m = BiasedMF().fit(d)  # k = 32, ridges λ|D|/2 = 15 and λ_b|D|/2 = 3
    assert BiasedMF().converged(m)
    e = RepresenterExplainer.of(m, d)
    t = recommend(m.U, m.V, d, np.arange(d.n_users), 10)
    total, score = side_totals(e.explain(t, top_k=0))
    assert len(total) == 2 * len(t)
    # relative to the score, floored at 0.01 rating units: a prediction within 1e-4 of μ (one user's top-10 here) has
    # no scale of its own, and the trainer's bound is absolute (BiasedMF.miss_tol, reached to rounding)
    rel = np.abs(total - score) / np.maximum(np.abs(score), 0.01)
    assert rel.max() <= 1e-6, f"worst relative error {rel.max():.2e}"
    rng = np.random.default_rng(0)  # and pairs at random, whose scores may be small: the absolute bound holds
    r = Targets.from_pairs(rng.integers(0, d.n_users, 2000), rng.integers(0, d.n_items, 2000))
    s = e.scores(r)
    for side_sum in e.side_sums(r):
        assert np.abs(side_sum - s).max() <= 1e-8
