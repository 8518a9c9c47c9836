"""Kolmogorov models: the θ- and ψ-step kernels against generic solvers and brute force; IKM's identities."""

import numpy as np
import pytest
from conftest import random_interactions

from dxplain.kernels import kolmogorov as K
from dxplain.kolmogorov import rules as R
from dxplain.kolmogorov.data import probabilities
from dxplain.kolmogorov.fit import fit_ikm


def random_blocks(n, D, m, seed):
    """n rows of (Q, r) from m random binary ψ and p, and of (S, c) from m random PMFs θ."""
    rng = np.random.default_rng(seed)
    Psi = rng.integers(0, 2, (n, m, D)).astype(float)
    Th = rng.dirichlet(np.ones(D), size=(n, m))
    p = rng.uniform(size=(n, m))
    Q, r = np.einsum("nid,nie->nde", Psi, Psi), np.einsum("nid,ni->nd", Psi, p)
    S, c = np.einsum("nud,nue->nde", Th, Th), np.einsum("nud,nu->nd", Th, p) - rng.uniform(0, 0.3)
    return Q, r, S, c


def brute_objective(data, m, lam, mu):
    """E = Σ_𝒦 (θ_uᵀψ_i − p_ui)² + λΣ‖θ_u‖² + μΣ1ᵀψ_i, straight from the definition."""
    err = m.predict(data.user, data.item) - data.rating
    return float(err @ err + lam * np.sum(m.theta**2) + mu * m.psi.sum())


@pytest.mark.parametrize("D, lam", [(3, 0.0), (6, 0.5), (10, 2.0)])
def test_theta_step_matches_a_qp_solver(D, lam):
    cp = pytest.importorskip("cvxpy")
    Q, r, _, _ = random_blocks(12, D, 25, seed=D)
    theta, info = K.frank_wolfe(Q, r, np.full((12, D), 1 / D), lam=lam)
    for n in range(12):
        x = cp.Variable(D)
        prob = cp.Problem(cp.Minimize(cp.quad_form(x, Q[n] + lam * np.eye(D)) - 2 * r[n] @ x), [x >= 0, cp.sum(x) == 1])
        prob.solve(solver="CLARABEL")
        assert abs(info["objective"][n] - prob.value) <= 1e-6 * (1 + abs(prob.value))
    assert np.allclose(theta.sum(axis=1), 1) and theta.min() >= 0


@pytest.mark.parametrize("step", ["simple", "exact", "pairwise"])
def test_every_frank_wolfe_step_keeps_the_simplex_and_never_raises_f(step):
    Q, r, _, _ = random_blocks(30, 5, 10, seed=1)
    theta0 = np.random.default_rng(2).dirichlet(np.ones(5), 30)
    theta, info = K.frank_wolfe(Q, r, theta0, lam=0.1, step=step, max_iter=200)
    Qr = Q + 0.1 * np.eye(5)
    assert np.all(K.theta_objective(Qr, r, theta) <= K.theta_objective(Qr, r, theta0) + 1e-12)
    assert np.allclose(theta.sum(axis=1), 1) and theta.min() >= 0


def test_exhaustive_psi_is_the_brute_force_minimum():
    _, _, S, c = random_blocks(20, 6, 8, seed=3)
    psi, g = K.exhaustive_psi(S, c, chunk=7)  # a chunk that does not divide 2^6
    B = K.binary_vectors(6)
    every = np.array([[K.psi_objective(S[n : n + 1], c[n : n + 1], b[None])[0] for b in B] for n in range(20)])
    assert np.allclose(g, every.min(axis=1))
    assert np.allclose(K.psi_objective(S, c, psi), g)


def test_sdr_matrix_reproduces_g_up_to_its_constant():
    _, _, S, c = random_blocks(5, 4, 6, seed=4)
    St, const = K.sdr_matrix(S, c), K.sdr_constant(S, c)
    for b in K.binary_vectors(4):
        for w in (-1, 1):  # x = [z·w; w] gives the same ψ
            x = np.append((2 * b - 1.0) * w, w)
            lhs = np.einsum("k,nkl,l->n", x, St, x) + const
            assert np.allclose(lhs, K.psi_objective(S, c, np.tile(b, (5, 1))))


