"""Sparse explainers and the case-deletion harness: identities, closed forms, and Dask = sequential."""

import numpy as np
import pytest
import scipy.sparse as sp

from dxplain.datasets.tabular import load_tabular
from dxplain.evaluation.deletion import deletion_curves, deletion_sets, summarise
from dxplain.evaluation.faithfulness import SparseCase, importances, plan, trial_case
from dxplain.evaluation.report import auc_del
from dxplain.mapper import LocalMapper
from dxplain.models.sparse_logistic import L1Logistic, loss_derivatives


def problem(sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 15))
    y = (rng.random(200) < 1 / (1 + np.exp(-(X[:, :3] @ [2.0, -1.0, 1.0])))).astype(int)
    Xt = rng.normal(size=(6, 15))
    if sparse:
        X, Xt = sp.csr_array(X * (rng.random(X.shape) < 0.5)), sp.csr_array(Xt)
    return X, y, Xt


@pytest.mark.parametrize("sparse", [False, True])
def test_l1_model_is_optimal_and_sparse(sparse):
    X, y, _ = problem(sparse)
    m = L1Logistic(0.02).fit(X, y)
    assert m.kkt_violation < 1e-8
    assert 0 < len(m.support) < X.shape[1]


@pytest.mark.parametrize("sparse", [False, True])
def test_l1_representer_sums_to_the_score_on_the_support(sparse):
    X, y, Xt = problem(sparse, 1)
    case = SparseCase.fit(X, y, Xt, 0.02)
    I = importances(case, "l1-representer")
    # Exact at the optimum; the solver stops at a KKT violation ~1e-9, which λ⁻¹ scales to ~1e-7 here.
    np.testing.assert_allclose(I.sum(axis=0), np.asarray(Xt @ case.model.theta).ravel(), rtol=1e-6, atol=1e-7)
    # Only the support counts: changing an off-support feature of a target changes nothing.
    off = np.setdiff1d(np.arange(X.shape[1]), case.model.support)[0]
    Xt2 = Xt.toarray() if sparse else Xt.copy()
    Xt2[:, off] += 5.0
    np.testing.assert_allclose(importances(SparseCase(X, y, Xt2, 0.02, case.model), "l1-representer"), I)


def test_l2_representer_and_influence_closed_forms():
    X, y, Xt = problem(False, 2)
    case = SparseCase.fit(X, y, Xt, 0.02)
    m = case.model
    d, d2 = loss_derivatives(y, m.decision(X))
    np.testing.assert_allclose(importances(case, "l2-representer"), -d[:, None] * (X @ Xt.T), rtol=1e-12)
    q = m.support
    H = sum(d2[i] * np.outer(X[i, q], X[i, q]) for i in range(len(X)))
    ref = np.array(
        [
            [
                -(d[i] * X[i, q] / len(X) + m.lam * np.sign(m.theta[q])) @ np.linalg.solve(H, Xt[t, q])
                for t in range(len(Xt))
            ]
            for i in range(len(X))
        ]
    )
    np.testing.assert_allclose(importances(case, "influence"), ref, rtol=1e-9, atol=1e-12)


def test_deletion_sets_take_the_top_of_each_sign():
    scores = np.array([0.5, -2.0, 3.0, 0.0, -0.1, 1.0] + [0.01] * 94)
    pos = deletion_sets(scores, 1, (0.01, 0.05))  # k = 1%, 5% of all 100 candidates
    assert [list(s) for s in pos] == [[2], [2, 5, 0, 6, 7]]
    neg = deletion_sets(scores, -1, (0.01, 0.05))  # only two negatives: k is capped
    assert [list(s) for s in neg] == [[1], [1, 4]]
    assert [len(s) for s in deletion_sets(scores, 1, (0.1,), N=20)] == [2]
    assert deletion_sets(np.zeros(5), 1) == []


def test_removing_the_top_positive_samples_lowers_the_prediction():
    """The harness can fail: the representer's top positives lower the score, random ones barely move it."""
    case = trial_case(*load_tabular("synthetic-small"), trial=0, n_targets=6)
    jobs, _ = plan(case, methods=("l1-representer", "random"), seed=0)
    base = [case.prediction(t) for t in range(6)]
    rows = [
        dict(method=j.method, side="DEL+" if j.sign > 0 else "DEL-", trial=0, target=j.target, delta=d)
        for j, c in zip(jobs, deletion_curves(LocalMapper(), case, jobs, base))
        for d in c
    ]
    table = auc_del(rows)
    assert table[("l1-representer", "DEL+")].mean < 0 < table[("l1-representer", "DEL-")].mean
    assert abs(table[("random", "DEL+")].mean) < abs(table[("l1-representer", "DEL+")].mean)


