"""Training to the identity tolerance asked for: the gradient's bound on the identity, Anderson sweeps, and
the stopping rule that ties them (docs/methods.md §1, "How far from the identity a gradient leaves you")."""

import numpy as np
import pytest
from conftest import random_interactions

from dxplain.explain.representer import Preprocessed
from dxplain.explain.run_rows import relative_error
from dxplain.explain.targets import recommend
from dxplain.interactions import Interactions
from dxplain.kernels import als, anderson
from dxplain.kernels.balance import balance_transforms
from dxplain.models.als.trainer import ALSMF, MIN_TARGET_COS


def _data():
    """Ratings of a rank-3 model plus noise on a random pattern (160 × 120, ~18 ratings a user)."""
    d = random_interactions(160, 120, 0.15, seed=11)
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(d.n_users, 3)), rng.normal(size=(d.n_items, 3))
    y = np.clip(np.round(3 + np.einsum("nk,nk->n", A[d.user], B[d.item]) + 0.5 * rng.normal(size=len(d))), 1, 5)
    return Interactions.from_indices(d.user, d.item, y, d.user_ids, d.item_ids)


def _lam(d):
    return 10.0 / len(d)  # a ridge of 5 per solve at k = 6: every direction kept, and plain ALS crawls


def _sides(model, d, u, i):
    """(item-side sum, user-side sum, score) of the targets (u, i), as a refresh computes them."""
    pre = Preprocessed.from_model(model, d)
    return (
        als.pair_scores(pre.A, pre.Vt, u, i),
        als.pair_scores(pre.Ut, pre.B, u, i),
        als.pair_scores(pre.Ut, pre.Vt, u, i),
        pre,
    )


def _all_pairs(d):
    u, i = np.meshgrid(np.arange(d.n_users), np.arange(d.n_items), indexing="ij")
    return u.ravel().astype(np.intp), i.ravel().astype(np.intp)


def test_identity_miss_is_the_balanced_gradient_and_the_bound_is_its_row_maximum():
    """Far from the optimum (3 sweeps), each side's miss is ⟨G̃, the other factor⟩/λ with G̃ the gradient at
    the balanced factors, built here from its definition over a dense residual matrix."""
    d = _data()
    lam = _lam(d)
    m = ALSMF(k=6, lam=lam, max_sweeps=3, newton_steps=0, identity_tol=1e-12, seed=2).fit(d)
    u, i = _all_pairs(d)
    item_sum, user_sum, s, pre = _sides(m, d, u, i)
    R = np.zeros((d.n_users, d.n_items))
    R[d.user, d.item] = (d.rating - m.mu) - als.pair_scores(m.U, m.V, d.user.astype(np.intp), d.item.astype(np.intp))
    GU = -(2 / len(d)) * R @ pre.Vt + lam * pre.Ut
    GV = -(2 / len(d)) * R.T @ pre.Ut + lam * pre.Vt
    scale = np.abs(s).max()
    np.testing.assert_allclose(s - item_sum, np.einsum("nk,nk->n", GU[u], pre.Vt[i]) / lam, atol=1e-9 * scale)
    np.testing.assert_allclose(s - user_sum, np.einsum("nk,nk->n", GV[i], pre.Ut[u]) / lam, atol=1e-9 * scale)
    assert np.abs(s - item_sum).max() > 1e-4 * scale  # not converged: the check above had something to check
    P = als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)
    gU, gV = als.gradient(m.U, m.V, P, d.rating - m.mu, lam)
    eps = als.identity_bound(m.U, m.V, gU, gV, lam)
    expected = [
        np.max(np.linalg.norm(G, axis=1) / np.linalg.norm(F, axis=1)) / lam for G, F in ((GU, pre.Ut), (GV, pre.Vt))
    ]
    np.testing.assert_allclose(eps, expected, rtol=1e-8)
    assert eps == pytest.approx((m.info["identity_bound"]["item"], m.info["identity_bound"]["user"]), rel=1e-8)
    cos = np.abs(s) / (np.linalg.norm(pre.Ut[u], axis=1) * np.linalg.norm(pre.Vt[i], axis=1))
    assert np.all(relative_error(item_sum, s) * cos <= eps[0] * (1 + 1e-9))
    assert np.all(relative_error(user_sum, s) * cos <= eps[1] * (1 + 1e-9))


