"""iALS (confidence-weighted ALS), both conventions: kernels against dense brute force, the exact representer with
its unobserved aggregate, training to the identity, and the ``implicit`` library's own half-step."""

from dataclasses import replace

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import random_interactions

from dxplain.errors import InputError, UnsupportedModelError
from dxplain.explain.ials import IALSExplainer, explain_ials
from dxplain.explain.run_rows import relative_error
from dxplain.explain.targets import recommend
from dxplain.interactions import Interactions, Targets
from dxplain.kernels import ials
from dxplain.kernels.balance import balancing_transform
from dxplain.mapper import LocalMapper
from dxplain.models.base import FactorModel
from dxplain.models.ials import IALS, OBJECTIVE
from dxplain.models.ials_half_steps import IALSHalfSteps

CONVENTIONS = ["implicit", "spark"]


def signed_interactions(n_users=30, n_items=25, density=0.3, seed=0) -> Interactions:
    """Stored values of every kind a convention treats apart: positives of several sizes, negatives and zeros."""
    d = random_interactions(n_users, n_items, density, seed=seed)
    rng = np.random.default_rng(seed + 1)
    r = rng.choice([3.0, 1.0, 2.5, 0.0, -1.0, -2.0], size=len(d), p=[0.3, 0.3, 0.15, 0.1, 0.1, 0.05])
    r[(d.user == 0) | (d.item == 1)] = -np.abs(r[(d.user == 0) | (d.item == 1)])  # rows without a positive entry
    return Interactions.from_indices(d.user, d.item, r, d.user_ids, d.item_ids)


def binary(d: Interactions, threshold=4) -> Interactions:
    keep = d.rating >= threshold
    return Interactions.from_indices(d.user[keep], d.item[keep], np.ones(int(keep.sum())), d.user_ids, d.item_ids)


def dense(d: Interactions, alpha: float, convention: str, lam: float):
    """C, P over every entry (1 and 0 where nothing is stored) and λ·w per user and per item."""
    C, P = np.ones((d.n_users, d.n_items)), np.zeros((d.n_users, d.n_items))
    C[d.user, d.item], P[d.user, d.item] = ials.confidence(d.rating, alpha, convention)
    if convention == "implicit":
        return C, P, lam * np.ones(d.n_users), lam * np.ones(d.n_items)
    pos = np.zeros((d.n_users, d.n_items))
    pos[d.user, d.item] = d.rating > 0
    return C, P, lam * pos.sum(1), lam * pos.sum(0)


def dense_solve(C, P, F, lam_w):
    """Each row's argmin Σ_all c (p − ⟨x, F_i⟩)² + λw‖x‖², from the dense weights."""
    X = np.zeros((len(C), F.shape[1]))
    for r in range(len(C)):
        A = F.T @ (C[r][:, None] * F) + lam_w[r] * np.eye(F.shape[1])
        b = F.T @ (C[r] * P[r])
        X[r] = np.linalg.solve(A, b) if np.any(b) else 0.0
    return X


def views(d: Interactions, alpha, convention, lam):
    """(indptr, cols, c, p, λw) by user and by item."""
    out = {}
    order = d.item_order
    for side, indptr, cols, r in (
        ("user", d.user_indptr, d.item, d.rating),
        ("item", d.item_indptr, d.user[order], d.rating[order]),
    ):
        c, p = ials.confidence(r, alpha, convention)
        out[side] = (indptr, cols, c, p, lam * ials.ridge_weights(indptr, r, convention))
    return out