def test_summary_ci():
    s = summarise([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and s.count == 3 and s.half_width == pytest.approx(4.303 * 1 / np.sqrt(3), rel=1e-3)


def test_fia_is_the_derivative_of_the_restricted_refit():
    """FIA for MF = d ŷ(u, j)/dε when z is upweighted by ε and only U_u (or V_j) is refitted: a ridge solve."""
    from conftest import random_interactions

    from dxplain.evaluation.faithfulness_cf import MFCase, cf_importances
    from dxplain.interactions import Targets
    from dxplain.kernels.als import Pattern, curvature_grams
    from dxplain.models.als.trainer import ALSMF

    d = random_interactions(25, 20, 0.3, seed=5)
    m = ALSMF(k=3, lam=1e-2, seed=0).fit(d)
    seen = set(zip(d.user.tolist(), d.item.tolist()))
    u, j = next((a, b) for a in range(25) for b in range(20) if (a, b) not in seen)
    case = MFCase(d, Targets.from_pairs(np.array([u]), np.array([j])), m)
    grams = curvature_grams(m.U, m.V, Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items), len(d))
    ((rows, fia),) = cf_importances(case, "fia", grams=grams)
    n, y = len(d), d.rating - m.mu

    def refit_user(w):  # argmin_U (1/n) Σ_k w_k (y_k − U·V_k)² + (λ/2)‖U‖² over the user's ratings
        r = np.flatnonzero(d.user == u)
        A = (m.V[d.item[r]] * w[r, None]).T @ m.V[d.item[r]] * 2 / n + m.lam * np.eye(3)
        return np.linalg.solve(A, (m.V[d.item[r]] * (w[r] * y[r])[:, None]).sum(axis=0) * 2 / n)

    base = refit_user(np.ones(n))
    np.testing.assert_allclose(base, m.U[u], atol=1e-7)  # the model is at its optimum
    eps, checked = 1e-6, 0
    for x, s in zip(rows, fia):
        if d.user[x] != u:
            continue
        w = np.ones(n)
        w[x] += eps
        assert (refit_user(w) - base) @ m.V[j] / eps == pytest.approx(s, rel=1e-4, abs=1e-9)
        checked += 1
    assert checked >= 3


def test_cf_plan_deletes_only_ratings_of_the_targets_user_or_item():
    from conftest import random_interactions

    from dxplain.evaluation.faithfulness_cf import MFCase, cf_plan
    from dxplain.interactions import Targets
    from dxplain.models.als.trainer import ALSMF

    d = random_interactions(40, 30, 0.3, seed=6)
    m = ALSMF(k=3, lam=1e-2, seed=0).fit(d)
    seen = set(zip(d.user.tolist(), d.item.tolist()))
    pairs = [(a, b) for a in range(40) for b in range(30) if (a, b) not in seen][:3]
    case = MFCase(d, Targets.from_pairs(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])), m)
    jobs, ms = cf_plan(case, fractions=(0.05, 0.2))
    assert set(ms) == {"representer", "fia", "random"} and {j.method for j in jobs} == set(ms)
    for j in jobs:
        u, i = pairs[j.target]
        n_cand = int(np.sum((d.user == u) | (d.item == i)))
        for f, rows in zip((0.05, 0.2), j.sets):
            assert np.all((d.user[rows] == u) | (d.item[rows] == i))
            assert len(rows) <= int(np.ceil(f * n_cand))
    base = [case.prediction(t) for t in range(3)]
    curves = deletion_curves(LocalMapper(), case, jobs[:2], base)
    assert all(len(c) == 2 and np.all(np.isfinite(c)) for c in curves)


