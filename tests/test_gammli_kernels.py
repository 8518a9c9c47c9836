"""GAMMLI's kernels and stages against generic solvers on tiny cases, and the constraints they promise."""

import numpy as np
import pytest
import scipy.linalg as sla

from dxplain.gammli.additive import fit_groups
from dxplain.gammli.fit import make_parts
from dxplain.gammli.latent import RIDGE_SHARE, LatentGroups, group_als
from dxplain.gammli.model import candidate_terms
from dxplain.gammli.synthetic import eq6
from dxplain.gammli.terms import Additive, Term, encode_features
from dxplain.io.features import features_from_table
from dxplain.kernels import gammli as G
from dxplain.mapper import LocalMapper


def test_bases_are_partitions_of_unity_and_unseen_levels_are_zero():
    x = np.array([-5.0, 0.0, 0.3, 1.0, 9.0])  # beyond the range on both sides
    B = G.bspline_basis(x, 0.0, 1.0, 8)
    assert B.shape == (5, 8) and np.allclose(B.sum(1), 1.0)
    assert np.allclose(B[0], B[1]) and np.allclose(B[-1], B[-2])  # clipped to the training range
    L = G.levels_basis(np.array([0, 2, -1]), 3)
    assert L.tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 0]]


def test_row_kron_is_kron_per_row():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
    assert np.allclose(G.row_kron(A, B), np.array([np.kron(a, b) for a, b in zip(A, B)]))


def _group_half_step_oracle(indptr, cols, m, w, F, lam, mu, groups):
    """argmin_U Σ w(m − U_u·F_j)² + λ‖U − CU‖² + μ‖U‖² as one stacked least-squares problem in vec(U)."""
    n, r = len(indptr) - 1, F.shape[1]
    rows, rhs = [], []
    for u in range(n):
        for p in range(indptr[u], indptr[u + 1]):
            a = np.zeros(n * r)
            a[u * r : (u + 1) * r] = np.sqrt(w[p]) * F[cols[p]]
            rows.append(a)
            rhs.append(np.sqrt(w[p]) * m[p])
    C = (groups[:, None] == groups[None, :]) / np.bincount(groups)[groups][:, None]
    Pen = np.kron(np.eye(n) - C, np.eye(r)) * np.sqrt(lam)
    A = np.vstack([np.array(rows), Pen, np.sqrt(mu) * np.eye(n * r)])
    b = np.concatenate([rhs, np.zeros(2 * n * r)])
    return np.linalg.lstsq(A, b, rcond=None)[0].reshape(n, r)


@pytest.mark.parametrize("mu", [0.0, 0.05])
def test_group_half_step_is_the_exact_minimiser(mu):
    rng = np.random.default_rng(1)
    n, n_cols, r, K, lam = 9, 7, 2, 3, 0.7
    mask = rng.random((n, n_cols)) < 0.5
    mask[0] = False  # a user without ratings: its row must be its cluster's mean
    uu, cc = np.nonzero(mask)
    indptr = np.searchsorted(uu, np.arange(n + 1))
    m, w = rng.normal(size=len(uu)), rng.uniform(0.2, 1.5, size=len(uu))
    F = rng.normal(size=(n_cols, r))
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 0, 2])
    S, t, counts = G.group_moments(indptr, cc, m, w, F, lam, mu, groups, K)
    means = G.group_means(S, t, counts, lam)
    U = G.group_rows(indptr, cc, m, w, F, lam, mu, groups, means)
    assert np.allclose(U, _group_half_step_oracle(indptr, cc, m, w, F, lam, mu, groups), atol=1e-10)
    assert np.allclose(means, [U[groups == k].mean(0) for k in range(K)], atol=1e-12)
    assert np.allclose(U[0], lam / (lam + mu) * means[groups[0]])


def _tiny(seed=0, n=60):
    d = eq6(n, n, missing=0.7, seed=seed)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    return d, users, items


