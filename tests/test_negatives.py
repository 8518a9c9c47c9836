"""Negative-sample aggregation: closed forms against naive sums, the BCE model, the streaming scan."""

import numpy as np
import pytest
from conftest import random_interactions
from scipy.special import expit

from dxplain.explain import negatives as N
from dxplain.explain import negatives_parts as NP
from dxplain.kernels.bce import SparseTerms
from dxplain.kernels.negatives import LowestK
from dxplain.models.implicit_mf import ImplicitMF, ImplicitModel, dense_terms, positive_pairs, sample_negatives

W = 0.05


def setup(seed=0, n_users=9, n_items=11, k=3, excluded=True):
    rng = np.random.default_rng(seed)
    data = random_interactions(n_users, n_items, density=0.35, seed=seed)
    P = positive_pairs(data, 4)
    ex = None
    if excluded:
        ex = (rng.integers(0, n_users, 6), rng.integers(0, n_items, 6))
    terms = dense_terms(P, W, ex)
    U, V = rng.normal(size=(n_users, k)), rng.normal(size=(n_items, k))
    model = ImplicitModel(U, V, lam=0.3, n_train=terms.n_terms, neg_weight=W, negatives="all", grad_norm=np.nan)
    return P, terms, model


def negatives_of(terms):
    """(u, i) of every negative in N, from the dense weights (c = w)."""
    C, Y = terms.tile(0, terms.n_users)
    return np.nonzero((C == W) & (Y == 0))


def test_representer_aggregate_equals_naive_sum_over_positives():
    P, terms, m = setup()
    score = N.negative_score("representer", m, terms, P)
    Ut, Vt = score.Us, score.Vs
    nu, ni = negatives_of(terms)
    naive = []
    for i, j in zip(nu, ni):
        alpha = -W * expit(Ut[i] @ Vt[j]) / (m.lam * m.n_train)
        total = sum(alpha * Vt[j] @ Vt[jp] for jp in P.item[P.user == i])  # positives of the same user
        total += sum(alpha * Ut[i] @ Ut[ip] for ip in P.user[P.item == j])  # positives of the same item
        naive.append(total)
    assert len(naive) == terms.n_neg
    np.testing.assert_allclose(score.pairs(nu, ni), naive, rtol=1e-10, atol=1e-14)
    # The float32 scan block holds the same values; non-negatives are not candidates.
    block = score.tile(0, terms.n_users)
    np.testing.assert_allclose(block[nu, ni], naive, rtol=1e-4, atol=1e-7 * np.abs(naive).max())


def test_fia_aggregate_equals_naive_influence_sum():
    """Per positive z', H_θ from Hessian-vector products of the whole objective (an independent path),
    then −(c ℓ'_z/|D|) ∇_θ s_z · H_θ⁻¹ ∇_θ s_z' summed over the positives sharing z's user or item."""
    P, terms, m = setup(seed=1)
    k, nU = m.k, m.U.size
    n_par = nU + m.V.size
    score = N.negative_score("fia", m, terms, P)
    nu, ni = negatives_of(terms)
    naive = np.zeros(len(nu))
    for ip, jp in zip(P.user, P.item):
        idx = np.concatenate([ip * k + np.arange(k), nU + jp * k + np.arange(k)])  # θ = (U_i', V_j')
        H = np.empty((2 * k, 2 * k))
        for c, e in enumerate(idx):
            v = np.zeros(n_par)
            v[e] = 1.0
            hU, hV = terms.hessp(m.U, m.V, v[:nU].reshape(m.U.shape), v[nU:].reshape(m.V.shape), m.lam)
            H[:, c] = np.concatenate([hU.ravel(), hV.ravel()])[idx]
        x = np.linalg.solve(H, np.concatenate([m.V[jp], m.U[ip]]))
        for n, (i, j) in enumerate(zip(nu, ni)):
            if i != ip and j != jp:
                continue
            grad_s = np.concatenate([m.V[j] if i == ip else np.zeros(k), m.U[i] if j == jp else np.zeros(k)])
            d1 = W * expit(m.U[i] @ m.V[j])  # c ℓ' of a negative (y = 0)
            naive[n] += -(d1 / m.n_train) * grad_s @ x
    np.testing.assert_allclose(score.pairs(nu, ni), naive, rtol=1e-8, atol=1e-14)