def test_barrier_sdp_matches_a_generic_sdp_solver_within_its_certified_gap():
    cp = pytest.importorskip("cvxpy")
    _, _, S, c = random_blocks(6, 8, 12, seed=5)
    St = K.sdr_matrix(S, c)
    X, value, gap, _ = K.barrier_sdp(St, tol=1e-7)
    w = np.linalg.eigvalsh(X)  # primal feasible: diag 1, PSD up to the rounding of μM⁻¹
    assert np.allclose(np.einsum("nkk->nk", X), 1.0) and np.all(w[:, 0] >= -1e-8 * w[:, -1])
    assert np.all(gap >= 0) and np.all(gap <= 1e-7 * np.abs(value))
    for n in range(6):
        Y = cp.Variable((9, 9), symmetric=True)
        prob = cp.Problem(cp.Minimize(cp.trace(St[n] @ Y)), [Y >> 0, cp.diag(Y) == 1])
        prob.solve(solver="CLARABEL")
        assert abs(value[n] - prob.value) <= 1e-6 * abs(prob.value)


def test_barrier_sdp_certificate_is_a_true_bound_and_trivial_rows_stop_at_once():
    """value − gap is a dual value: no feasible X (here the SDR of every binary vector) goes below it."""
    _, _, S, c = random_blocks(30, 6, 8, seed=8)
    St = np.concatenate([K.sdr_matrix(S, c), np.zeros((1, 7, 7))])
    X, value, gap, steps = K.barrier_sdp(St, tol=1e-6)
    assert steps[-1] == 0 and value[-1] == 0 and gap[-1] == 0 and np.allclose(X[-1], np.eye(7))
    _, best = K.exhaustive_psi(S, c)
    assert np.all(value[:-1] - gap[:-1] <= best - K.sdr_constant(S, c) + 1e-12)  # X = xxᵀ is feasible
    with pytest.raises(ValueError, match="tol=1e-10"):
        K.barrier_sdp(St, tol=1e-10)


def test_sdr_bounds_the_binary_optimum_and_never_loses_to_its_incumbent():
    _, _, S, c = random_blocks(40, 7, 10, seed=6)
    _, best = K.exhaustive_psi(S, c)
    incumbent, _ = K.exhaustive_psi(S, c)
    psi, info = K.sdr_psi(S, c, incumbent, np.random.default_rng(0), draws=2, polish=0)
    assert np.all(info["sdp_value"] - info["sdp_gap"] <= best + 1e-10 * np.abs(best))  # a relaxation's bound
    assert np.all(info["sdp_gap"] <= 1e-7 * np.abs(info["sdp_value"] - K.sdr_constant(S, c)))
    assert np.allclose(K.psi_objective(S, c, psi), best)  # the optimal incumbent is kept


def test_block_stats_equal_the_dense_sums():
    d = random_interactions(15, 12, 0.4, seed=7)
    rng = np.random.default_rng(0)
    Psi = rng.integers(0, 2, (12, 5)).astype(float)
    Q, r = K.block_stats(d.by_user(d.rating), Psi)
    W = d.by_user(np.ones(len(d))).toarray()
    P = d.by_user(d.rating).toarray()
    assert np.allclose(Q, np.einsum("ui,id,ie->ude", W, Psi, Psi))
    assert np.allclose(r, P @ Psi)


@pytest.mark.parametrize("solver, step", [("sdr", "pairwise"), ("exhaustive", "exact"), ("sdr", "simple")])
def test_bcd_objective_never_increases_and_is_the_model_error(solver, step):
    d = probabilities(random_interactions(30, 25, 0.4, seed=8), "explicit", 5.0, 4.0, 1, 0)
    m = fit_ikm(d, 4, iterations=6, solver=solver, lam=0.3, mu=0.2, step=step, fw_iters=300, shards=3)
    trace = np.array(m.info["trace"])
    assert np.all(np.diff(trace) <= 1e-9 * trace[:-1])
    assert m.info["train_objective"] == m.info["trace"][1::2]
    assert np.isclose(m.info["train_objective"][-1], brute_objective(d, m, 0.3, 0.2))
    assert set(np.unique(m.psi)) <= {0, 1} and np.allclose(m.theta.sum(axis=1), 1)