@pytest.mark.parametrize("tol", [1e-4, 1e-6])
def test_identity_tol_delivers_the_identity_on_every_top_10_target(tol):
    """Trained as a refresh trains for --tol (tol·MIN_TARGET_COS), every user's top-10 sums to its score
    within tol on both sides; and any pair is within the bound / cos θ."""
    d = _data()
    m = ALSMF(k=6, lam=_lam(d), identity_tol=tol * MIN_TARGET_COS, seed=2).fit(d)
    assert max(m.info["identity_bound"].values()) <= tol * MIN_TARGET_COS
    t = recommend(m.U, m.V, d, np.arange(d.n_users), 10)
    item_sum, user_sum, s, _ = _sides(m, d, t.user.astype(np.intp), t.item.astype(np.intp))
    assert relative_error(item_sum, s).max() <= tol
    assert relative_error(user_sum, s).max() <= tol


def test_cg_users_half_steps_train_to_the_identity_of_exact_ones(monkeypatch):
    """The default trainer takes the users' half-steps by warm-started CG (``ALSMF.cg_steps``): trained to --tol
    it meets the same bound and the same identity on every top-10 target as exact half-steps, at the same
    stationary point (the scores agree to the bound's order); the CG half-steps did run."""
    from dxplain.models.als.trainer import DEFAULT_CG_STEPS

    d = _data()
    calls = []
    cg_rows = als.ridge_cg_rows
    monkeypatch.setattr(als, "ridge_cg_rows", lambda *a, **kw: calls.append(a[6]) or cg_rows(*a, **kw))
    tol = 1e-6
    exact = ALSMF(k=6, lam=_lam(d), identity_tol=tol * MIN_TARGET_COS, seed=2, cg_steps=0).fit(d)
    assert calls == []
    cg = ALSMF(k=6, lam=_lam(d), identity_tol=tol * MIN_TARGET_COS, seed=2).fit(d)
    # Exact: the first sweep (a random start) and a sweep after a refused Anderson step (the accepted U is not kept).
    assert DEFAULT_CG_STEPS > 0 and 0.8 * cg.info["sweeps"] < len(calls) < cg.info["sweeps"]
    assert set(calls) == {DEFAULT_CG_STEPS}
    t = recommend(exact.U, exact.V, d, np.arange(d.n_users), 10)
    u, i = t.user.astype(np.intp), t.item.astype(np.intp)
    for m in (exact, cg):
        assert m.info["newton_iters"] == 0 and max(m.info["identity_bound"].values()) <= tol * MIN_TARGET_COS
        item_sum, user_sum, s, _ = _sides(m, d, u, i)
        assert relative_error(item_sum, s).max() <= tol and relative_error(user_sum, s).max() <= tol
    s_exact, s_cg = (als.pair_scores(m.U, m.V, u, i) for m in (exact, cg))
    np.testing.assert_allclose(s_cg, s_exact, rtol=0, atol=1e-4 * np.abs(s_exact).max())
    with pytest.raises(ValueError, match="cg_steps=-1"):
        ALSMF(k=6, cg_steps=-1).fit(d)


def test_looser_tol_trains_fewer_sweeps_and_stops_within_it():
    d = _data()
    fits = {tol: ALSMF(k=6, lam=_lam(d), identity_tol=tol, seed=2).fit(d) for tol in (1e-3, 1e-7)}
    assert fits[1e-3].info["sweeps"] < fits[1e-7].info["sweeps"]
    for tol, m in fits.items():
        assert fits[tol].info["newton_iters"] == 0  # the sweeps met the rule themselves
        assert max(m.info["identity_bound"].values()) <= tol
    assert max(fits[1e-3].info["identity_bound"].values()) > 1e-7  # the looser fit really stopped short


