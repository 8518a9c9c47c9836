"""SBQ with Fisher kernels: greedy against an exhaustive reference, the variants, the Fisher feature maps."""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import random_interactions

from dxplain.explain.prototypes import gradient_embedding, mf_fisher_embedding, prototype_table, select
from dxplain.interactions import Targets
from dxplain.kernels import fisher as F
from dxplain.kernels.sbq import greedi, greedy, matching_pursuit, mean_embedding, objective_of, stochastic_greedy
from dxplain.models.als.trainer import ALSMF
from dxplain.models.logistic import LogisticRegression


def brute_force_greedy(Phi, mu, m):
    """The reference: at each step try every candidate, scoring z_Sᵀ K_SS⁻¹ z_S with an explicit inverse."""
    Phi = Phi.toarray() if sp.issparse(Phi) else Phi
    mu = np.ravel(mu.toarray() if sp.issparse(mu) else mu)
    chosen, objective = [], [mu @ mu]
    for _ in range(m):
        best, arg = -np.inf, None
        for x in range(len(Phi)):
            if x in chosen:
                continue
            S = chosen + [x]
            K, z = Phi[S] @ Phi[S].T, Phi[S] @ mu
            if np.linalg.cond(K) > 1e8:
                continue
            val = z @ np.linalg.inv(K) @ z
            if val > best:
                best, arg = val, x
        chosen.append(arg)
        objective.append(mu @ mu - best)
    K, z = Phi[chosen] @ Phi[chosen].T, Phi[chosen] @ mu
    return np.array(chosen), np.linalg.inv(K) @ z, np.array(objective)


def problem(n=80, p=12, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, p)) * rng.gamma(2.0, size=(n, 1))
    T = rng.normal(size=(15, p)) + 0.5
    if sparse:
        Phi = sp.csr_array(Phi * (rng.random((n, p)) < 0.4))
        T = sp.csr_array(T * (rng.random(T.shape) < 0.4))
    return Phi, mean_embedding(T)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_shards", [1, 3])