def test_confidences_follow_each_library():
    r = np.array([2.0, 0.0, -1.5, 0.5])
    c, p = ials.confidence(r, 3.0, "implicit")
    np.testing.assert_array_equal(c, 3.0 * np.abs(r))  # implicit: Cui = alpha·r; a stored 0 has c = 0
    np.testing.assert_array_equal(p, r > 0)
    c, p = ials.confidence(r, 3.0, "spark")
    np.testing.assert_array_equal(c, 1.0 + 3.0 * np.abs(r))  # Spark: 1 + c1, c1 = alpha·|rating|
    np.testing.assert_array_equal(p, r > 0)
    indptr = np.array([0, 2, 4, 4])
    np.testing.assert_array_equal(ials.ridge_weights(indptr, r, "spark"), [1, 1, 0])  # numExplicits: r > 0 only
    np.testing.assert_array_equal(ials.ridge_weights(indptr, r, "implicit"), [1, 1, 1])


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("fused", [False, True], ids=["numpy", "numba"])
def test_half_step_gradient_and_objective_match_dense_brute_force(convention, fused):
    d = signed_interactions(seed=3)
    alpha, lam, k = 1.7, 0.3, 5
    rng = np.random.default_rng(4)
    U, V = rng.normal(size=(d.n_users, k)), rng.normal(size=(d.n_items, k))
    C, P, lwU, lwV = dense(d, alpha, convention, lam)
    vu, vi = views(d, alpha, convention, lam)["user"], views(d, alpha, convention, lam)["item"]
    if convention == "spark":
        assert (lwU == 0).any() and (lwV == 0).any()  # rows without a positive entry: solved to 0
    np.testing.assert_allclose(ials.half_step(*vu[:4], V, vu[4], fused=fused), dense_solve(C, P, V, lwU), atol=1e-12)
    np.testing.assert_allclose(
        ials.half_step(*vi[:4], U, vi[4], fused=fused), dense_solve(C.T, P.T, U, lwV), atol=1e-12
    )
    S = U @ V.T
    gU, data = ials.gradient_rows(*vu[:4], U, V, vu[4], fused=fused)
    gV, data_V = ials.gradient_rows(*vi[:4], V, U, vi[4], fused=fused)
    np.testing.assert_allclose(gU, -2 * (C * (P - S)) @ V + 2 * lwU[:, None] * U, rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(gV, -2 * (C * (P - S)).T @ U + 2 * lwV[:, None] * V, rtol=1e-11, atol=1e-10)
    assert data == pytest.approx(np.sum(C * (P - S) ** 2), rel=1e-12) and data_V == pytest.approx(data, rel=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_numba_half_step_equals_numpy_on_binary_data(alpha):
    """α = 1 on 0/1 data (implicit's defaults) gives every row c = 1: the compiled kernel's shared factorisation."""
    d = binary(random_interactions(60, 40, 0.3, seed=5), threshold=3)
    rng = np.random.default_rng(6)
    V = rng.random((d.n_items, 8))
    v = views(d, alpha, "implicit", 0.01)["user"]
    np.testing.assert_allclose(
        ials.half_step(*v[:4], V, v[4], fused=True), ials.half_step(*v[:4], V, v[4], fused=False), rtol=1e-10
    )


def test_rows_sharing_the_grams_factorisation_are_solved_together_beside_corrected_ones():
    """implicit's convention at α = 1 with values 1 and 2: rows holding only 1s have c = 1 everywhere and are solved
    together against G + λI; rows with a 2 carry a correction; a row whose only stored value is 0 gets 0. All equal
    the dense least squares."""
    d = random_interactions(60, 40, 0.3, seed=8)
    r = np.where(d.rating >= 4, 2.0, 1.0)
    r[d.user == 3] = 1.0  # a row of 1s only: shared (it has a positive right-hand side)
    lone = d.user_indptr[5]  # user 5 keeps one stored 0: c = 0, no right-hand side, solved as 0
    keep = (d.user != 5) | (np.arange(len(d)) == lone)
    r[lone] = 0.0
    d = Interactions.from_indices(d.user[keep], d.item[keep], r[keep], d.user_ids, d.item_ids)
    V = np.random.default_rng(9).random((d.n_items, 6))
    v = views(d, 1.0, "implicit", 0.05)["user"]
    corrected = np.add.reduceat(v[2] != 1.0, v[0][:-1]) > 0
    assert corrected.any() and not corrected.all() and not corrected[3]
    C, P, lwU, _ = dense(d, 1.0, "implicit", 0.05)
    X = ials.half_step(*v[:4], V, v[4], fused=True)
    np.testing.assert_allclose(X, dense_solve(C, P, V, lwU), atol=1e-12)
    np.testing.assert_array_equal(X[5], 0.0)


def brute_force_sides(d, U, V, alpha, convention, lam, u, j):
    """Per target (u, j): every entry's term on each side, from the dense weights, and which entries are stored."""
    C, P, lwU, lwV = dense(d, alpha, convention, lam)
    S = U @ V.T
    stored = np.zeros(C.shape, bool)
    stored[d.user, d.item] = True
    with np.errstate(divide="ignore", invalid="ignore"):  # λw = 0 (Spark, no positives): not finite, skipped
        item_terms = C[u] * (P[u] - S[u]) / lwU[u] * (V @ V[j])  # over u's items
        user_terms = C[:, j] * (P[:, j] - S[:, j]) / lwV[j] * (U @ U[u])  # over j's users
    return item_terms, user_terms, stored[u], stored[:, j]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_each_row_and_the_aggregate_equal_brute_force_on_both_sides(convention):
    """Off stationarity too: the interaction rows are the stored entries' terms and the unobserved row is the sum of
    the unobserved entries' terms, visited one by one here (both sides, stored zeros included)."""
    d = signed_interactions(seed=7)
    alpha, lam, k = 2.0, 0.2, 4
    rng = np.random.default_rng(8)
    U, V = rng.normal(size=(d.n_users, k)), rng.normal(size=(d.n_items, k))
    model = FactorModel(
        U, V, 0.0, lam, len(d), loss="ials", kind="ials", settings={"convention": convention, "alpha": alpha}
    )
    ex = IALSExplainer(model, d)
    t = Targets.from_pairs(np.arange(12), (np.arange(12) * 5) % d.n_items)
    for side in ("item", "user"):
        a = ex.side(t, side, top_unobserved=3)
        for n in range(len(t)):
            u, j = int(t.user[n]), int(t.item[n])
            item_terms, user_terms, stored_i, stored_u = brute_force_sides(d, U, V, alpha, convention, lam, u, j)
            terms, stored = (item_terms, stored_i) if side == "item" else (user_terms, stored_u)
            if not np.isfinite(terms).all():  # a Spark row without positives: explained by zeros
                assert np.all(a["importance"][a["target"] == n] == 0) and convention == "spark"
                continue
            mine = a["target"] == n
            inter = mine & (a["kind"] == 0)
            entries = a["entry"][inter]
            other = d.item[entries] if side == "item" else d.user[entries]
            np.testing.assert_allclose(a["importance"][inter], terms[other], rtol=1e-10, atol=1e-12)
            assert sorted(other) == sorted(np.flatnonzero(stored))
            (agg,) = a["importance"][mine & (a["kind"] == 1)]
            assert agg == pytest.approx(terms[~stored].sum(), rel=1e-10, abs=1e-12)
            top = a["other"][mine & (a["kind"] == 2)]
            unobserved = np.flatnonzero(~stored)
            want = unobserved[np.argsort(-np.abs(terms[unobserved]), kind="stable")[:3]]
            np.testing.assert_array_equal(top, want)
            np.testing.assert_allclose(a["importance"][mine & (a["kind"] == 2)], terms[want], rtol=1e-10)


def assert_identity(model, d, t, rtol=1e-6):
    """Both sides' interaction and unobserved rows sum to the score, from the written table too."""
    ex = IALSExplainer(model, d)
    s = ex.scores(t)
    for total in ex.side_sums(t):
        rel = relative_error(total, s)  # a user without positives scores 0 everywhere, explained by zeros
        assert rel.max() <= rtol, f"worst relative error {rel.max():.2e}"
    tab = ex.explain(t.take(np.arange(min(len(t), 20))))
    counted = tab.filter(pc.invert(pc.equal(tab.column("kind").cast("string"), "unobserved_term")))
    g = counted.group_by(["user", "item", "side"]).aggregate([("importance", "sum"), ("score", "max")])
    total, score = g.column("importance_sum").to_numpy(), g.column("score_max").to_numpy()
    assert np.abs(total - score).max() <= rtol * np.abs(score).max()


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_identity_holds_at_a_converged_model_and_fails_off_it(convention):
    d = signed_interactions(50, 40, 0.25, seed=9)
    m = IALS(k=6, alpha=3.0, convention=convention, seed=1).fit(d)
    assert (
        m.loss == "ials"
        and m.kind == "ials"
        and m.mu == 0.0
        and m.settings["convention"] == convention
        and m.settings["alpha"] == 3.0
    )
    assert m.info["converged"] and max(m.info["identity_bound"].values()) <= 1e-7
    t = recommend(m.U, m.V, d, np.arange(d.n_users), 5)
    assert_identity(m, d, t)
    early = IALS(k=6, alpha=3.0, convention=convention, seed=1, max_sweeps=2).fit(d)
    assert not early.info["converged"]
    ex = IALSExplainer(early, d)
    s = ex.scores(t)
    assert relative_error(ex.side_sums(t)[0], s).max() > 1e-3


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_identity_on_movielens_100k_binarised(ml100k, convention):
    d = binary(ml100k.interactions)
    m = IALS(k=32, convention=convention).fit(d)  # each library's default λ and α
    assert m.info["converged"] and m.lam == {"implicit": 0.01, "spark": 0.1}[convention]
    t = recommend(m.U, m.V, d, np.arange(d.n_users), 10)
    assert_identity(m, d, t)


def test_the_fit_over_parts_equals_the_fit_in_process(tmp_path):
    from functools import partial

    from dxplain.io.partitions import write_partitions

    d = signed_interactions(40, 30, 0.3, seed=11)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 3 + 1)
    trainer = IALS(k=4, convention="spark", alpha=2.0, max_sweeps=30)
    whole = trainer.fit(d)
    mapped = trainer.fit(d, half_steps=partial(IALSHalfSteps.over_parts, LocalMapper(), parts))
    assert len(parts.user_cuts) > 2
    assert mapped.info["sweeps"] == whole.info["sweeps"]
    np.testing.assert_allclose(mapped.U, whole.U, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mapped.V, whole.V, rtol=1e-9, atol=1e-12)


def spark_compute_factors(d: Interactions, Y, alpha, reg):
    """Spark's ALS.computeFactors for implicitPrefs, transcribed: YtY merged, then per stored rating
    c1 = alpha·|rating|, ls.add(y, if rating > 0 then 1 + c1 else 0, c1), numExplicits += rating > 0,
    and solve(ls, numExplicits·regParam)."""
    X = np.zeros((d.n_users, Y.shape[1]))
    for u in range(d.n_users):
        ata, atb, n = Y.T @ Y, np.zeros(Y.shape[1]), 0
        for e in range(d.user_indptr[u], d.user_indptr[u + 1]):
            y, rating = Y[d.item[e]], d.rating[e]
            c1 = alpha * abs(rating)
            n += rating > 0
            ata += c1 * np.outer(y, y)
            atb += (1.0 + c1 if rating > 0 else 0.0) * y
        X[u] = np.linalg.solve(ata + n * reg * np.eye(len(atb)), atb)
    return X


def test_the_spark_half_step_is_sparks_normal_equations():
    d = signed_interactions(seed=13)
    Y = np.random.default_rng(14).normal(size=(d.n_items, 5))
    v = views(d, 1.5, "spark", 0.2)["user"]
    np.testing.assert_allclose(
        ials.half_step(*v[:4], Y, v[4]), spark_compute_factors(d, Y, 1.5, 0.2), rtol=1e-10, atol=1e-12
    )


def implicit_csr(d: Interactions):
    sp = pytest.importorskip("scipy.sparse")
    return sp.csr_matrix((d.rating, (d.user, d.item)), shape=(d.n_users, d.n_items))


def test_half_steps_equal_implicit_least_squares():
    """One exact half-step from the same V equals implicit's own Cholesky solve (``recalculate_user``/``_item``), with
    λ = its ``regularization`` and α = its ``alpha``: stored zeros and negatives included."""
    pytest.importorskip("implicit")
    from implicit.cpu.als import AlternatingLeastSquares

    d = signed_interactions(seed=15)
    alpha, lam, k = 2.0, 0.05, 6
    rng = np.random.default_rng(16)
    U, V = rng.normal(size=(d.n_users, k)), rng.normal(size=(d.n_items, k))
    lib = AlternatingLeastSquares(factors=k, regularization=lam, alpha=alpha, dtype=np.float64, num_threads=1)
    lib.user_factors, lib.item_factors = U.copy(), V.copy()
    M = implicit_csr(d)
    v = views(d, alpha, "implicit", lam)
    np.testing.assert_allclose(
        ials.half_step(*v["user"][:4], V, v["user"][4]), lib.recalculate_user(np.arange(d.n_users), M), rtol=1e-9
    )
    np.testing.assert_allclose(
        ials.half_step(*v["item"][:4], U, v["item"][4]),
        lib.recalculate_item(np.arange(d.n_items), M.T.tocsr()),
        rtol=1e-9,
    )


def test_one_sweep_equals_one_implicit_iteration():
    """IALS's first sweep from a start equals implicit's fit for one iteration (exact solves) from the same start."""
    pytest.importorskip("implicit")
    from implicit.cpu.als import AlternatingLeastSquares

    d = binary(random_interactions(40, 30, 0.3, seed=17), threshold=3)
    rng = np.random.default_rng(18)
    U0, V0 = rng.random((d.n_users, 5)) * 0.01, rng.random((d.n_items, 5)) * 0.01
    lib = AlternatingLeastSquares(
        factors=5, regularization=0.01, alpha=4.0, dtype=np.float64, use_cg=False, iterations=1, num_threads=1
    )
    lib.user_factors, lib.item_factors = U0.copy(), V0.copy()
    lib.fit(implicit_csr(d), show_progress=False)
    mine = IALS(k=5, lam=0.01, alpha=4.0, max_sweeps=1).fit(d, init=(U0, V0))
    np.testing.assert_allclose(mine.U, lib.user_factors, rtol=1e-9)
    np.testing.assert_allclose(mine.V, lib.item_factors, rtol=1e-9)


def test_the_model_store_keeps_the_loss_and_its_settings(tmp_path):
    d = signed_interactions(seed=19)
    m = IALS(k=3, convention="spark", alpha=5.0, max_sweeps=3).fit(d)
    m.save(tmp_path / "m.zarr", d)
    back = FactorModel.load(tmp_path / "m.zarr", d)
    assert (back.loss, back.kind, back.lam, back.settings) == (
        "ials",
        "ials",
        0.1,
        m.settings,
    )
    assert back.settings["convention"] == "spark" and back.settings["alpha"] == 5.0
    assert back.metadata()["objective_scaling"] == OBJECTIVE["spark"]
    np.testing.assert_array_equal(back.U, m.U)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"convention": "mllib"}, "unknown iALS convention 'mllib'"),
        ({"alpha": 0.0}, "alpha = 0.0"),
        ({"alpha": -1.0}, "alpha = -1.0"),
        ({"lam": 0.0}, "lam = 0.0"),
        ({"start": "svd"}, "start = 'svd'"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(InputError, match=message):
        IALS(k=2, **kwargs).fit(signed_interactions())


def test_bad_factors_and_models_are_refused():
    d = signed_interactions()
    with pytest.raises(InputError, match="start factors have shapes"):
        IALS(k=2).fit(d, init=(np.zeros((3, 2)), np.zeros((d.n_items, 2))))
    m = IALS(k=2, max_sweeps=2).fit(d)
    other = signed_interactions(31, 25, seed=1)
    with pytest.raises(UnsupportedModelError, match="explain it against the table it was trained on"):
        explain_ials(m, other, Targets.from_pairs([0], [0]))
    for bad in ({"loss": "squared"}, {"settings": {}}):
        with pytest.raises(UnsupportedModelError):
            explain_ials(replace(m, **bad), d, Targets.from_pairs([0], [0]))


def test_the_rescaling_minimises_the_penalty_without_a_rotation():
    rng = np.random.default_rng(21)
    U, V = rng.normal(size=(30, 4)), rng.normal(size=(20, 4)) * 3.0
    wU, wV = rng.integers(1, 5, 30), rng.integers(1, 5, 20)
    A, B = (U * wU[:, None]).T @ U, (V * wV[:, None]).T @ V
    P = balancing_transform(A, B)
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    assert np.linalg.eigvalsh(P)[0] > 0
    Pi = np.linalg.inv(P)
    np.testing.assert_allclose(P.T @ A @ P, Pi @ B @ Pi.T, rtol=1e-9, atol=1e-9)  # the weighted Grams balanced

    def penalty(R):
        Ri = np.linalg.inv(R)
        return np.trace(R.T @ A @ R) + np.trace(Ri @ B @ Ri.T)

    best = penalty(P)
    assert all(penalty(P @ (np.eye(4) + 0.05 * rng.normal(size=(4, 4)))) > best for _ in range(20))
    np.testing.assert_allclose(balancing_transform(B, B), np.eye(4), atol=1e-9)  # balanced already: P = I


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_the_identity_bound_bounds_each_targets_miss(convention):
    """Off stationarity, each item-side miss is ⟨∇_U f, V_j⟩/(2λw_u), within ε/cos θ of the score (Cauchy–Schwarz)."""
    d = signed_interactions(40, 30, 0.3, seed=23)
    m = IALS(k=4, alpha=2.0, convention=convention, max_sweeps=3, seed=2).fit(d)
    ex = IALSExplainer(m, d)
    t = Targets.from_pairs(np.repeat(np.arange(1, 40), 3), np.tile([2, 5, 9], 39))
    s = ex.scores(t)
    miss = np.abs(ex.side_sums(t)[0] - s)
    cos = np.abs(s) / (np.linalg.norm(m.U[t.user], axis=1) * np.linalg.norm(m.V[t.item], axis=1))
    eps = m.info["identity_bound"]["item"]
    live = np.abs(s) > 1e-9
    assert eps > 1e-3 and np.all(miss[live] / np.abs(s[live]) <= eps / cos[live] * (1 + 1e-9))


@pytest.mark.parametrize("lam", [20.0, 100.0])
def test_a_large_lambda_with_a_low_rank_optimum_converges(ml100k, lam):
    """At λ = 20 or 100 and α = 1 the optimum keeps few of the k components: a side's Gram is near singular and
    the rescaling between sweeps is skipped rather than taken through its ill-conditioned square roots (from
    implicit's random start; the spectral start is the optimum itself here, every confidence being 1)."""
    d = binary(ml100k.interactions)
    m = IALS(k=32, lam=lam, alpha=1.0, start="random").fit(d)
    assert m.info["converged"] and np.all(np.isfinite(m.U)) and np.all(np.isfinite(m.V))
    assert max(m.info["identity_bound"].values()) <= 1e-7
    spectral = IALS(k=32, lam=lam, alpha=1.0).fit(d)
    assert spectral.info["start"] == "spectral" and spectral.info["sweeps"] == 1 and spectral.info["converged"]
    assert spectral.info["objective"] <= m.info["objective"] * (1 + 1e-12)


def test_the_spectral_factors_are_the_soft_thresholded_svd():
    """``spectral_factors`` from products only equals the dense closed form: UVᵀ = A (Σ − λ)₊ Bᵀ over the k largest
    singular values, U and V balanced (UᵀU = VᵀV = diag(σ − λ)₊)."""
    d = random_interactions(40, 30, 0.3, seed=4)
    P = np.zeros((d.n_users, d.n_items))
    P[d.user, d.item] = 1.0
    A, sigma, Bt = np.linalg.svd(P)
    for k, lam in ((5, 0.5), (8, sigma[6] + 1e-3)):  # the second leaves its last two columns 0 (σ ≤ λ)
        U, V = ials.spectral_factors(lambda x: P @ x, lambda y: P.T @ y, P.shape, k, lam, seed=0)
        shrunk = np.maximum(sigma[:k] - lam, 0.0)
        np.testing.assert_allclose(U @ V.T, (A[:, :k] * shrunk) @ Bt[:k], atol=1e-12)
        np.testing.assert_allclose(U.T @ U, np.diag(shrunk), atol=1e-12)
        np.testing.assert_allclose(V.T @ V, np.diag(shrunk), atol=1e-12)
    assert ials.spectral_factors(lambda x: P @ x, lambda y: P.T @ y, P.shape, 30, 0.1, seed=0) is None


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_the_spectral_start_is_the_optimum_when_every_confidence_is_one(convention):
    """With the ``implicit`` convention at α = 1 on 0/1 data every c = 1 and w = 1: the spectral start is f's
    optimum, so the first sweep meets the bound, at an f no random start's fit goes below. Under Spark's convention
    (c = 2, w = counts) the default start is the random one."""
    d = binary(random_interactions(60, 45, 0.2, seed=6), threshold=-np.inf)
    auto = IALS(k=5, lam=0.5, convention=convention).fit(d)
    assert auto.info["start"] == ("spectral" if convention == "implicit" else "random") and auto.info["converged"]
    assert_identity(auto, d, recommend(auto.U, auto.V, d, np.arange(d.n_users), 5))
    if convention == "spark":
        return
    assert auto.info["sweeps"] == 1
    for seed in (0, 1, 2):
        random = IALS(k=5, lam=0.5, start="random", seed=seed).fit(d)
        assert random.info["start"] == "random" and random.info["converged"]
        assert auto.info["objective"] <= random.info["objective"] * (1 + 1e-12)


def test_without_arpacks_triplets_the_fit_takes_the_random_start(monkeypatch, caplog):
    """ARPACK not converging (or k not below both sides' lengths) costs the start, not the fit."""
    from scipy.sparse import linalg

    def no_convergence(*args, **kwargs):
        raise linalg.ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((0, 0)))

    d = binary(random_interactions(60, 45, 0.2, seed=6), threshold=-np.inf)
    monkeypatch.setattr(linalg, "svds", no_convergence)
    m = IALS(k=5, lam=0.5).fit(d)
    assert m.info["start"] == "random" and m.info["converged"] and "no spectral start" in caplog.text
    assert IALS(k=45, lam=0.5, max_sweeps=3).fit(d).info["start"] == "random"  # k = the items' count