def test_anderson_sweeps_reach_the_gradient_tolerance_in_fewer_sweeps_than_plain_als():
    d = _data()
    fits = [
        ALSMF(k=6, lam=_lam(d), tol=1e-9, anderson=m, newton_steps=0, max_sweeps=400, seed=2).fit(d) for m in (0, 10)
    ]
    plain, accelerated = fits
    assert accelerated.grad_norm <= 1e-9
    assert plain.grad_norm > 1e-6  # plain ALS stalled (STALL_SWEEPS sweeps without halving ‖∇f‖) far above it


def test_anderson_step_solves_a_linear_fixed_point_in_dimension_plus_one_steps():
    """For x ← Ax + b Anderson with full memory is GMRES in disguise: exact after n + 1 steps."""
    rng = np.random.default_rng(0)
    n = 6
    Q = np.linalg.qr(rng.normal(size=(n, n)))[0]
    A = Q @ np.diag(np.linspace(0.5, 0.99, n)) @ Q.T  # contraction; plain iteration gains ≤ 50% a step
    b = rng.normal(size=n)
    fixed = np.linalg.solve(np.eye(n) - A, b)
    for dtype, rtol in ((np.float64, 1e-7), (np.float32, 1e-5)):  # float32: the history as training stores it
        x, accel = np.zeros(n), anderson.Anderson(n, dtype)
        for _ in range(n + 2):
            g = A @ x + b
            accel.push(g, x)
            x = accel.extrapolate()
        np.testing.assert_allclose(x, fixed, rtol=rtol)
    plain = np.zeros(n)
    for _ in range(n + 2):
        plain = A @ plain + b
    assert np.linalg.norm(plain - fixed) > 1e-2 * np.linalg.norm(fixed)


def test_anderson_vector_operations_equal_numpy_in_any_layout():
    """The compiled dot and combination against numpy, float32 history against float64 vectors, the image in C or
    Fortran order (a Fortran-ordered copy's flat view would be a copy, and the combination lost); lengths that
    differ are refused rather than read past."""
    rng = np.random.default_rng(2)
    g = rng.normal(size=(7, 3))
    items = [rng.normal(size=(7, 3)).astype(np.float32) for _ in range(4)]
    gamma = rng.normal(size=4)
    want = g - sum(c * d.astype(np.float64) for c, d in zip(gamma, items))
    for image in (g, np.asfortranarray(g)):
        np.testing.assert_allclose(anderson.combine(image, gamma, items), want, rtol=1e-12)
    np.testing.assert_allclose(anderson.dots(g, items), [np.vdot(d.astype(np.float64), g) for d in items], rtol=1e-12)
    with pytest.raises(ValueError, match="21 and 20"):
        anderson.dot(g, np.zeros(20))


def test_fused_pattern_scores_equal_the_numpy_reference():
    d = random_interactions(50, 40, 0.2, seed=5)
    rng = np.random.default_rng(5)
    U, V = rng.normal(size=(d.n_users, 7)), rng.normal(size=(d.n_items, 7))
    P = als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)
    np.testing.assert_allclose(
        als.pattern_scores(U, V, P, fused=True), als.pattern_scores(U, V, P, fused=False), rtol=1e-12, atol=1e-12
    )


def test_balanced_transforms_used_by_the_bound_keep_the_scores():
    """The shortcut G̃ = g T + λF(T_own − T_other) needs ŨṼᵀ = UVᵀ; a rank-deficient U keeps it too."""
    rng = np.random.default_rng(4)
    U, V = rng.normal(size=(30, 5)), rng.normal(size=(20, 5))
    U[:, 4] = U[:, 0]  # rank 4
    T_U, T_V = balance_transforms(U, V)
    np.testing.assert_allclose((U @ T_U) @ (V @ T_V).T, U @ V.T, atol=1e-10)