def test_greedy_equals_brute_force_reference(sparse, n_shards):
    Phi, mu = problem(sparse=sparse, seed=n_shards)
    sel = greedy(Phi, mu, 8, n_shards=n_shards)
    index, weights, objective = brute_force_greedy(Phi, mu, 8)
    np.testing.assert_array_equal(sel.index, index)
    np.testing.assert_allclose(sel.weights, weights, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(sel.objective, objective, rtol=1e-8, atol=1e-12)


def test_objective_decreases_and_weights_are_the_projection():
    Phi, mu = problem(n=200, p=30, seed=4)
    sel = greedy(Phi, mu, 25)
    assert np.all(np.diff(sel.objective) < 0)
    assert sel.objective[-1] >= -1e-12
    # w = K_SS⁻¹ z_S makes Σ w φ_s the orthogonal projection of μ onto span{φ_s}: the residual is ⟂ every φ_s.
    Phi_S = Phi[sel.index]
    residual = np.ravel(mu) - sel.weights @ Phi_S
    np.testing.assert_allclose(Phi_S @ residual, 0, atol=1e-10)
    np.testing.assert_allclose(
        objective_of(Phi, mu, sel.index, sel.weights), sel.objective[-1], rtol=1e-9, atol=1e-12 * sel.objective[0]
    )
    # …and no other weights on the same points do better.
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert objective_of(Phi, mu, sel.index, sel.weights + 1e-3 * rng.normal(size=25)) > sel.objective[-1]


def test_greedy_stops_when_the_span_is_exhausted():
    Phi, mu = problem(n=40, p=5, seed=2)
    sel = greedy(Phi, mu, 20)
    assert len(sel.index) <= 5
    assert sel.objective[-1] == pytest.approx(0, abs=1e-10)


def test_matching_pursuit_objective_is_exact_and_decreasing():
    Phi, mu = problem(n=100, p=10, seed=5)
    sel = matching_pursuit(Phi, mu, 30)
    assert np.all(np.diff(sel.objective) <= 0)
    np.testing.assert_allclose(objective_of(Phi, mu, sel.index, sel.weights), sel.objective[-1], rtol=1e-8, atol=1e-12)
    assert sel.objective[-1] >= greedy(Phi, mu, 10).objective[-1] - 1e-12  # greedy refits; MP does not


def test_stochastic_greedy_with_the_whole_pool_is_greedy():
    Phi, mu = problem(n=90, p=14, seed=6)
    m = 8
    full = stochastic_greedy(Phi, mu, m, eps=np.exp(-m - 1.0))  # sample size (n/m)·log(1/ε) ≥ n
    np.testing.assert_array_equal(full.index, greedy(Phi, mu, m).index)
    part = stochastic_greedy(Phi, mu, m, eps=0.1, seed=3)
    assert np.all(np.diff(part.objective) < 0)
    np.testing.assert_allclose(objective_of(Phi, mu, part.index, part.weights), part.objective[-1], rtol=1e-9)


def test_greedi_returns_a_consistent_selection_no_worse_than_any_part():
    Phi, mu = problem(n=300, p=40, seed=7)
    sel = greedi(Phi, mu, 10, n_parts=4, seed=1)
    np.testing.assert_allclose(objective_of(Phi, mu, sel.index, sel.weights), sel.objective[-1], rtol=1e-9)
    central = greedy(Phi, mu, 10)
    assert sel.objective[-1] >= central.objective[-1] * (1 - 1e-9) or len(set(sel.index) - set(central.index)) > 0
    assert sel.reduction >= 0.5 * central.reduction


# ---- Fisher kernels --------------------------------------------------------------------------------------


def logistic_problem(seed=0, n=120, p=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X @ rng.normal(size=p) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y, LogisticRegression(lam=1e-2).fit(X, y)


def test_logistic_regression_reaches_a_stationary_point():
    X, y, model = logistic_problem()
    assert model.grad_norm < 1e-8
    G = F.logistic_scores(X, y, model.theta)  # ∇ log p = −∇ loss: at the optimum Σg = nλw
    np.testing.assert_allclose(G.mean(axis=0)[:-1], model.lam * model.theta[:-1], atol=1e-8)


@pytest.mark.parametrize("kind", ["empirical", "expected"])
def test_logistic_fisher_kernel_is_g_F_inverse_g(kind):
    X, y, model = logistic_problem(1)
    Xt, yt = X[:10] + 0.1, y[:10]
    Phi, Phi_T = F.logistic_embedding(X, y, model.theta, Xt, yt, kind, damping=1e-3)
    G, G_T = F.logistic_scores(X, y, model.theta), F.logistic_scores(Xt, yt, model.theta)
    Xa = np.hstack([X, np.ones((len(X), 1))])
    if kind == "empirical":
        Fm = sum(np.outer(g, g) for g in G) / len(G)
    else:
        q = 1 / (1 + np.exp(-Xa @ model.theta))
        Fm = sum(qq * (1 - qq) * np.outer(x, x) for qq, x in zip(q, Xa)) / len(Xa)
    Fm = Fm + 1e-3 * np.trace(Fm) / len(Fm) * np.eye(len(Fm))
    np.testing.assert_allclose(Phi @ Phi_T.T, G @ np.linalg.solve(Fm, G_T.T), rtol=1e-9, atol=1e-12)


def test_diagonal_and_lowrank_fisher():
    rng = np.random.default_rng(3)
    G = rng.normal(size=(50, 7)) * np.arange(1, 8)
    d = (G**2).mean(axis=0)
    Phi = F.whiten_diagonal(G, damping=0.0)(G)
    np.testing.assert_allclose(Phi @ Phi.T, G @ np.diag(1 / d) @ G.T, rtol=1e-10)
    full = F.whiten_full(G.T @ G / len(G), damping=1e-2)(G)
    low = F.whiten_lowrank(G, rank=7, damping=1e-2)(G)  # full rank: the same kernel
    np.testing.assert_allclose(low @ low.T, full @ full.T, rtol=1e-8, atol=1e-10)
    low3 = F.whiten_lowrank(G, rank=3, damping=1e-2)(G)
    U, s, Vt = np.linalg.svd(G / np.sqrt(50), full_matrices=False)
    delta = 1e-2 * (s @ s) / 7
    Fr = Vt[:3].T @ np.diag(s[:3] ** 2) @ Vt[:3] + delta * np.eye(7)
    np.testing.assert_allclose(low3 @ low3.T, G @ np.linalg.solve(Fr, G.T), rtol=1e-8)


def test_self_influence_is_g_H_inverse_g():
    X, y, model = logistic_problem(2)
    G = F.logistic_scores(X, y, model.theta)
    H = model.hessian(X)
    np.testing.assert_allclose(F.self_influence(G, H), [g @ np.linalg.solve(H, g) for g in G], rtol=1e-10)


@pytest.mark.parametrize("kind", ["empirical", "expected", "identity"])
def test_mf_fisher_kernel_is_block_diagonal_g_F_inverse_g(kind):
    d = random_interactions(12, 9, 0.4, seed=3)
    model = ALSMF(k=3, lam=1e-2, seed=0).fit(d)
    T = Targets.from_pairs(np.array([0, 0, 5, 7]), np.array([1, 4, 2, 8]))
    Phi, Phi_T = mf_fisher_embedding(model, d, T, kind, damping=1e-2)
    k, nu, ni, n = 3, d.n_users, d.n_items, len(d)
    # Dense reference in the full (users + items)·k parameter space.
    r = d.rating - model.predict(d.user, d.item)

    def grad(u, i, res):
        g = np.zeros((nu + ni) * k)
        g[u * k : (u + 1) * k] = res * model.V[i]
        g[(nu + i) * k : (nu + i + 1) * k] = res * model.U[u]
        return g

    G = np.array([grad(u, i, rr) for u, i, rr in zip(d.user, d.item, r)])
    GT = np.array([grad(u, i, 1.0) for u, i in zip(T.user, T.item)])
    if kind == "identity":
        Finv = np.eye((nu + ni) * k)
    else:
        w = r**2 if kind == "empirical" else np.full(n, np.mean(r**2))
        Gw = np.array([grad(u, i, 1.0) for u, i in zip(d.user, d.item)])
        full = (Gw * w[:, None]).T @ Gw / n
        blocks = np.zeros_like(full)
        for b in range(nu + ni):  # keep the per-user and per-item diagonal blocks only
            blocks[b * k : (b + 1) * k, b * k : (b + 1) * k] = full[b * k : (b + 1) * k, b * k : (b + 1) * k]
        tr = [np.trace(blocks[b * k : (b + 1) * k, b * k : (b + 1) * k]) for b in range(nu + ni)]
        delta_u, delta_i = 1e-2 * np.mean(tr[:nu]) / k, 1e-2 * np.mean(tr[nu:]) / k
        damp = np.concatenate([np.full(nu * k, delta_u), np.full(ni * k, delta_i)])
        Finv = np.linalg.inv(blocks + np.diag(damp))
    np.testing.assert_allclose((Phi @ Phi_T.T).toarray(), G @ Finv @ GT.T, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose((Phi @ Phi.T).toarray(), G @ Finv @ G.T, rtol=1e-8, atol=1e-12)


def test_mf_prototypes_explain_a_users_list():
    d = random_interactions(30, 25, 0.3, seed=8)
    model = ALSMF(k=4, lam=1e-2, seed=0).fit(d)
    T = Targets.from_pairs(np.full(5, 3), np.array([0, 2, 4, 6, 8]))
    Phi, Phi_T = mf_fisher_embedding(model, d, T)
    mu = mean_embedding(Phi_T)
    sel = select(Phi, mu, 6)
    index, weights, _ = brute_force_greedy(Phi, mu, 6)
    np.testing.assert_array_equal(sel.index, index)
    # A prototype shares the target user or one of the target items (the kernel is zero otherwise).
    assert np.all((d.user[sel.index] == 3) | np.isin(d.item[sel.index], T.item))
    table = prototype_table(sel, d)
    assert table.column_names == ["rank", "user", "item", "rating", "weight", "objective"]
    assert table.num_rows == 6 and np.all(np.diff(table["objective"].to_numpy()) < 0)
    np.testing.assert_allclose(table["weight"].to_numpy(), weights, rtol=1e-8)


@pytest.mark.parametrize("fisher", ["empirical", "diagonal", "lowrank", "identity"])
def test_user_supplied_gradients(fisher):
    rng = np.random.default_rng(9)
    G, G_T = rng.normal(size=(60, 5)), rng.normal(size=(8, 5))
    Phi, Phi_T = gradient_embedding(G, G_T, fisher, rank=5, damping=1e-2)
    Fm = {
        "empirical": G.T @ G / 60,
        "lowrank": G.T @ G / 60,
        "identity": None,
        "diagonal": np.diag((G**2).mean(axis=0)),
    }[fisher]
    if Fm is None:
        ref = G @ G_T.T
    else:
        delta = 1e-2 * (np.trace(Fm) / 5 if fisher != "diagonal" else np.mean(np.diag(Fm)))
        ref = G @ np.linalg.solve(Fm + delta * np.eye(5), G_T.T)
    np.testing.assert_allclose(Phi @ Phi_T.T, ref, rtol=1e-9)
    with pytest.raises(ValueError, match="unknown Fisher approximation"):
        gradient_embedding(G, G_T, "kfac")


def mf_block_problem(seed=8):
    d = random_interactions(60, 40, 0.3, seed=seed)
    model = ALSMF(k=4, lam=1e-2, seed=0).fit(d)
    T = Targets.from_pairs(np.array([3, 3, 3, 7, 7, 9]), np.array([0, 2, 4, 6, 8, 1]))
    return d, model, T


@pytest.mark.parametrize("n_shards", [1, 3])
def test_block_rows_select_what_the_csr_rows_select(n_shards):
    """The block form (2k floats a pair, c_x kept only where a selected pair shares the user or item)
    runs the dense state's arithmetic: the same prototypes, weights and objective."""
    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.kernels.sbq import local_shards

    d, model, T = mf_block_problem()
    R, R_T = mf_fisher_rows(model, d, T)
    Phi, Phi_T = mf_fisher_embedding(model, d, T)
    dense, block = greedy(Phi, mean_embedding(Phi_T), 25, n_shards), greedy(R, mean_embedding(R_T), 25, n_shards)
    np.testing.assert_array_equal(block.index, dense.index)
    np.testing.assert_allclose(block.weights, dense.weights, rtol=1e-10)
    np.testing.assert_allclose(block.objective, dense.objective, rtol=1e-12)
    # The state holds c_x for exactly the pairs sharing a user or an item with a selected one.
    shards = local_shards(R, mean_embedding(R_T), 25)
    from dxplain.kernels.sbq import greedy_select, inner

    sel = greedy_select(shards, 25, inner(mean_embedding(R_T), mean_embedding(R_T)))
    near = np.isin(d.user, d.user[sel.index]) | np.isin(d.item, d.item[sel.index])
    np.testing.assert_array_equal(shards.states[0].touched, np.flatnonzero(near))
    assert shards.states[0].Ct.shape == (25, near.sum()) and near.sum() < len(d)


@pytest.mark.parametrize("variant", ["greedi", "stochastic", "mp"])
def test_every_variant_takes_block_rows(variant):
    from dxplain.explain.prototypes import mf_fisher_rows

    d, model, T = mf_block_problem(seed=9)
    R, R_T = mf_fisher_rows(model, d, T)
    Phi, Phi_T = mf_fisher_embedding(model, d, T)
    a = select(Phi, mean_embedding(Phi_T), 10, variant, n_shards=3)
    b = select(R, mean_embedding(R_T), 10, variant, n_shards=3)
    np.testing.assert_array_equal(b.index, a.index)
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-10)


def implicit_problem(seed=4):
    from dxplain.models.implicit_mf import ImplicitMF, sample_negatives, terms_of, training_table

    P = random_interactions(50, 30, 0.2, seed=seed)
    table = training_table(P, *sample_negatives(P, 2, seed))
    return table, ImplicitMF(k=4, lam=1e-2, seed=0).fit(terms_of(table, 0.5))


@pytest.mark.parametrize("kind", ["empirical", "expected", "identity", "bce", "user-chunks", "fine-ratings"])
def test_greedy_over_the_parts_selects_what_greedy_over_the_whole_table_selects(tmp_path, kind, monkeypatch):
    """Each by-user part computes its own candidates' embeddings, and only the item blocks a step needs
    travel: the same prototypes, weights and objective as greedy over every row's embedding."""
    from dxplain.explain import part_shard, prototypes_parts
    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.explain.prototypes_parts import select_from_parts
    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper

    if kind == "bce":
        d, model = implicit_problem()
        kind = "expected"  # the Bernoulli curvature
    elif kind == "user-chunks":  # users' whiteners built a few at a time
        monkeypatch.setattr(part_shard, "USER_CHUNK", 2)
        monkeypatch.setattr(prototypes_parts, "ITEM_CHUNK", 3)  # and items' whiteners a few at a time
        monkeypatch.setattr(part_shard, "PASS_ROWS", 7)  # and the passes and the start's rows in chunks
        d, model = mf_block_problem(seed=11)[:2]
        kind = "empirical"
    elif kind == "fine-ratings":  # over 256 distinct ratings: a shard keeps each row's rating, not a code
        from dxplain.interactions import Interactions

        base = mf_block_problem(seed=11)[0]
        noisy = base.rating + np.random.default_rng(3).normal(scale=0.01, size=len(base))
        d = Interactions.from_indices(base.user, base.item, noisy, base.user_ids, base.item_ids)
        assert len(np.unique(d.rating)) > 256
        model = ALSMF(k=4, lam=1e-2, seed=0).fit(d)
        kind = "empirical"
    else:
        d, model = mf_block_problem(seed=11)[:2]
    T = Targets.from_pairs(np.array([1, 1, 4, 9, 20]), np.array([0, 3, 5, 7, 2]))
    R, R_T = mf_fisher_rows(model, d, T, kind)
    whole = greedy(R, mean_embedding(R_T), 15)
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 6)
    assert len(parts.user_cuts) > 5
    sel = select_from_parts(LocalMapper(), parts, model, T, 15, kind)
    np.testing.assert_array_equal(sel.index, whole.index)
    np.testing.assert_allclose(sel.weights, whole.weights, rtol=1e-10)
    np.testing.assert_allclose(sel.objective, whole.objective, rtol=1e-12)


def test_a_target_user_without_training_rows_is_embedded_as_over_the_whole_table(tmp_path):
    import pyarrow as pa

    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.explain.prototypes_parts import select_from_parts
    from dxplain.interactions import Interactions
    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper

    base = random_interactions(30, 20, 0.3, seed=13)
    ids = pa.concat_arrays([base.user_ids, pa.array(["zz-cold"], base.user_ids.type)])
    d = Interactions.from_indices(base.user, base.item, base.rating, ids, base.item_ids)
    model = ALSMF(k=3, lam=1e-2, seed=0).fit(d)
    cold = d.n_users - 1
    assert d.user_degree()[cold] == 0
    T = Targets.from_pairs(np.array([cold, cold, 2]), np.array([1, 5, 3]))
    R, R_T = mf_fisher_rows(model, d, T)
    whole = greedy(R, mean_embedding(R_T), 8)
    sel = select_from_parts(LocalMapper(), write_partitions(str(tmp_path / "p"), d, rows_per_part=40), model, T, 8)
    np.testing.assert_array_equal(sel.index, whole.index)
    np.testing.assert_allclose(sel.weights, whole.weights, rtol=1e-10)
    # The cold user's half of μ_T meets no candidate, but it is part of ‖μ_T‖², the objective's start.
    np.testing.assert_allclose(sel.objective, whole.objective, rtol=1e-12)


def test_greedy_over_the_parts_reads_the_factors_from_their_blocks_and_holds_neither(tmp_path):
    """A model kept in row-block files (a prepared dataset's) selects what the same model held whole
    selects, and no shard keeps a factor matrix or a scalar per row beyond its live rows."""
    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.explain.prototypes_parts import PartShards, select_from_parts
    from dxplain.io.partitions import write_partitions
    from dxplain.io.row_blocks import Scratch
    from dxplain.mapper import LocalMapper
    from dxplain.models.blocks import Blocks

    d, model, T = mf_block_problem(seed=11)
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 6)
    mapper, scratch = LocalMapper(), Scratch(parts.root)
    in_blocks = dataclasses.replace(
        model,
        U=Blocks.split(mapper, scratch, model.U, parts.user_cuts),
        V=Blocks.split(mapper, scratch, model.V, parts.item_cuts),
    )
    R, R_T = mf_fisher_rows(model, d, T)
    whole = greedy(R, mean_embedding(R_T), 12)  # every row's embedding, the factors held whole
    sel = select_from_parts(mapper, parts, in_blocks, T, 12)
    np.testing.assert_array_equal(sel.index, whole.index)
    np.testing.assert_allclose(sel.weights, whole.weights, rtol=1e-10)

    shards = PartShards(mapper, parts, in_blocks, "empirical", F.DEFAULT_DAMPING, parts.user_part_offsets())
    shards.start(T, 12)
    live = 0
    for st in shards.states:
        arrays = {name: v for name, v in vars(st).items() if isinstance(v, np.ndarray)}
        assert not any(v.ndim == 2 and v.shape[0] in (d.n_users, d.n_items) for v in arrays.values()), arrays.keys()
        assert len(st.z) == len(st.r) == len(st.v) == len(st.live) <= len(st)
        # No float per row (a residual, a weight): those are recomputed; the ratings are a byte each.
        per_row = {name for name, v in arrays.items() if v.dtype.kind == "f" and v.shape[:1] == (len(st),)}
        assert per_row <= {"z", "kdiag", "r", "v"}, per_row
        live_scalars = {"z", "kdiag", "r", "v", "live", "open"}
        assert (
            sum(v.itemsize for name, v in arrays.items() if v.shape == st.item.shape and name not in live_scalars) == 13
        ), arrays.keys()
        live += len(st.live)
    assert 0 < live < len(d)  # rows sharing no user or item with a target are never scored


def test_blocks_cut_elsewhere_than_the_parts_are_refused(tmp_path):
    from dxplain.io.partitions import write_partitions
    from dxplain.io.row_blocks import Scratch
    from dxplain.mapper import LocalMapper
    from dxplain.models.blocks import Blocks

    d, model, _ = mf_block_problem(seed=11)
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 4)
    mapper, scratch = LocalMapper(), Scratch(parts.root)
    U = Blocks.split(mapper, scratch, model.U, np.array([0, d.n_users]))
    with pytest.raises(ValueError, match="cut at 1 other row ranges"):
        U.cut_at(parts.user_cuts)
    np.testing.assert_array_equal(U.take([5, 1, 5]), model.U[[5, 1, 5]])
