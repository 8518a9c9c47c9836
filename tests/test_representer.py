"""Contract tests of the representer explainer: batched = per-pair reference, identity, locality, top-k."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import random_interactions

from dxplain.explain.representer import Preprocessed, RepresenterExplainer
from dxplain.explain.targets import recommend
from dxplain.interactions import Targets
from dxplain.kernels import representer as K
from dxplain.kernels.balance import balance_transforms
from dxplain.models.als.trainer import ALSMF
from dxplain.models.base import FactorModel


def test_balance_transforms_keep_the_product_and_balance_the_grams():
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(50, 6)) * [3, 2, 1, 1, 0.5, 0.1], rng.normal(size=(40, 6))
    T_U, T_V = balance_transforms(U, V)
    Ut, Vt = U @ T_U, V @ T_V
    np.testing.assert_allclose(Ut @ Vt.T, U @ V.T, atol=1e-10)
    np.testing.assert_allclose(Ut.T @ Ut, Vt.T @ Vt, atol=1e-9)
    G = Ut.T @ Ut
    np.testing.assert_allclose(G, np.diag(np.diag(G)), atol=1e-9)  # ŨᵀŨ = Σ₃, diagonal


def test_balance_transforms_drop_collapsed_directions():
    rng = np.random.default_rng(1)
    U = np.hstack([rng.normal(size=(30, 2)), np.zeros((30, 3))])
    V = np.hstack([rng.normal(size=(20, 2)), np.zeros((20, 3))])
    T_U, T_V = balance_transforms(U, V)
    assert T_U.shape == (5, 2)
    np.testing.assert_allclose((U @ T_U) @ (V @ T_V).T, U @ V.T, atol=1e-10)


def naive_attributions(data, pre, targets):
    """Definition 1 pair by pair: every training interaction sharing the user (item side) or item (user side)."""
    rows = []
    for t in range(len(targets)):
        i_, j_ = targets.user[t], targets.item[t]
        for n in range(len(data)):
            if data.user[n] == i_:
                rows.append((t, "item", n, pre.alpha[n], float(pre.Vt[data.item[n]] @ pre.Vt[j_])))
            if data.item[n] == j_:
                rows.append((t, "user", n, pre.alpha[n], float(pre.Ut[data.user[n]] @ pre.Ut[i_])))
    return rows


@pytest.fixture
def fitted():
    d = random_interactions(25, 20, 0.3, seed=5)
    m = ALSMF(k=4, lam=5e-3, tol=1e-10).fit(d)
    return d, Preprocessed.from_model(m, d)


def _targets(d, n=30, seed=0):
    rng = np.random.default_rng(seed)
    key = rng.choice(d.n_users * d.n_items, size=n, replace=False)
    return Targets.from_pairs(key // d.n_items, key % d.n_items, np.arange(1, n + 1))


def test_batched_equals_per_pair_reference(fitted):
    d, pre = fitted
    t = _targets(d)
    ex = RepresenterExplainer(d, pre)
    got = {}
    for side, a in (("item", ex.item_side(t, 0)), ("user", ex.user_side(t, 0))):
        for tg, tr, g, loc in zip(a.target, a.train, a.global_importance, a.local_importance):
            got[(int(tg), side, int(tr))] = (g, loc)
    ref = naive_attributions(d, pre, t)
    assert len(got) == len(ref)
    for tg, side, n, g, loc in ref:
        assert got[(tg, side, n)] == pytest.approx((g, loc), rel=1e-10, abs=1e-12)


def test_identity_each_side_sums_to_the_score(fitted):
    d, pre = fitted
    t = _targets(d)
    ex = RepresenterExplainer(d, pre)
    s = ex.scores(t)
    for a in (ex.item_side(t, 0), ex.user_side(t, 0)):
        total = np.bincount(a.target, weights=a.importance, minlength=len(t))
        np.testing.assert_allclose(total, s, rtol=1e-6, atol=1e-9)
    item_sum, user_sum = ex.side_sums(t)
    np.testing.assert_allclose(item_sum, s, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(user_sum, s, rtol=1e-6, atol=1e-9)


def test_identity_fails_for_an_unconverged_model(fitted):
    """The identity is a real check: a model stopped early does not satisfy it."""
    d, _ = fitted
    m = ALSMF(k=4, lam=5e-3, max_sweeps=1, newton_steps=0).fit(d)
    ex = RepresenterExplainer(d, Preprocessed.from_model(m, d))
    t = _targets(d)
    item_sum, _ = ex.side_sums(t)
    assert np.max(np.abs(item_sum - ex.scores(t))) > 1e-3


def test_top_k_picks_the_largest_positive_and_negative(fitted):
    d, pre = fitted
    t = _targets(d, 12, seed=3)
    ex = RepresenterExplainer(d, pre)
    full, top = ex.item_side(t, 0), ex.item_side(t, 2)
    for tg in range(len(t)):
        imp_all = full.importance[full.target == tg]
        imp_top = np.sort(top.importance[top.target == tg])
        pos = np.sort(imp_all[imp_all > 0])[-2:]
        neg = np.sort(imp_all[imp_all < 0])[:2]
        np.testing.assert_allclose(imp_top, np.sort(np.concatenate([neg, pos])), rtol=1e-12)


def test_attributions_touch_only_the_users_items_and_the_items_users(fitted):
    d, pre = fitted
    t = _targets(d)
    ex = RepresenterExplainer(d, pre)
    a = ex.item_side(t, 0)
    assert np.all(d.user[a.train] == t.user[a.target])
    b = ex.user_side(t, 0)
    assert np.all(d.item[b.train] == t.item[b.target])


def test_heavy_groups_split_exactly(fitted, monkeypatch):
    d, pre = fitted
    t = _targets(d, 60, seed=9)
    ex = RepresenterExplainer(d, pre)
    ref = ex.user_side(t, 3)
    monkeypatch.setattr(K, "ELEMENT_BUDGET", 20)  # every item's raters × targets product is split
    g, _ = ex.groups(t, "user")
    assert len(K.split_heavy_groups(g).hist_ptr) > 2 * len(g.hist_ptr)  # the split really happens
    got = ex.user_side(t, 3)

    def key(a):
        return sorted(zip(a.target.tolist(), a.train.tolist(), np.round(a.importance, 12).tolist()))

    assert key(got) == key(ref)


def test_explain_table_schema_ids_and_order(fitted):
    d, pre = fitted
    t = _targets(d, 5)
    tab = RepresenterExplainer(d, pre).explain(t, top_k=3)
    assert tab.column_names == [
        "user",
        "item",
        "prediction",
        "score",
        "rec_rank",
        "side",
        "train_user",
        "train_item",
        "rating",
        "global_importance",
        "local_importance",
        "importance",
        "kind",
    ]
    assert set(tab.column("kind").cast(pa.string()).to_pylist()) == {"interaction"}  # a plain model: no extra row
    assert set(tab.column("user").to_pylist()) <= set(d.user_ids.to_pylist())
    np.testing.assert_allclose(tab.column("prediction").to_numpy(), tab.column("score").to_numpy() + pre.mu)
    np.testing.assert_allclose(
        tab.column("importance").to_numpy(),
        tab.column("global_importance").to_numpy() * tab.column("local_importance").to_numpy(),
    )
    item_rows = tab.filter(pc.equal(tab.column("side").cast(pa.string()), "item"))
    assert item_rows.column("train_user").to_pylist() == item_rows.column("user").to_pylist()


def test_dropping_lambda_keeps_relative_importance(fitted):
    d, pre = fitted
    m = FactorModel(pre.Ut, pre.Vt, pre.mu, None, len(d))  # factors imported without a λ
    no_lam = Preprocessed.from_model(m, d)
    ratio = no_lam.alpha / pre.alpha
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-8)


def test_recommend_excludes_seen_and_matches_brute_force(fitted):
    d, pre = fitted
    users = np.arange(d.n_users)
    t = recommend(pre.Ut, pre.Vt, d, users, n=4, budget=3 * d.n_items)  # several user blocks
    S = pre.Ut @ pre.Vt.T
    S[d.user, d.item] = -np.inf
    for u in users:
        got = t.item[t.user == u]
        np.testing.assert_array_equal(got, np.argsort(-S[u], kind="stable")[:4])
        assert np.all(t.rec_rank[t.user == u] == np.arange(1, 5))


@pytest.mark.parametrize(
    "shape,top_k,d_real",
    [
        ((3, 4, 40), 3, 40),
        ((2, 5, 700), 10, 700),
        ((1, 3, 5000), 25, 5000),
        ((4, 2, 6), 10, 6),
        ((3, 4, 2000), 5, 1100),
    ],
)
def test_pruned_selection_equals_argpartition_selection(shape, top_k, d_real, monkeypatch):
    rng = np.random.default_rng(sum(shape))
    imp = rng.standard_normal(shape) * rng.random(shape) ** 3
    imp[..., ::7] = 0.0  # zeros must never be selected
    imp[0, 0, :] = np.abs(imp[0, 0, :])  # a row without negatives
    imp[-1, :, d_real + (shape[2] - d_real) // 2 :] = 0.0  # bucket padding: a row shorter than the block
    got = K._select_top_k(imp, top_k, d_real)
    monkeypatch.setattr(K, "PRUNE_FACTOR", 10**9)  # force the argpartition path
    ref = K._select_top_k(imp, top_k)

    def as_set(sel):
        return set(zip(*(x.tolist() for x in sel)))

    assert as_set(got) == as_set(ref)
    for b in range(shape[0]):
        for t in range(shape[1]):
            row = imp[b, t]
            want = set(np.flatnonzero(row > 0)[np.argsort(-row[row > 0])][:top_k]) | set(
                np.flatnonzero(row < 0)[np.argsort(row[row < 0])][:top_k]
            )
            assert {d for bb, tt, d in as_set(got) if (bb, tt) == (b, t)} == want


@pytest.mark.parametrize("long_row", [False, True, "streamed"])
@pytest.mark.parametrize("top_k", [0, 3])
def test_grouped_attributions_equal_a_dense_reference_in_both_product_layouts(long_row, top_k, monkeypatch):
    """Groups of mixed history lengths against dense α·(F_tgt F_histᵀ), computed as (B,d,t) or as (B,t,d)
    or, for groups over the block budget, streamed in (target chunk × history chunk) blocks and merged."""
    monkeypatch.setattr(K, "LONG_ROW", 1 if long_row else 10**9)
    if long_row == "streamed":
        monkeypatch.setattr(K, "ELEMENT_BUDGET", 40)  # products of 1 target × 40 rows: up to 3 chunks to merge
    rng = np.random.default_rng(7)
    n_hist, n_rows, k = 2000, 60, 5
    d = rng.integers(1, 90, size=12)
    d[3] = 0  # a group with no history
    t = rng.integers(1, 6, size=12)
    hist = rng.permutation(n_hist)[: d.sum()]  # distinct training interactions
    g = K.Groups(
        np.concatenate([[0], np.cumsum(d)]),
        hist,
        rng.integers(0, n_rows, len(hist)),
        np.concatenate([[0], np.cumsum(t)]),
        np.arange(t.sum()),
        rng.integers(0, n_rows, t.sum()),
    )
    alpha = rng.standard_normal(n_hist)
    F = rng.standard_normal((n_rows, k))
    a = K.grouped_attributions(g, alpha, F, F, top_k)
    got = {
        (int(x), int(y)): (gl, lo) for x, y, gl, lo in zip(a.target, a.train, a.global_importance, a.local_importance)
    }
    want = {}
    for grp in range(len(d)):
        hs = np.arange(g.hist_ptr[grp], g.hist_ptr[grp + 1])
        for p in range(g.tgt_ptr[grp], g.tgt_ptr[grp + 1]):
            local = F[g.hist_row[hs]] @ F[g.tgt_row[p]]
            imp = alpha[g.hist[hs]] * local
            keep = (
                np.arange(len(hs))
                if top_k == 0
                else np.concatenate(
                    [
                        np.argsort(-imp)[:top_k][np.sort(-imp)[:top_k] < 0],
                        np.argsort(imp)[:top_k][np.sort(imp)[:top_k] < 0],
                    ]
                )
            )
            for q in keep:
                want[(int(g.tgt[p]), int(g.hist[hs[q]]))] = (alpha[g.hist[hs[q]]], local[q])
    assert got.keys() == want.keys() and len(a.target) == len(want)
    for key, val in want.items():
        assert got[key] == pytest.approx(val, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("top_k", [1, 4])
def test_norm_ordered_search_is_exact_when_it_stops_early(top_k):
    """Rows with very uneven norms (as α makes them): the Cauchy–Schwarz stop must not lose any top-k row."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((5000, 6)) * np.exp(rng.normal(scale=2.5, size=5000))[:, None]
    X[7] = 0.0  # a zero row is never selected
    T = rng.standard_normal((300, 6))
    tt, dd = K._norm_ordered_top_k(X, T, top_k, budget=2000)  # blocks of a few rows: many rounds, early stops
    S = T @ X.T
    got = set(zip(tt.tolist(), dd.tolist()))
    want = {(u, int(i)) for u in range(len(T)) for i in np.argsort(-S[u])[:top_k]} | {
        (u, int(i)) for u in range(len(T)) for i in np.argsort(S[u])[:top_k]
    }
    assert got == want and len(tt) == 2 * top_k * len(T)