def test_dense_and_sparse_terms_agree():
    P, terms, m = setup(seed=2)
    nu, ni = negatives_of(terms)
    sparse = SparseTerms.from_pairs(terms.n_users, terms.n_items, P.user, P.item, nu, ni, W)
    assert sparse.n_terms == terms.n_terms and sparse.n_neg == terms.n_neg
    rng = np.random.default_rng(0)
    dU, dV = rng.normal(size=m.U.shape), rng.normal(size=m.V.shape)
    for a, b in zip(terms.fun_grad(m.U, m.V, m.lam), sparse.fun_grad(m.U, m.V, m.lam)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    for a, b in zip(terms.hessp(m.U, m.V, dU, dV, m.lam), sparse.hessp(m.U, m.V, dU, dV, m.lam)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    for a, b in zip(terms.curvature_grams(m.U, m.V), sparse.curvature_grams(m.U, m.V)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-16)


def test_gradient_and_hessian_vector_match_finite_differences():
    P, terms, m = setup(seed=3)
    rng = np.random.default_rng(1)
    dU, dV = rng.normal(size=m.U.shape), rng.normal(size=m.V.shape)
    f, gU, gV = terms.fun_grad(m.U, m.V, m.lam)
    h = 1e-6
    fp = terms.fun_grad(m.U + h * dU, m.V + h * dV, m.lam)
    fm = terms.fun_grad(m.U - h * dU, m.V - h * dV, m.lam)
    assert (fp[0] - fm[0]) / (2 * h) == pytest.approx(np.sum(gU * dU) + np.sum(gV * dV), rel=1e-6)
    hU, hV = terms.hessp(m.U, m.V, dU, dV, m.lam)
    np.testing.assert_allclose((fp[1] - fm[1]) / (2 * h), hU, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose((fp[2] - fm[2]) / (2 * h), hV, rtol=1e-5, atol=1e-9)


def test_trained_model_satisfies_representer_identity():
    """At the optimum U_i = Σ_j α_ij V_j over every term of user i (positives and negatives alike)."""
    data = random_interactions(30, 25, density=0.3, seed=4)
    P = positive_pairs(data, 4)
    terms = dense_terms(P, W)
    lam = 0.2 / terms.n_terms  # a small ridge, so that the scores are far from 0
    m = ImplicitMF(k=4, lam=lam, seed=1).fit(terms)
    assert m.grad_norm <= 1e-4 * m.lam
    C, Y = terms.tile(0, terms.n_users)
    S = m.U @ m.V.T
    alpha = -C * (expit(S) - Y) / (m.lam * m.n_train)
    pu, pi = P.user, P.item
    assert np.abs(S[pu, pi]).min() > 0.1
    item_side = np.einsum("tj,jk,tk->t", alpha[pu], m.V, m.V[pi])  # Σ_j α_i'j ⟨V_j, V_j'⟩ per positive target
    np.testing.assert_allclose(item_side, S[pu, pi], rtol=1e-3)
    user_side = np.einsum("it,ik,tk->t", alpha[:, pi], m.U, m.U[pu])
    np.testing.assert_allclose(user_side, S[pu, pi], rtol=1e-3)
    # Deterministic for a seed.
    m2 = ImplicitMF(k=4, lam=lam, seed=1).fit(terms)
    np.testing.assert_array_equal(m.U, m2.U)


def brute_force_lowest(values, K):
    r, c = np.nonzero(np.isfinite(values))
    v = values[r, c]
    order = np.lexsort((c, r, v))[:K]
    return v[order], r[order], c[order]


@pytest.mark.parametrize("method", ["representer", "fia", "loss", "random"])
def test_scan_keeps_exactly_the_lowest_and_any_split_agrees(method):
    P, terms, m = setup(seed=5, n_users=13, n_items=17)
    score = N.negative_score(method, m, terms, P, seed=3)
    K = N.flag_count(terms, 10)
    blocks = np.vstack([score.tile(a, min(a + 2, terms.n_users)) for a in range(0, terms.n_users, 2)])
    C, Y = terms.tile(0, terms.n_users)
    blocks[(C != W) | (Y != 0)] = np.inf
    want = brute_force_lowest(blocks, K)
    got = N.scan(score, terms, K, tile_rows=2)  # small tiles: the scan streams and compacts
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # The union of aligned shards, merged, is the same selection (what the cluster path relies on).
    merged = LowestK(K)
    for a, b in ((6, 13), (0, 2), (2, 6)):
        merged.push(*N.scan(score, terms, K, rows=(a, b), tile_rows=2))
    for a, b in zip(merged.result(), want):
        np.testing.assert_array_equal(a, b)
    assert not np.isin(got[1] * terms.n_items + got[2], P.user.astype(np.int64) * terms.n_items + P.item).any()


def test_lowest_k_breaks_ties_by_row_then_column():
    keep = LowestK(3)
    keep.push(np.array([1.0, 1.0, 0.5, 1.0]), np.array([2, 0, 9, 0]), np.array([0, 5, 1, 3]))
    keep.push(np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 0]))
    v, r, c = keep.result()
    assert v.tolist() == [0.5, 1.0, 1.0] and r.tolist() == [9, 0, 0] and c.tolist() == [1, 3, 5]


def test_table_mode_on_sampled_negatives():
    data = random_interactions(20, 40, density=0.2, seed=6)
    P = positive_pairs(data, 3)
    nu, ni = sample_negatives(P, 2, seed=0)
    again = sample_negatives(P, 2, seed=0)
    assert np.array_equal(nu, again[0]) and np.array_equal(ni, again[1])
    keys = nu * P.n_items + ni
    assert len(np.unique(keys)) == len(keys)
    assert not np.isin(keys, P.user.astype(np.int64) * P.n_items + P.item).any()
    np.testing.assert_array_equal(
        np.bincount(nu, minlength=P.n_users), np.minimum(2 * P.user_degree(), P.n_items - P.user_degree())
    )
    terms = SparseTerms.from_pairs(P.n_users, P.n_items, P.user, P.item, nu, ni, W)
    m = ImplicitMF(k=3).fit(terms)
    v, u, i = N.flag("representer", m, terms, P, percent=10)
    assert len(v) == N.flag_count(terms, 10) and np.all(np.diff(v) >= 0)
    all_v = N.negative_score("representer", m, terms, P).pairs(nu, ni)
    assert v[-1] <= np.sort(all_v)[len(v)]  # nothing unflagged scores lower than the last flagged


def test_estimated_bound_keeps_the_selection_exact_and_a_bad_bound_is_caught(monkeypatch):
    P, terms, m = setup(seed=7, n_users=30, n_items=25)
    score = N.negative_score("representer", m, terms, P)
    K = N.flag_count(terms, 3)
    exact = N.scan(score, terms, K, tile_rows=2)
    t = N.estimate_threshold(score, terms, K, tile_rows=2, sample_share=0.3)
    assert np.isfinite(t)
    got = N.lowest(lambda th: N.scan(score, terms, K, tile_rows=2, threshold=th), score, terms, K, 2)
    for a, b in zip(got, exact):
        np.testing.assert_array_equal(a, b)
    # A bound below the K-th lowest value: too few candidates, so the scan is redone without it.
    monkeypatch.setattr(N, "estimate_threshold", lambda *a, **k: float(exact[0][K // 2]))
    calls = []

    def scan_fn(th):
        calls.append(th)
        return N.scan(score, terms, K, tile_rows=2, threshold=th)

    got = N.lowest(scan_fn, score, terms, K, 2)
    assert len(calls) == 2 and calls[1] == np.inf
    for a, b in zip(got, exact):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("method", ["representer", "fia", "loss", "random", "two-rounds"])
def test_sampled_negatives_scored_in_parts_flag_what_the_whole_list_flags(tmp_path, method, monkeypatch, caplog):
    """Each by-user part of the training table scores its own negatives: the same flagged pairs and values
    as ranking the whole list, and the parts' cleaned files hold exactly the rest. ``two-rounds``: a part
    first sends only 2 values, so most parts are asked again for K: still exact."""
    import logging

    import pyarrow.parquet as pq

    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper
    from dxplain.models.implicit_mf import training_table

    data = random_interactions(40, 30, density=0.2, seed=12)
    P = positive_pairs(data, 3)
    nu, ni = sample_negatives(P, 3, seed=1)
    terms = SparseTerms.from_pairs(P.n_users, P.n_items, P.user, P.item, nu, ni, W)
    m = ImplicitMF(k=3).fit(terms)
    table = training_table(P, nu, ni)
    parts = write_partitions(str(tmp_path / "parts"), table, rows_per_part=len(table) // 5)
    assert len(parts.user_cuts) > 4
    if method == "two-rounds":
        monkeypatch.setattr(NP, "SHARE_MARGIN", 0.0)
        monkeypatch.setattr(NP, "SHARE_EXTRA", 2)
        method = "representer"
    score = N.negative_score(method, m, terms, P, seed=3)
    whole = N.flag_table(terms, score, 10)
    with caplog.at_level(logging.INFO, logger=NP.__name__):
        got = NP.select_lowest_parts(score, parts, terms.n_neg, 10, LocalMapper(), tmp_path / "cleaned.parquet")
    asked_again = [r.getMessage() for r in caplog.records if "asked again" in r.getMessage()]
    assert bool(asked_again) == (NP.SHARE_EXTRA == 2), asked_again
    for a, b in zip(got, whole):
        np.testing.assert_array_equal(a, b)
    cleaned = pq.read_table(tmp_path / "cleaned.parquet")
    flagged = set(zip(P.user_ids.take(got[1]).to_pylist(), P.item_ids.take(got[2]).to_pylist()))
    rest = set(zip(cleaned["user"].to_pylist(), cleaned["item"].to_pylist()))
    negs = set(zip(P.user_ids.take(nu).to_pylist(), P.item_ids.take(ni).to_pylist()))
    assert cleaned.num_rows == len(rest) == terms.n_neg - len(flagged) and rest | flagged == negs


def test_random_scores_are_a_function_of_the_pair():
    from dxplain.kernels.negatives import pair_uniform

    u, i = np.repeat(np.arange(50), 40), np.tile(np.arange(40), 50)
    v = pair_uniform(u, i, seed=5)
    assert v.min() >= 0 and v.max() < 1 and abs(v.mean() - 0.5) < 0.03 and len(np.unique(v)) == len(v)
    order = np.random.default_rng(0).permutation(len(u))
    np.testing.assert_array_equal(pair_uniform(u[order], i[order], 5), v[order])
    assert not np.array_equal(pair_uniform(u, i, seed=6), v)


def _sampled(seed=12, n_users=40, n_items=30, k=3):
    from dxplain.models.implicit_mf import training_table

    data = random_interactions(n_users, n_items, density=0.2, seed=seed)
    P = positive_pairs(data, 3)
    nu, ni = sample_negatives(P, 3, seed=1)
    table = training_table(P, nu, ni)
    terms = SparseTerms.from_pairs(P.n_users, P.n_items, P.user, P.item, nu, ni, W)
    rng = np.random.default_rng(seed)
    return table, terms, rng.normal(size=(P.n_users, k)), rng.normal(size=(P.n_items, k))


def test_bce_row_passes_equal_the_whole_table_terms():
    """A slice of rows holding their whole sums gives those rows of ∇f, H·d and the curvature blocks, and
    Σ c ℓ: by-user slices give U's rows, by-item slices V's (the passes training over parts makes)."""
    from dxplain.kernels import bce
    from dxplain.models.als.half_steps import csr_view

    table, terms, U, V = _sampled()
    n, lam = terms.n_terms, 0.01
    rng = np.random.default_rng(1)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    f, gU, gV = terms.fun_grad(U, V, lam)
    hU, hV = terms.hessp(U, V, dU, dV, lam)
    A, B = terms.curvature_grams(U, V)
    for side, (F, Fo, dF, dFo, g, h, C) in {
        "user": (U, V, dU, dV, gU, hU, A),
        "item": (V, U, dV, dU, gV, hV, B),
    }.items():
        view = csr_view(table, table.rating, side)
        got_g, loss = bce.gradient_rows(*view, W, F, Fo, n, lam)
        np.testing.assert_allclose(got_g, g, rtol=1e-12, atol=1e-15)
        assert loss / n + 0.5 * lam * (np.sum(U * U) + np.sum(V * V)) == pytest.approx(f, rel=1e-12)
        np.testing.assert_allclose(bce.hessian_rows(*view, W, F, Fo, dF, dFo, n, lam), h, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(bce.curvature_rows(*view, W, F, Fo, n), C, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("fused", [True, False])
def test_bce_half_step_makes_its_side_stationary_from_any_start(fused, monkeypatch):
    """Newton per row to rounding: ∇_U f = 0 given V, cold or warm started, far off or near; the weighted
    solve of the compiled kernel and of the numpy batches agree."""
    from dxplain.kernels import als, bce
    from dxplain.models.als.half_steps import csr_view

    monkeypatch.setattr(als, "FUSED", fused)
    table, terms, U, V = _sampled(k=5)
    n, lam = terms.n_terms, 0.5 / terms.n_terms  # a small ridge: large scores, curvature far from 1/4
    view = csr_view(table, table.rating, "user")
    results = []
    for X0 in (None, U, 40.0 * U):
        X, iters = bce.newton_rows(*view, W, V, lam * n / 2, X0)
        g, _ = bce.gradient_rows(*view, W, X, V, n, lam)
        assert np.abs(g).max() < 1e-12 * lam * n and 0 < iters < bce.NEWTON_MAX
        results.append(X)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(results[2], results[0], rtol=1e-9, atol=1e-12)


def test_weighted_ridge_solve_is_weighted_least_squares():
    """sw scales each entry's row of F: X_r = (Fᵀ W F + ridge I)⁻¹ Fᵀ W^½ y on rows longer and shorter than k."""
    from dxplain.kernels import als

    table, _, _, V = _sampled(k=6)
    indptr, cols, y = table.user_indptr, table.item, table.rating
    sw = np.random.default_rng(2).uniform(0.1, 2.0, len(y))
    assert np.diff(indptr).min() < 6 < np.diff(indptr).max()  # the dual (d < k) and the primal path
    for fused in (True, False):
        X = als.ridge_solve_rows(indptr, cols, y, V, 0.7, fused=fused, sw=sw)
        for r in range(len(indptr) - 1):
            F = V[cols[indptr[r] : indptr[r + 1]]] * sw[indptr[r] : indptr[r + 1], None]
            want = np.linalg.solve(F.T @ F + 0.7 * np.eye(6), F.T @ y[indptr[r] : indptr[r + 1]])
            np.testing.assert_allclose(X[r], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "method,collapsed", [("representer", False), ("representer", True), ("loss", False), ("random", False)]
)
def test_scores_from_factor_blocks_equal_the_whole_scoring_rule(tmp_path, method, collapsed):
    """A model whose factors are row-block files beside the parts (``models.blocks``): each by-user part's
    scoring rule, built by its task from the blocks' Grams and the parts' sums over the positives (y = 1
    rows), scores the part's negatives as the whole model's rule does; also when UVᵀ has rank below k
    and the balanced factors have fewer columns."""
    from dxplain.io.partitions import write_partitions
    from dxplain.io.row_blocks import Scratch
    from dxplain.mapper import LocalMapper
    from dxplain.models.blocks import Blocks

    table, terms, U, V = _sampled()
    if collapsed:
        U, V = U.copy(), V.copy()
        U[:, -1] = V[:, -1] = 0.0
    P = positive_pairs(table, 0.5)
    model = ImplicitModel(U, V, lam=0.01, n_train=len(table), neg_weight=W, negatives="sampled", grad_norm=np.nan)
    parts = write_partitions(str(tmp_path / "parts"), table, rows_per_part=len(table) // 4)
    mapper, scratch = LocalMapper(), Scratch(parts.root)
    blocks = ImplicitModel(
        Blocks.split(mapper, scratch, U, parts.user_cuts),
        Blocks.split(mapper, scratch, V, parts.item_cuts),
        lam=0.01,
        n_train=len(table),
        neg_weight=W,
        negatives="sampled",
        grad_norm=np.nan,
    )
    want = N.negative_score(method, model, terms, P, seed=3)
    rule = NP.part_scores(method, blocks, parts, seed=3)
    assert len(parts.user_cuts) > 3 and len(parts.item_cuts) > 2
    for p in range(len(parts.user_cuts) - 1):
        nu, ni = NP.part_negatives(parts, p)
        score = rule.at(parts, p, ni)
        if method != "random":
            assert len(score.Us) == parts.user_cuts[p + 1] - parts.user_cuts[p]  # the part's users only
            assert len(score.Vs) == len(np.unique(ni))  # the items its negatives touch only
            assert score.Us.shape[1] == (U.shape[1] - 1 if collapsed else U.shape[1])
        np.testing.assert_allclose(score.pairs(nu, ni), want.pairs(nu, ni), rtol=1e-12)
        # In item order a block of V at a time: the same values as the gathered rows give.
        np.testing.assert_array_equal(rule.scores(parts, p, nu, ni), score.pairs(nu, ni))


def test_negatives_sampled_per_part_are_unobserved_distinct_and_m_per_positive(tmp_path):
    """``sample_in_parts`` over several by-user parts: each part's users get min(M·deg, items − deg)
    distinct unobserved items, in the right ids; the summary is the written table's; the same seed draws
    the same files again."""
    import pyarrow.parquet as pq

    from dxplain.interactions import RowStats
    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper
    from dxplain.models.implicit_mf import sample_in_parts

    P = positive_pairs(random_interactions(50, 30, density=0.25, seed=5), None)
    parts = write_partitions(str(tmp_path / "P"), P, rows_per_part=len(P) // 4)
    assert len(parts.user_cuts) > 3
    folder = tmp_path / "D" / "interactions.parquet"
    summary = sample_in_parts(LocalMapper(), parts, 3, 7, str(folder))
    D = pq.read_table(folder)
    u = np.searchsorted(P.user_ids.to_numpy(zero_copy_only=False), D["user"].to_numpy(zero_copy_only=False))
    i = np.searchsorted(P.item_ids.to_numpy(zero_copy_only=False), D["item"].to_numpy(zero_copy_only=False))
    y = D["rating"].to_numpy()
    assert len(np.unique(u.astype(np.int64) * P.n_items + i)) == len(D)  # no pair twice
    pos = set(zip(P.user, P.item))
    assert {(a, b) for a, b, c in zip(u, i, y) if c == 1} == pos
    assert not {(a, b) for a, b, c in zip(u, i, y) if c == 0} & pos
    deg = P.user_degree()
    np.testing.assert_array_equal(np.bincount(u[y == 0], minlength=P.n_users), np.minimum(3 * deg, P.n_items - deg))
    want = RowStats.of(u, i, y, P.n_users, P.n_items)
    assert summary.fingerprint() == type(summary)(P.user_ids, P.item_ids, want).fingerprint() and len(summary) == len(D)
    again = sample_in_parts(LocalMapper(), parts, 3, 7, str(folder))
    assert again.fingerprint() == summary.fingerprint()
    assert sample_in_parts(LocalMapper(), parts, 3, 8, str(folder)).fingerprint() != summary.fingerprint()