def test_anderson_history_in_files_gives_the_same_fit_and_leaves_no_file(tmp_path):
    """The refresh keeps the Anderson history in files (``io.spill.SpillList``): the same sweeps, the same
    factors to the bit, and nothing left once the fit returns."""
    from functools import partial

    from dxplain.io.spill import SpillList

    d = random_interactions(60, 45, 0.3, seed=7)
    kw = dict(k=6, lam=_lam(d), tol=1e-9, newton_steps=0, max_sweeps=60, seed=2)
    in_memory = ALSMF(**kw).fit(d)
    in_files = ALSMF(**kw, anderson_store=partial(SpillList, tmp_path)).fit(d)
    assert in_files.info["sweeps"] == in_memory.info["sweeps"] > 10
    np.testing.assert_array_equal(in_files.U, in_memory.U)
    np.testing.assert_array_equal(in_files.V, in_memory.V)
    assert list(tmp_path.iterdir()) == []


def test_spill_list_keeps_arrays_in_order_and_deletes_what_it_drops(tmp_path):
    from dxplain.io.spill import SpillList

    s = SpillList(tmp_path)
    arrays = [np.arange(5, dtype=np.float32) * k for k in range(4)]
    for a in arrays:
        s.append(a)
    s.pop(0)
    assert len(s) == 3 and len(list(s.root.glob("*.npy"))) == 3
    for got, want in zip(s, arrays[1:]):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float32
    s.close()
    assert not s.root.exists()


def test_the_last_sweep_of_a_budget_is_plain_so_a_capped_fit_ends_accepted(caplog):
    """The accepted U is dropped while a trial is computed (memory), so the budget's last sweep is plain:
    capped where a combination would have been refused, the fit still ends on an accepted point, V exact
    given U, f no higher than a sweep before, in the budget's sweeps."""
    import logging

    from dxplain.models.als.half_steps import LocalHalfSteps

    d = random_interactions(60, 45, 0.3, seed=0)
    kw = dict(k=6, lam=2 * 15 / len(d) / 10, tol=1e-10, newton_steps=0, seed=0)
    with caplog.at_level(logging.DEBUG, logger="dxplain.models.als.trainer"):
        ALSMF(**kw, max_sweeps=40).fit(d)
    refused = [int(r.getMessage().split()[2].rstrip(":")) for r in caplog.records if "raised f" in r.getMessage()]
    assert refused, "no combination was refused: the test needs one"
    last = refused[0]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="dxplain.models.als.trainer"):
        before = ALSMF(**kw, max_sweeps=last - 1).fit(d)
        capped = ALSMF(**kw, max_sweeps=last).fit(d)
    assert not any("raised f" in r.getMessage() for r in caplog.records)
    assert capped.info["sweeps"] == last
    half = LocalHalfSteps(d, d.rating_mean(), capped.lam * len(d) / 2)
    np.testing.assert_allclose(half.items(capped.U), capped.V, rtol=1e-10, atol=1e-12)
    assert capped.info["objective"] <= before.info["objective"]


def test_a_row_whose_factors_vanished_does_not_hold_the_bound_up():
    """A user whose factor all but vanished (‖Ũ_u‖ ~ 1e-40: the model collapsed on their ratings) has scores
    below the floor relative errors divide by, so its gradient, however large against its own norm, cannot
    move a relative error: the bound ignores it below the floor and counts it above (the ml-100k subset
    where a refresh warned "stopped short" at ‖∇f‖ = 9e-18 with an item bound of 0.9987)."""
    rng = np.random.default_rng(1)
    lam = 0.1
    for size, want in ((1e-40, 0.0), (1e-3, 0.5)):
        U, V = rng.normal(size=(30, 4)), rng.normal(size=(20, 4))
        U[0] *= size
        T_U, T_V = balance_transforms(U, V)
        U, V = U @ T_U, V @ T_V  # balanced: the bound is the rows' own ‖g‖ / (λ‖F‖)
        gU, gV = np.zeros_like(U), np.zeros_like(V)
        gU[0] = 0.5 * lam * U[0]  # half the row's own size: ε = 0.5 when the row counts
        item, user = als.identity_bound(U, V, gU, gV, lam)
        assert item == pytest.approx(want, abs=1e-9) and user == pytest.approx(0.0, abs=1e-9)