def test_tasks_solve_bounded_row_slices_with_the_same_result(monkeypatch):
    from dxplain.kolmogorov import fit as F

    d = probabilities(random_interactions(30, 25, 0.4, seed=8), "explicit", 5.0, 4.0, 1, 0)
    whole = fit_ikm(d, 4, iterations=3, solver="exhaustive", lam=0.3, mu=0.2, shards=2)
    monkeypatch.setattr(F, "PSI_ROWS", 4)  # a 12-item shard is solved in 3 slices, a 15-user one in 3
    monkeypatch.setattr(F, "THETA_ROWS", 5)
    sliced = fit_ikm(d, 4, iterations=3, solver="exhaustive", lam=0.3, mu=0.2, shards=2)
    assert np.array_equal(sliced.psi, whole.psi) and np.array_equal(sliced.theta, whole.theta)
    assert np.allclose(sliced.info["trace"], whole.info["trace"], rtol=1e-13, atol=0)  # sums in another order
    sdr = fit_ikm(d, 4, iterations=3, lam=0.3, mu=0.2, shards=2, check=True)
    assert np.all(np.diff(sdr.info["trace"]) <= 1e-9 * np.array(sdr.info["trace"][:-1]))
    assert 0 <= sdr.info["sdr_vs_exhaustive_error"] <= sdr.info["sdr_rounded_vs_exhaustive_error"] <= 1


def test_exhaustive_check_counts_sdr_misses():
    d = probabilities(random_interactions(20, 40, 1.0, seed=9), "explicit", 5.0, 4.0, 1, 0)
    m = fit_ikm(d, 4, iterations=3, check=True)
    assert 0 <= m.info["sdr_vs_exhaustive_error"] <= m.info["sdr_rounded_vs_exhaustive_error"] <= 1


@pytest.mark.parametrize("lattice_max_d", [20, 0], ids=["lattice", "chunked-pairs"])
def test_influence_and_adjacency_follow_their_definitions(monkeypatch, lattice_max_d):
    monkeypatch.setattr(R, "LATTICE_MAX_D", lattice_max_d)
    monkeypatch.setattr(R, "SUBSET_CHUNK", 3)  # several chunks of the 16 masks
    rng = np.random.default_rng(10)
    psi = rng.integers(0, 2, (40, 4)).astype(np.uint8)
    psi[3] = 1  # a maximal item
    psi[5] = psi[6]  # equal supports: a rule each way
    sub = np.array(
        [[set(np.flatnonzero(psi[j])) <= set(np.flatnonzero(psi[i])) and i != j for j in range(40)] for i in range(40)]
    )
    beta, maximal = R.influence(psi)
    assert np.allclose(beta, sub.sum(axis=1) / 40)
    assert np.flatnonzero(maximal).tolist() == [i for i in range(40) if psi[i].all()]
    nonempty = psi.any(axis=1)
    assert np.array_equal(R.adjacency(psi).toarray(), sub & nonempty[None, :])
    assert np.array_equal(R.rules_per_item(psi), (sub & nonempty[None, :]).sum(axis=1))
    popularity = np.arange(40)[::-1]  # item 0 the most popular
    n = R.rules_per_item(psi)
    for cap in (100, int(n[0]) - 1):  # the second: the most popular item alone heads more than the cap
        heads = R.capped_antecedents(psi, popularity, cap)
        left = cap - n[heads].sum()
        assert len(heads) and left >= 0 and (n[heads] > 0).all()
        assert (n[np.setdiff1d(np.flatnonzero(n), heads)] > left).all()  # nothing left out would still fit
    assert 0 not in heads and 0 < n[0] and R.capped_antecedents(psi, popularity, int(n.sum())) is None
    heads = R.capped_antecedents(psi, popularity, 100)
    assert np.array_equal(R.adjacency(psi, antecedents=heads).toarray()[heads], (sub & nonempty[None, :])[heads])


def test_why_decomposes_the_prediction():
    d = probabilities(random_interactions(20, 15, 0.5, seed=11), "explicit", 5.0, 4.0, 1, 0)
    m = fit_ikm(d, 5, iterations=2, lam=0.1)
    for u, i in [(0, 0), (3, 7), (19, 14)]:
        events = R.why(m.theta[u], m.psi, i)
        assert np.isclose(sum(e["share"] for e in events), m.predict(np.array([u]), np.array([i]))[0])
        assert all(m.psi[i, e["event"]] == 1 for e in events)
        assert all(m.psi[j, e["event"]] == 1 for e in events for j in e["typical_items"])


def test_implicit_mode_adds_unobserved_negatives():
    d = random_interactions(20, 15, 0.3, seed=12)
    P = probabilities(d, "implicit", 5.0, 4.0, 2, 0)
    pos = {(u, i) for u, i, y in zip(d.user, d.item, d.rating) if y >= 4}
    seen = set(zip(d.user, d.item))
    got = list(zip(P.user, P.item, P.rating))
    assert {(u, i) for u, i, p in got if p == 1} == pos
    negs = [(u, i) for u, i, p in got if p == 0]
    assert negs and not set(negs) & seen