def test_no_preference_at_all_is_refused_by_name_not_by_arpack():
    """Every stored value −1/α: every c = 1 (the spectral start's case) but P = 0, where ARPACK has no start vector;
    the fit takes the random start and refuses the collapsed factors as before (DegenerateError)."""
    from dxplain.errors import DegenerateError

    d = random_interactions(30, 25, 0.3, seed=2)
    d = Interactions.from_indices(d.user, d.item, -np.ones(len(d)), d.user_ids, d.item_ids)
    with pytest.raises(DegenerateError):
        IALS(k=3, lam=0.5, max_sweeps=5).fit(d)


def test_a_spectral_start_of_a_weighted_problem_keeps_every_component():
    """At α = 5 the confidences differ and the spectral start is only a start. λ above P's third singular value drops
    three of five components from the unweighted optimum; left 0 on both sides a column stays 0 under exact sweeps
    (a saddle), so they start from the random start's values: the fit reaches the random start's optimum."""
    d = binary(random_interactions(60, 45, 0.2, seed=6), threshold=-np.inf)
    P = np.zeros((d.n_users, d.n_items))
    P[d.user, d.item] = 1.0
    lam = np.linalg.svd(P, compute_uv=False)[2] + 0.01
    spectral = IALS(k=5, lam=lam, alpha=5.0, start="spectral").fit(d)
    random = IALS(k=5, lam=lam, alpha=5.0, start="random").fit(d)
    assert spectral.info["start"] == "spectral" and spectral.info["converged"] and random.info["converged"]
    assert np.all(np.linalg.norm(spectral.U, axis=0) > 1.0)
    np.testing.assert_allclose(spectral.info["objective"], random.info["objective"], rtol=1e-9)


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("k", [3, 34])
def test_compiled_hessian_rows_and_blocks_equal_numpy(convention, k):
    d = signed_interactions()  # confidences below, at and above 1, and rows without a positive entry
    rng = np.random.default_rng(k)
    for side, (indptr, cols, c, p, lam_w) in views(d, 2.0, convention, 0.3).items():
        n_rows, n_cols = len(indptr) - 1, int(cols.max()) + 1
        X, F = rng.normal(size=(n_rows, k)), rng.normal(size=(n_cols, k))
        dX, dF = rng.normal(size=X.shape), rng.normal(size=F.shape)
        G, S = F.T @ F, F.T @ dF + dF.T @ F
        args = (indptr, cols, c, p, X, F, dX, dF, lam_w, G, S)
        want = ials.hessian_vector_rows(*args, fused=False)
        np.testing.assert_allclose(ials.hessian_vector_rows(*args, fused=True), want, rtol=1e-12, atol=1e-12)
        want = ials.curvature_rows(indptr, cols, c, F, lam_w, G, fused=False)
        got = ials.curvature_rows(indptr, cols, c, F, lam_w, G, fused=True)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    assert np.any(c > 1) and np.any(c < 1 if convention == "implicit" else c == 1)  # the kernels' three cases


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_the_polishs_passes_are_fs_derivatives(convention):
    """gradient: f and ∇f (f equals the sweep's measure); hessian_vector: the central difference of ∇f;
    curvature_blocks: H's diagonal blocks, column by column."""
    d = signed_interactions()
    hs = IALSHalfSteps.local(d, 0.3, 2.0, convention)
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(d.n_users, 4)), rng.normal(size=(d.n_items, 4))
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    f, gU, gV = hs.gradient(U, V)
    assert f == pytest.approx(hs.measure(U, V).objective, rel=1e-12)
    C, P, lam_u, lam_i = dense(d, 2.0, convention, 0.3)

    def dense_f(U, V):
        return float(np.sum(C * (P - U @ V.T) ** 2) + lam_u @ np.sum(U * U, 1) + lam_i @ np.sum(V * V, 1))

    assert f == pytest.approx(dense_f(U, V), rel=1e-12)
    np.testing.assert_allclose(gU, -2 * (C * (P - U @ V.T)) @ V + 2 * lam_u[:, None] * U, rtol=1e-10, atol=1e-10)
    hU, hV = hs.hessian_vector(U, V, dU, dV)
    e = 1e-6
    _, gU1, gV1 = hs.gradient(U + e * dU, V + e * dV)
    _, gU0, gV0 = hs.gradient(U - e * dU, V - e * dV)
    np.testing.assert_allclose((gU1 - gU0) / (2 * e), hU, rtol=1e-6, atol=1e-6 * np.abs(hU).max())
    np.testing.assert_allclose((gV1 - gV0) / (2 * e), hV, rtol=1e-6, atol=1e-6 * np.abs(hV).max())
    A, B = hs.curvature_blocks(U, V)
    for q in range(4):
        unit = np.zeros_like(U)
        unit[:, q] = 1.0  # each user's column q at once: the blocks are the user-user diagonal of H
        hq, _ = hs.hessian_vector(U, V, unit, np.zeros_like(V))
        np.testing.assert_allclose(hq, A[:, :, q], rtol=1e-12, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(B) > 0)  # the items' blocks too: 2(G + Σ (c − 1) F Fᵀ + λw I), here definite


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_stalled_fit_is_polished_by_newton_to_the_identity(convention, tmp_path):
    """A stall window of 2 sweeps sends the fit to the Newton polish early: it ends converged, both sides' identity
    holds, and over parts (the polish's passes mapped too) it ends where the fit in this process does."""
    from functools import partial

    from dxplain.io.partitions import write_partitions

    d = signed_interactions(50, 40, 0.25, seed=9)
    trainer = IALS(k=6, alpha=3.0, convention=convention, seed=1, stall_sweeps=2)
    m = trainer.fit(d)
    assert (
        m.info["newton_iters"] > 0
        and m.info["sweeps"] < IALS(k=6, alpha=3.0, convention=convention, seed=1).fit(d).info["sweeps"]
    )
    assert m.info["converged"] and max(m.info["identity_bound"].values()) <= 1e-7
    assert_identity(m, d, recommend(m.U, m.V, d, np.arange(d.n_users), 5))
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 3 + 1)
    mapped = trainer.fit(d, half_steps=partial(IALSHalfSteps.over_parts, LocalMapper(), parts))
    assert mapped.info["newton_iters"] == m.info["newton_iters"]
    np.testing.assert_allclose(mapped.U @ mapped.V.T, m.U @ m.V.T, rtol=1e-7, atol=1e-9)
    unpolished = IALS(k=6, alpha=3.0, convention=convention, seed=1, stall_sweeps=2, newton_steps=0, max_sweeps=5)
    assert unpolished.fit(d).info["newton_iters"] == 0