def test_constrained_penalised_fit_equals_a_kkt_solve_and_is_centred():
    d, users, items = _tiny()
    mains, pairs = candidate_terms(users, items, encode_features(users), encode_features(items))
    terms = [Term("intercept", "intercept"), mains[0], mains[6], pairs[7]]
    val = np.zeros(len(d["y"]), bool)
    parts = [p for p, _, _ in make_parts(d["u"], d["i"], d["y"], val, 60, 60, 3)["user"]]
    (fit,), _ = fit_groups(LocalMapper(), parts, [terms], Additive(), "regression", smooth=1e-3)
    # Oracle: min ‖y − Xc‖² + cᵀPc subject to each term's constraint, by its KKT system.
    u, i, y = d["u"], d["i"], d["y"]
    X = np.hstack([t.columns(u, i) for t in terms])
    n = len(y)
    P = sla.block_diag(*[1e-3 * n * t.P for t in terms]) + 1e-9 * n * np.eye(X.shape[1])
    ends = np.cumsum([t.size for t in terms])
    C = sla.block_diag(*[t.constraints(t.columns(u, i).T @ t.columns(u, i)) for t in terms])
    # drop the constraints' dependent rows (a pair's two margins share the constant)
    C = sla.orth(C.T).T
    kkt = np.block([[X.T @ X + P, C.T], [C, np.zeros((len(C), len(C)))]])
    sol = np.linalg.solve(kkt, np.concatenate([X.T @ y, np.zeros(len(C))]))[: X.shape[1]]
    assert np.allclose(np.concatenate(fit.coefs), sol, atol=1e-8)
    H = fit.contributions(u, i)
    assert np.allclose(H[:, 1:3].mean(0), 0, atol=1e-10)  # main effects centred over Ω
    # the interaction is orthogonal to every function of its user feature and of its item feature
    pair = terms[3]
    assert np.allclose(pair.Bu[u].T @ H[:, 3], 0, atol=1e-8) and np.allclose(pair.Bi[i].T @ H[:, 3], 0, atol=1e-8)
    assert ends[-1] == X.shape[1]


def test_logistic_irls_reaches_the_penalised_optimum():
    d, users, items = _tiny(2)
    mains, _ = candidate_terms(users, items, encode_features(users), encode_features(items))
    terms = [Term("intercept", "intercept"), mains[0], mains[5]]
    y = d["label"]
    parts = [p for p, _, _ in make_parts(d["u"], d["i"], y, np.zeros(len(y), bool), 60, 60, 2)["user"]]
    (fit,), _ = fit_groups(LocalMapper(), parts, [terms], Additive(), "classification", smooth=1e-3)
    c = np.concatenate(fit.coefs)
    X = np.hstack([t.columns(d["u"], d["i"]) for t in terms])
    n = len(y)
    P = sla.block_diag(*[1e-3 * n * t.P for t in terms]) + 1e-9 * n * np.eye(X.shape[1])
    # stationarity of Σ log-loss + ½cᵀ(2P)c/2 in the constraint null space: Zᵀ(Xᵀ(p − y) + Pc) = 0
    grad = X.T @ (G.sigmoid(X @ c) - y) + P @ c
    Z = sla.block_diag(
        *[G.null_space_of(t.constraints(t.columns(d["u"], d["i"]).T @ t.columns(d["u"], d["i"]))) for t in terms]
    )
    assert np.abs(Z.T @ grad).max() < 1e-6 * n


@pytest.mark.parametrize("n_parts", [1, 3])
def test_group_als_is_stationary_on_both_sides(n_parts):
    d, users, items = _tiny(3)
    gu, gi = d["user_groups"] % 4, d["item_groups"] % 3
    val = np.zeros(len(d["y"]), bool)
    raw = make_parts(d["u"], d["i"], d["y"] - d["y"].mean(), val, 60, 60, n_parts)
    from dxplain.gammli.latent import latent_part

    lp = {s: [latent_part(p, s, lo, hi, Additive(), "regression", "all") for p, lo, hi in ps] for s, ps in raw.items()}
    lam = 2.0
    fit = group_als(
        LocalMapper(), lp["user"], lp["item"], LatentGroups(gu, gi, 4, 3), lam, 3, tol=1e-12, max_sweeps=3000
    )
    U, V = fit["U"], fit["V"]
    r = d["y"] - d["y"].mean() - np.einsum("nk,nk->n", U[d["u"]], V[d["i"]])
    Ut = np.array([U[gu == k].mean(0) for k in range(4)])
    Vt = np.array([V[gi == k].mean(0) for k in range(3)])
    mu = RIDGE_SHARE * lam
    lhs_u = (lam + mu) * U - lam * Ut[gu]
    rhs_u = np.zeros_like(U)
    np.add.at(rhs_u, d["u"], r[:, None] * V[d["i"]])
    lhs_v = (lam + mu) * V - lam * Vt[gi]
    rhs_v = np.zeros_like(V)
    np.add.at(rhs_v, d["i"], r[:, None] * U[d["u"]])
    assert np.abs(lhs_u - rhs_u).max() < 1e-10 * np.abs(lhs_u).max()
    assert np.abs(lhs_v - rhs_v).max() < 1e-6 * np.abs(lhs_v).max()