def test_approximate_heavy_item_search_finds_the_exact_top_k_and_reports_exact_values(monkeypatch):
    """HNSW (faiss) on the inner product: nearly every exact top-k rater found, and every value exact."""
    pytest.importorskip("faiss")
    from dxplain.explain.ann import hnsw_search

    monkeypatch.setattr(K, "LONG_ROW", 100)
    monkeypatch.setattr(K, "ELEMENT_BUDGET", 10_000)  # the group (3000 rows × 40 targets) is heavy
    rng = np.random.default_rng(3)
    n_hist, k = 3000, 8
    g = K.Groups(
        np.array([0, n_hist]),
        np.arange(n_hist),
        np.arange(n_hist),
        np.array([0, 40]),
        np.arange(40),
        n_hist + np.arange(40),
    )
    F = rng.standard_normal((n_hist + 40, k))
    alpha = rng.standard_normal(n_hist)
    exact = K.grouped_attributions(g, alpha, F, F, 5)
    calls = []
    search = hnsw_search(ef_search=64)
    approx = K.grouped_attributions(g, alpha, F, F, 5, lambda X, T, m: calls.append(len(X)) or search(X, T, m))
    assert calls == [n_hist]
    key = lambda a: set(zip(a.target.tolist(), a.train.tolist()))  # noqa: E731
    assert len(key(approx) & key(exact)) >= 0.95 * len(key(exact))
    np.testing.assert_allclose(
        approx.importance,
        alpha[approx.train] * np.einsum("ij,ij->i", F[n_hist + approx.target], F[approx.train]),
        rtol=1e-12,
    )
    with pytest.raises(ValueError, match="top_k > 0"):
        K.grouped_attributions(g, alpha, F, F, 0, hnsw_search())


def test_row_order_is_by_target_then_decreasing_importance_ties_in_input_order():
    from dxplain.explain.run_rows import row_order

    rng = np.random.default_rng(3)
    target = rng.integers(0, 50, 2000)
    importance = rng.choice([-1.5, -0.25, 0.0, 0.25, 2.0], 2000)  # many ties, both signs
    importance[::7] = rng.standard_normal(len(importance[::7]))
    assert np.array_equal(row_order(target, importance), np.lexsort((-importance, target)))
    assert len(row_order(np.empty(0, np.int64), np.empty(0))) == 0