def test_tracin_is_the_first_order_effect_of_one_sgd_step():
    from conftest import random_interactions

    from dxplain.models.sgd_mf import Checkpoint, tracin_cp

    d = random_interactions(20, 15, 0.4, seed=7)
    rng = np.random.default_rng(0)
    U, V, mu, eta = rng.normal(size=(20, 4)), rng.normal(size=(15, 4)), 3.0, 1e-7
    u, j = 2, 5
    rows = np.flatnonzero((d.user == u) | (d.item == j))
    score = tracin_cp([Checkpoint(U, V, eta)], d, rows, mu, u, j)
    for x, s in zip(rows, score):
        a, b = d.user[x], d.item[x]
        r = d.rating[x] - mu - U[a] @ V[b]
        U2, V2 = U.copy(), V.copy()
        U2[a] += eta * 2 * r * V[b]  # one SGD step on z alone: θ ← θ − η∇(y − ŷ)²
        V2[b] += eta * 2 * r * U[a]
        assert U2[u] @ V2[j] - U[u] @ V[j] == pytest.approx(s, rel=1e-5, abs=1e-14)


def test_sgd_mf_is_deterministic_and_deletion_only_removes_rows():
    from conftest import random_interactions

    from dxplain.models.sgd_mf import SGDMF

    d = random_interactions(30, 20, 0.3, seed=8)
    fit = SGDMF(k=3, lr=0.5, batch=16, epochs=3, seed=4)
    a, b = fit.fit(d), fit.fit(d, drop=np.array([], dtype=int))
    np.testing.assert_array_equal(a.U, b.U)
    assert len(a.checkpoints) == 3 and a.checkpoints[-1].lr == 0.5
    c = fit.fit(d, drop=np.array([0, 5]))
    assert c.n_train == len(d) - 2 and not np.allclose(c.U, a.U)


def _two_tower_problem(seed=9):
    import pyarrow as pa
    from conftest import random_interactions

    from dxplain.models.two_tower import TwoTower, encode_features

    d = random_interactions(25, 18, 0.35, seed=seed)
    rng = np.random.default_rng(seed)
    users = pa.table(
        {
            "id": np.arange(25),
            "age": rng.integers(18, 70, 25),
            "gender": rng.choice(["F", "M"], 25),
            "zip": [f"{z:05d}" for z in range(25)],
        }
    )
    return d, TwoTower(encode_features(users, max_categories=10), k=4, hidden=6, batch=20, epochs=3, seed=1)


def test_two_tower_features_and_backpropagation_match_finite_differences():
    import scipy.sparse as sp

    d, tt = _two_tower_problem()
    assert tt.F.shape == (25, 3)  # age standardised + gender one-hot; the id and the 25 zip codes left out
    np.testing.assert_allclose(tt.F[:, 0].mean(), 0, atol=1e-12)
    rng = np.random.default_rng(0)
    params = tt._init(rng, d.n_items)
    H = sp.random_array((25, 18), density=0.3, random_state=2, format="csr")
    users, G = np.array([1, 4, 7, 20]), rng.normal(size=(4, 4))

    def loss(ps):  # ⟨G, f(users)⟩: its gradient is what _tower_grads back-propagates from g_f = G
        return float(np.sum(G * tt._tower(ps, users, H[users])[-1]))

    g_E, g_W = tt._tower_grads(params, H[users], tt._tower(params, users, H[users]), G)
    for which, grad in [(0, g_E)] + [(2 + n, g) for n, g in enumerate(g_W)]:
        for idx in list(np.ndindex(grad.shape))[::5][:6]:
            up = [p.copy() for p in params]
            dn = [p.copy() for p in params]
            up[which][idx] += 1e-6
            dn[which][idx] -= 1e-6
            assert (loss(up) - loss(dn)) / 2e-6 == pytest.approx(grad[idx], rel=1e-5, abs=1e-8)


def test_two_tower_is_deterministic_and_deletion_removes_rows_from_batches_and_histories():
    d, tt = _two_tower_problem()
    a, b = tt.fit(d), tt.fit(d, drop=np.array([], dtype=int))
    np.testing.assert_array_equal(a.U, b.U)
    assert a.kind == "two-tower" and a.lam is None and a.U.shape == (25, 4) and a.V.shape == (18, 4)
    np.testing.assert_allclose(a.predict(d.user, d.item), a.mu + np.einsum("nk,nk->n", a.U[d.user], a.V[d.item]))
    # Deleting user 0's ratings changes the model; deleting only one of them changes it differently.
    rows = np.flatnonzero(d.user == 0)
    c = tt.fit(d, drop=rows)
    assert c.n_train == len(d) - len(rows) and not np.allclose(c.U, a.U)
    first = tt.fit(d, drop=rows[:1])
    assert not np.allclose(first.U, a.U) and not np.allclose(first.U, c.U)