def test_a_stage_with_nothing_to_add_keeps_no_term():
    import pyarrow as pa

    from dxplain.gammli.additive import select_terms

    rng = np.random.default_rng(5)
    users = features_from_table(
        pa.table({"user": np.arange(30), "c": pa.array(rng.choice(["a", "b", "c"], 30)).dictionary_encode()}), "user"
    )
    items = features_from_table(pa.table({"item": np.arange(20), "d": rng.random(20)}), "item")
    mains, pairs = candidate_terms(users, items, encode_features(users), encode_features(items))
    u, i = np.repeat(np.arange(30), 20), np.tile(np.arange(20), 30)
    y = 1.0 + np.array([0.0, 2.0, -1.0])[mains[0].Bu[u].argmax(1)]  # an exact user main effect, no interaction
    val = rng.random(len(y)) < 0.2
    parts = [p for p, _, _ in make_parts(u, i, y, val, 30, 20, 2)["user"]]
    s1 = select_terms(
        LocalMapper(), parts, mains, Additive(), "regression", 1e-12, intercept=Term("intercept", "intercept")
    )
    assert s1["kept"][0] == "user:c"
    s2 = select_terms(LocalMapper(), parts, pairs, s1["fitted"], "regression", 1e-12)
    assert s2["kept"] == [] and s2["fitted"].terms == []


def test_backfitting_lowers_the_training_loss_and_reusing_the_gram_changes_nothing():
    """eq. 6 draws features and latent vectors from the same blobs, so stage 1–2 terms fitted without the
    latent part mimic some of it; backfitting refits them on y − ⟨U,V⟩ and must fit the training rows better.
    The refits reuse the Gram of the chosen terms: a fresh pass must give the same coefficients."""
    from dxplain.gammli.fit import Config, fit_gammli
    from dxplain.gammli.latent import LatentOffset

    d = eq6(100, 80, missing=0.5, seed=5)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    u, i, y = d["u"], d["i"], d["y"]
    fits = {
        b: fit_gammli(
            users, items, u, i, y, Config(rank=3, K=10, L=10, lam=10.0, backfit=b, max_sweeps=150), log=lambda *_: None
        )
        for b in (0, 3)
    }
    sse = {b: float(np.sum((y - m.predict(u, i)) ** 2)) for b, m in fits.items()}
    assert sse[3] < 0.97 * sse[0], sse

    m = fits[3]
    parts = [p for p, _, _ in make_parts(u, i, y, np.zeros(len(y), bool), 100, 80, 3)["user"]]
    terms, off = m.additive.terms, LatentOffset(m.U, m.V)
    grams = []
    fit_groups(LocalMapper(), parts, [terms], Additive(), "regression", 1e-4, use="all", grams=grams)
    (reused,), _ = fit_groups(LocalMapper(), parts, [terms], off, "regression", 1e-4, use="all", grams=grams)
    (fresh,), _ = fit_groups(LocalMapper(), parts, [terms], off, "regression", 1e-4, use="all")
    for a, b in zip(reused.coefs, fresh.coefs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_gram_pass_in_row_chunks_equals_one_in_a_piece(monkeypatch):
    import dxplain.gammli.additive as A

    d = eq6(60, 50, missing=0.5, seed=6)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    mains, pairs = candidate_terms(users, items, encode_features(users), encode_features(items))
    terms = [Term("intercept", "intercept")] + mains + pairs[:3]
    parts = [p for p, _, _ in make_parts(d["u"], d["i"], d["y"], np.zeros(len(d["y"]), bool), 60, 50, 2)["user"]]
    (whole,), _ = fit_groups(LocalMapper(), parts, [terms], Additive(), "regression", 1e-4, use="all")
    monkeypatch.setattr(A, "GRAM_BYTES", 8 * sum(t.size for t in terms) * 97)  # 97 rows at a time
    (chunked,), _ = fit_groups(LocalMapper(), parts, [terms], Additive(), "regression", 1e-4, use="all")
    assert len(d["y"]) > 4 * 97
    for a, b in zip(whole.coefs, chunked.coefs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