def test_two_tower_case_runs_the_deletion_plan():
    from dxplain.evaluation.faithfulness_cf import MFCase, cf_plan
    from dxplain.interactions import Targets

    d, tt = _two_tower_problem()
    seen = set(zip(d.user.tolist(), d.item.tolist()))
    pairs = [(a, b) for a in range(25) for b in range(18) if (a, b) not in seen][:2]
    case = MFCase(
        d, Targets.from_pairs(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])), tt.fit(d), two_tower=tt
    )
    jobs, ms = cf_plan(case, fractions=(0.1, 0.3))
    assert set(ms) == {"representer", "fia", "random"}
    base = [case.prediction(t) for t in range(2)]
    curves = deletion_curves(LocalMapper(), case, jobs[:3], base)
    for job, c in zip(jobs[:3], curves):  # each point is a real retraining without that set
        retrained = case.retrain_without(job.sets[0])
        u, i = pairs[job.target]
        assert c[0] == pytest.approx(retrained.predict(np.array([u]), np.array([i]))[0] - base[job.target])


def test_l1_solver_reaches_kkt_on_raw_badly_scaled_features_with_p_much_larger_than_n():
    import warnings

    from dxplain.models.sparse_logistic import L1Logistic

    rng = np.random.default_rng(0)
    n, p = 60, 3000  # p ≫ n, raw feature values in the hundreds (as arcene's)
    X = np.abs(rng.normal(size=(n, p))) * rng.choice([1.0, 10.0, 100.0, 900.0], p) * (rng.random((n, p)) < 0.5)
    w = np.zeros(p)
    w[rng.choice(p, 15, replace=False)] = rng.normal(size=15) / 100
    y = (X @ w > np.median(X @ w)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning: the solver gets there
        m = L1Logistic(lam=0.02).fit(X, y)
    assert m.kkt_violation <= 1e-8
    assert 0 < len(m.support) <= n


def test_l1_solver_warns_with_the_achieved_value_when_it_stops_short(monkeypatch):
    from dxplain.errors import ConvergenceWarning
    from dxplain.models import sparse_logistic as SL

    monkeypatch.setattr(SL, "proximal_newton", lambda X, y, theta, b, *a, **k: (theta, b))  # no polish
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 300)) * 500
    y = (rng.random(40) < 0.5).astype(float)
    with pytest.warns(ConvergenceWarning, match=r"KKT violation of \d\.\de-\d+, above 1e-08"):
        SL.L1Logistic(lam=0.01, max_iter=3).fit(X, y)


def test_a_failing_method_is_recorded_and_the_trial_goes_on(monkeypatch):
    from dxplain.evaluation import faithfulness as FA
    from dxplain.evaluation.deletion import curve_rows
    from dxplain.evaluation.report import auc_del_markdown

    case = trial_case(*load_tabular("synthetic-small"), trial=0, n_targets=2)
    real = FA.importances

    def influence_breaks(case, method, seed=0):
        if method == "influence":
            raise np.linalg.LinAlgError("6-th leading minor of the array is not positive definite")
        return real(case, method, seed)

    monkeypatch.setattr(FA, "importances", influence_breaks)
    jobs, ms = plan(case, seed=0)
    assert ms["influence"] is None and ms["l1-representer"] > 0
    failed = [j for j in jobs if j.method == "influence"]
    assert len(failed) == 2 * 2 and all(j.failure.startswith("LinAlgError") and not j.sets for j in failed)
    base = [case.prediction(t) for t in range(2)]
    curves = deletion_curves(LocalMapper(), case, jobs, base)
    rows = curve_rows(0, jobs, curves)
    assert {r["method"] for r in rows if r["failure"] is None} == {"l1-representer", "l2-representer", "random"}
    md = auc_del_markdown(rows, ms, "t")
    assert "| influence | — | — | 0 + 0 | failed |" in md and "not positive definite" in md


def test_influence_on_a_singular_restricted_hessian_is_damped_not_a_crash():
    from dxplain.kernels.sparse_representers import influence_active_set

    rng = np.random.default_rng(2)
    x = rng.normal(size=(30, 1))
    X = np.hstack([x, x, rng.normal(size=(30, 2))])  # two identical support columns: H_q is singular
    theta = np.array([0.5, 0.5, 0.2, 0.0])
    d2 = np.full(30, 0.25)
    I = influence_active_set(X, rng.normal(size=30) * 0.1, d2, theta, 0.01, X[:3])
    assert I.shape == (30, 3) and np.isfinite(I).all()
