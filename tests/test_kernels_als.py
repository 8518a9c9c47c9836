import numpy as np
import pytest
from conftest import random_interactions

from dxplain.kernels import als
from dxplain.models.als.trainer import ALSMF


def _pattern(d):
    return als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)


@pytest.mark.parametrize("k", [3, 12])  # degrees 1..~15: k=12 takes the Woodbury (d < k) path for most rows
def test_ridge_solve_rows_matches_per_row_solve(small, k):
    rng = np.random.default_rng(1)
    V = rng.normal(size=(small.n_items, k))
    X = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=0.7)
    deg = small.user_degree()
    assert deg.min() < k or k == 3
    for u in range(small.n_users):
        s, e = small.user_indptr[u], small.user_indptr[u + 1]
        Vd = V[small.item[s:e]]
        ref = np.linalg.solve(Vd.T @ Vd + 0.7 * np.eye(k), Vd.T @ small.rating[s:e])
        np.testing.assert_allclose(X[u], ref, rtol=1e-10, atol=1e-12)


def test_ridge_solve_rows_batches_when_block_is_small(small, monkeypatch):
    rng = np.random.default_rng(2)
    V = rng.normal(size=(small.n_items, 4))
    full = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=1.0, fused=False)
    monkeypatch.setattr(als, "ELEMENT_BUDGET", 16)  # forces one row per batch
    tiny = als.ridge_solve_rows(small.user_indptr, small.item, small.rating, V, ridge=1.0, fused=False)
    np.testing.assert_allclose(full, tiny, rtol=1e-12)


@pytest.mark.parametrize("k", [1, 7, 12, 40])  # 7, 12: primal and dual rows; 40: dual only
def test_fused_half_step_equals_the_numpy_half_step(k):
    """The numba kernel against the numpy batches: primal (d ≥ k) and dual (d < k) rows, odd k, empty
    rows, and a subset of rows in any order."""
    d = random_interactions(70, 90, 0.12, seed=k)  # degrees 6..~22
    rng = np.random.default_rng(k)
    V = rng.normal(size=(d.n_items + 3, k))  # columns beyond the data are never touched
    indptr = np.concatenate([d.user_indptr, [d.user_indptr[-1]]])  # one more row, with no entries
    rows = rng.permutation(len(indptr) - 1)[:50]
    for sub in (None, rows):
        ref = als.ridge_solve_rows(indptr, d.item, d.rating, V, ridge=0.9, rows=sub, fused=False)
        got = als.ridge_solve_rows(indptr, d.item, d.rating, V, ridge=0.9, rows=sub, fused=True)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    assert np.all(got[rows == len(indptr) - 2] == 0)
    deg = np.diff(d.user_indptr)
    assert k == 1 or deg.min() < k


@pytest.mark.parametrize("k", [12, 64])
def test_fused_half_step_equals_the_numpy_half_step_on_long_rows(k):
    """Rows longer than the Gram's chunk (``als_fused.GRAM_CHUNK``), so that its inner loop starts past 0 and
    ends mid-chunk: the loop the kernel vectorises with unsigned indices."""
    from dxplain.kernels.als_fused import GRAM_CHUNK

    rng = np.random.default_rng(k)
    degrees = [GRAM_CHUNK + 1, 2 * GRAM_CHUNK + 37, 3 * GRAM_CHUNK, k + 3]
    n_cols = 4 * GRAM_CHUNK
    cols = np.concatenate([np.sort(rng.choice(n_cols, size=d, replace=False)) for d in degrees])
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    y = rng.normal(size=len(cols))
    F = rng.normal(size=(n_cols, k))
    ref = als.ridge_solve_rows(indptr, cols, y, F, ridge=0.7, fused=False)
    got = als.ridge_solve_rows(indptr, cols, y, F, ridge=0.7, fused=True)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("k", [7, 40])  # 7: primal and dual rows; 40: dual only
def test_half_step_returns_the_gradient_at_its_solution(k):
    """``ridge_solve_rows(..., gradient_scale=2/|D|)``: each row's A x − b from the solve's own system, which is
    ∇f's row at the solution (rounding). Both paths against the gradient pass at the solved rows; the two
    residual formulas on their own at points that are not solutions, where they are not 0."""
    from dxplain.kernels.als_fused import _dual_residual, _primal_residual

    d = random_interactions(70, 90, 0.12, seed=k)
    rng = np.random.default_rng(k)
    V = rng.normal(size=(d.n_items, k))
    y, n, lam = d.rating - d.rating.mean(), len(d), 0.03
    ridge = lam * n / 2
    indptr = np.concatenate([d.user_indptr, [d.user_indptr[-1]]])  # one more row, with no entries: gradient 0
    for fused in (True, False):
        X, G = als.ridge_solve_rows(indptr, d.item, y, V, ridge, fused=fused, gradient_scale=2.0 / n)
        np.testing.assert_array_equal(X, als.ridge_solve_rows(indptr, d.item, y, V, ridge, fused=fused))
        want, _ = als.gradient_rows(indptr, d.item, y, X, V, n, lam, fused=False)
        scale = lam * np.abs(X).max()
        assert np.abs(want).max() < 1e-12 * scale  # the solution is stationary in its rows ...
        np.testing.assert_allclose(G, want, rtol=0, atol=1e-12 * scale)  # ... and G says so
        assert np.all(G[-1] == 0)
    M = rng.normal(size=(k + 3, k))
    A = M.T @ M + np.eye(k)
    x, b = rng.normal(size=k), rng.normal(size=k)
    upper = np.triu(A, 1) + np.tril(rng.normal(size=(k, k)))  # below the diagonal: what a solve left there
    out = np.empty(k)
    _primal_residual(upper, np.diag(A).copy(), b, x, k, 0.5, out)
    np.testing.assert_allclose(out, 0.5 * (A @ x - b), rtol=1e-12, atol=1e-12)
    Gd, yd = rng.normal(size=(3, k)), rng.normal(size=3)
    _dual_residual(Gd, 3, k, yd, 0.7, x, 2.0, out)
    np.testing.assert_allclose(out, 2.0 * ((Gd.T @ Gd + 0.7 * np.eye(k)) @ x - Gd.T @ yd), rtol=1e-12, atol=1e-12)


def _cg_problem(k, seed=0):
    """Rows of degree 6..~22 plus an empty one, a fixed side with more columns than the data touch, a start."""
    d = random_interactions(70, 90, 0.12, seed=seed)
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([d.user_indptr, [d.user_indptr[-1]]])
    F = rng.normal(size=(d.n_items + 3, k))
    return indptr, d.item, d.rating - d.rating.mean(), F, rng.normal(size=(len(indptr) - 1, k))


@pytest.mark.parametrize("k", [7, 12])  # primal (CG) and dual (exact) rows
def test_cg_half_step_fused_equals_the_numpy_steps(k):
    """``ridge_cg_rows``: the numba kernel against the numpy steps over every row at once, in the default basis
    (from the rows' entries) and in a given one; short rows solved exactly, an empty row 0."""
    indptr, cols, y, F, X0 = _cg_problem(k)
    deg = np.diff(indptr)
    assert (deg >= k).any() and ((deg > 0) & (deg < k)).any()
    Q = np.linalg.qr(np.random.default_rng(1).normal(size=(k, k)))[0]
    for steps in (1, 3):
        for basis in (None, Q):
            ref = als.ridge_cg_rows(indptr, cols, y, F, 0.9, X0, steps, Q=basis, fused=False)
            got = als.ridge_cg_rows(indptr, cols, y, F, 0.9, X0, steps, Q=basis, fused=True)
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    exact = als.ridge_solve_rows(indptr, cols, y, F, 0.9)
    short = (deg > 0) & (deg < k)
    np.testing.assert_allclose(got[short], exact[short], rtol=1e-10, atol=1e-12)
    assert np.all(got[-1] == 0)
    assert np.abs(got[deg >= k] - exact[deg >= k]).max() > 1e-6  # 3 steps: not the exact solve


def test_cg_half_step_approaches_the_exact_solve_and_stays_there():
    """Each step lowers every row's error in its system's norm (CG's property, any preconditioner); k steps solve
    a row exactly (rounding) in either basis; a start at the solution stays (warm-started training at a
    stationary point keeps it)."""
    k = 7
    indptr, cols, y, F, X0 = _cg_problem(k, seed=3)
    exact = als.ridge_solve_rows(indptr, cols, y, F, 0.9)
    long = np.flatnonzero(np.diff(indptr) >= k)

    def energy(X):  # ‖x − x*‖_A per row
        out = []
        for r in long:
            G = F[cols[indptr[r] : indptr[r + 1]]]
            e = X[r] - exact[r]
            out.append(e @ (G.T @ G + 0.9 * np.eye(k)) @ e)
        return np.array(out)

    errors = [energy(X0)] + [energy(als.ridge_cg_rows(indptr, cols, y, F, 0.9, X0, s)) for s in (1, 2, 4)]
    for before, after in zip(errors, errors[1:]):
        assert np.all(after <= before * (1 + 1e-9))
    assert errors[-1].sum() < 1e-2 * errors[0].sum()
    Q = np.linalg.qr(np.random.default_rng(2).normal(size=(k, k)))[0]
    for basis in (None, Q):
        np.testing.assert_allclose(
            als.ridge_cg_rows(indptr, cols, y, F, 0.9, X0, k, Q=basis), exact, rtol=1e-8, atol=1e-10
        )
        np.testing.assert_allclose(
            als.ridge_cg_rows(indptr, cols, y, F, 0.9, exact, 4, Q=basis), exact, rtol=1e-10, atol=1e-12
        )
    with pytest.raises(ValueError, match="steps=0"):
        als.ridge_cg_rows(indptr, cols, y, F, 0.9, X0, 0)


def test_bound_rows_in_chunks_equals_the_whole_rows_formula(monkeypatch):
    """``bound_rows`` goes through its rows in chunks (cache-sized temporaries): the same ε as the formula on
    all rows at once, with rows of norm 0 (left out, or held at the floor) and a NaN gradient (no bound)."""
    rng = np.random.default_rng(4)
    F, g = rng.normal(size=(50, 6)), rng.normal(size=(50, 6))
    F[[3, 17]] = 0.0
    T_own, T_other, lam = np.eye(6) + 0.1 * rng.normal(size=(6, 6)), np.eye(6) + 0.1 * rng.normal(size=(6, 6)), 0.3

    def whole(floor):
        G = g @ T_other + lam * F @ (T_own - T_other)
        norm = np.maximum(np.linalg.norm(F @ T_own, axis=1), floor)
        live = norm > 0
        return np.max(np.linalg.norm(G[live], axis=1) / norm[live]) / lam

    monkeypatch.setattr(als, "BOUND_CHUNK", 7)
    for floor in (0.0, 0.5):
        assert als.bound_rows(F, g, T_own, T_other, lam, floor) == pytest.approx(whole(floor), rel=1e-12)
    assert whole(0.5) != pytest.approx(whole(0.0))  # the floor decides: rows 3 and 17 count with it
    g[40, 2] = np.nan
    assert np.isnan(als.bound_rows(F, g, T_own, T_other, lam, 0.0))


@pytest.mark.parametrize("k", [3, 64])
def test_fused_gradient_rows_equal_the_sparse_products(k):
    """The compiled gradient pass against the numpy one, on both sides' rows (rows with no entries too), and the
    in-process half-steps' gradient against ``als.gradient`` on the whole table."""
    from dxplain.models.als.half_steps import LocalHalfSteps, csr_view

    d = random_interactions(60, 80, 0.15, seed=k)
    rng = np.random.default_rng(k)
    U, V = rng.normal(size=(d.n_users, k)), rng.normal(size=(d.n_items, k))
    y, lam, n = d.rating - d.rating.mean(), 0.03, len(d)
    for side, F_rows, F_cols in (("user", U, V), ("item", V, U)):
        view = csr_view(d, y, side)
        ref, ref_rss = als.gradient_rows(*view, F_rows, F_cols, n, lam, fused=False)
        got, got_rss = als.gradient_rows(*view, F_rows, F_cols, n, lam, fused=True)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        assert got_rss == pytest.approx(ref_rss, rel=1e-12)
    indptr = np.array([0, 0, 2])  # an empty row: its gradient is λ·F_row
    got, _ = als.gradient_rows(indptr, np.array([0, 1]), np.ones(2), U[:2], V, n, lam, fused=True)
    np.testing.assert_allclose(got[0], lam * U[0])
    rss, gU, gV = LocalHalfSteps(d, d.rating.mean(), 1.0).gradient(U, V, lam)
    P = als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)
    ref_U, ref_V = als.gradient(U, V, P, y, lam)
    np.testing.assert_allclose(gU, ref_U, rtol=1e-12, atol=1e-12 * np.abs(ref_U).max())
    np.testing.assert_allclose(gV, ref_V, rtol=1e-12, atol=1e-12 * np.abs(ref_V).max())


def test_gradient_and_hessian_match_finite_differences(small):
    rng = np.random.default_rng(3)
    P = _pattern(small)
    U, V = rng.normal(size=(small.n_users, 3)), rng.normal(size=(small.n_items, 3))
    y, lam = small.rating - small.rating.mean(), 0.05
    gU, gV = als.gradient(U, V, P, y, lam)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    h = 1e-6
    fd = (als.objective(U + h * dU, V + h * dV, P, y, lam) - als.objective(U - h * dU, V - h * dV, P, y, lam)) / (2 * h)
    assert fd == pytest.approx(np.sum(gU * dU) + np.sum(gV * dV), rel=1e-6)
    r = y - als.pair_scores(U, V, P.u, P.i)
    hU, hV = als.hessian_vector(U, V, dU, dV, P, r, lam)
    gU2, gV2 = als.gradient(U + h * dU, V + h * dV, P, y, lam)
    gU1, gV1 = als.gradient(U - h * dU, V - h * dV, P, y, lam)
    np.testing.assert_allclose(hU, (gU2 - gU1) / (2 * h), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hV, (gV2 - gV1) / (2 * h), rtol=1e-5, atol=1e-7)


def test_als_converges_on_the_gradient_norm_and_is_deterministic():
    d = random_interactions(60, 50, 0.25, seed=4)
    m1 = ALSMF(k=6, lam=2e-3, tol=1e-9, seed=7).fit(d)
    m2 = ALSMF(k=6, lam=2e-3, tol=1e-9, seed=7).fit(d)
    assert m1.grad_norm <= 1e-9
    gU, gV = als.gradient(m1.U, m1.V, _pattern(d), d.rating - m1.mu, 2e-3)
    assert np.sqrt(np.sum(gU**2) + np.sum(gV**2)) == pytest.approx(m1.grad_norm, rel=1e-6, abs=1e-12)
    np.testing.assert_array_equal(m1.U, m2.U)
    # At a stationary point of the variational nuclear-norm form, UᵀU = VᵀV.
    np.testing.assert_allclose(m1.U.T @ m1.U, m1.V.T @ m1.V, atol=1e-7)
    assert m1.mu == pytest.approx(d.rating.mean())


def test_curvature_grams_are_the_hessians_diagonal_blocks():
    from dxplain.kernels import als

    d = random_interactions(12, 9, 0.4, seed=3)
    rng = np.random.default_rng(0)
    k = 3
    U, V = rng.normal(size=(d.n_users, k)), rng.normal(size=(d.n_items, k))
    P = als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)
    y, lam = d.rating - d.rating.mean(), 0.1
    r = y - als.pair_scores(U, V, P.u, P.i)
    A, B = als.curvature_grams(U, V, P, len(y))
    for who, F, blocks in (("user", U, A), ("item", V, B)):
        for row in (0, 5):
            H = np.empty((k, k))
            for c in range(k):
                dU, dV = np.zeros_like(U), np.zeros_like(V)
                (dU if who == "user" else dV)[row, c] = 1.0
                hU, hV = als.hessian_vector(U, V, dU, dV, P, r, lam)
                H[:, c] = (hU if who == "user" else hV)[row]
            np.testing.assert_allclose(blocks[row] + lam * np.eye(k), H, rtol=1e-12, atol=1e-14)


def test_damped_newton_reaches_the_minimum_of_rosenbrock():
    from dxplain.kernels.newton import newton_pcg

    def fun_grad(x):
        a, b = x
        f = (1 - a) ** 2 + 100 * (b - a * a) ** 2
        return f, np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)])

    def hess(x):
        a, b = x
        return np.array([[2 - 400 * (b - a * a) + 800 * a * a, -400 * a], [-400 * a, 200.0]])

    # The Hessian is indefinite at the start: the damping has to handle it.
    x0 = np.array([-1.2, 1.0])
    assert np.linalg.eigvalsh(hess(np.array([0.0, 1.0]))).min() < 0
    x, gnorm, steps, _ = newton_pcg(
        fun_grad,
        lambda x, v: hess(x) @ v,
        lambda x: hess(x)[None] + 1e-3 * np.eye(2),
        np.array([0.0, 1.0]),
        tol=1e-10,
        mu0=1e-3,
    )
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-8)
    assert gnorm <= 1e-10 and steps < 100
    x, gnorm, _, _ = newton_pcg(fun_grad, lambda x, v: hess(x) @ v, lambda x: np.eye(2)[None], x0, 1e-10, 1e-3)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-8)


def test_newton_never_takes_a_step_that_raises_f():
    """When no step along the Newton direction lowers f (here: a gradient of the wrong sign, so every
    direction the model calls downhill is uphill), the polish stays where it is rather than take the
    line search's last, tiny step anyway."""
    from dxplain.kernels.newton import newton_pcg

    x0 = np.array([1.0, -2.0])
    seen = []

    def fun_grad(x):
        seen.append(float(x @ x))
        return float(x @ x), -2.0 * x  # f = ‖x‖², its gradient negated

    x, gnorm, steps, _ = newton_pcg(
        fun_grad, lambda x, v: 2.0 * v, lambda x: 2.0 * np.eye(2)[None], x0, tol=1e-12, mu0=1e-3, maxiter=3
    )
    assert steps == 3 and len(seen) > 3 * 20  # three line searches, each run down to its floor
    np.testing.assert_array_equal(x, x0)
    assert gnorm == np.linalg.norm(2.0 * x0)


def test_newton_takes_steps_whose_decrease_is_below_the_rounding_of_f():
    """Near a minimum f falls by less than its own rounding (iALS's f sums |D|-sized terms): Armijo's test on f then
    refuses every step. Here every move from x0 raises the computed f by 1e-11, more than the quadratic's whole
    decrease (5.5e-14); the approximate Wolfe conditions (the directional derivative) take the step."""
    from dxplain.kernels.newton import newton_pcg

    A, x0 = np.diag([1.0, 10.0]), np.array([1e-7, 1e-7])

    def fun_grad(x):
        rounding = 1e-11 if np.any(x != x0) else 0.0
        return 1.0 + 0.5 * x @ A @ x + rounding, A @ x

    x, gnorm, steps, _ = newton_pcg(fun_grad, lambda x, v: A @ v, lambda x: A[None], x0, tol=1e-15, mu0=1e-3)
    assert gnorm <= 1e-15 and steps <= 5
    # A step that raises f by more than its rounding allows is still refused.
    far = np.array([1e-2, 1e-2])

    def fun_grad_far(x):
        return 1.0 + 0.5 * x @ A @ x + (1e-3 if np.any(x != far) else 0.0), A @ x

    x, gnorm, steps, _ = newton_pcg(fun_grad_far, lambda x, v: A @ v, lambda x: A[None], far, 1e-15, 1e-3, maxiter=2)
    np.testing.assert_array_equal(x, far)


def test_newton_steps_along_negative_curvature_instead_of_only_damping():
    """Where the Hessian is indefinite CG meets negative curvature; the polish still steps downhill (Steihaug)."""
    from dxplain.kernels.newton import newton_pcg, pcg

    # f = x²/2 − y²/2 + y⁴/4: a saddle at the origin, minima at (0, ±1) where f = −1/4.
    def fun_grad(z):
        x, y = z
        return 0.5 * x * x - 0.5 * y * y + 0.25 * y**4, np.array([x, -y + y**3])

    def hess(z):
        return np.diag([1.0, -1.0 + 3 * z[1] ** 2])

    z0 = np.array([0.1, 0.5])  # H = diag(1, −1/4): the first CG direction −g has negative curvature
    f0, g0 = fun_grad(z0)
    p, products, negative = pcg(lambda v: hess(z0) @ v, g0, lambda r: r, 1e-8, 10)
    assert negative and products == 1 and g0 @ p < 0  # a descent direction, not a zero step
    # Met after a few products, the CG iterate so far: a descent direction too.
    H, g = np.diag([1.0, 2.0, -1.0]), np.array([1.0, 1.0, 0.1])
    p, products, negative = pcg(lambda v: H @ v, g, lambda r: r, 1e-8, 10)
    assert negative and products == 3 and g @ p < 0
    blocks = lambda z: np.abs(np.diag(hess(z)))[:, None, None]  # noqa: E731 - 1×1 blocks, positive
    z, gnorm, _, _ = newton_pcg(fun_grad, lambda z, v: hess(z) @ v, blocks, z0, tol=1e-10, mu0=1e-3, maxiter=30)
    assert gnorm <= 1e-10
    np.testing.assert_allclose(np.abs(z), [0.0, 1.0], atol=1e-8)


@pytest.mark.parametrize("k", [3, 34])
def test_fused_hessian_and_curvature_rows_equal_the_sparse_products(k):
    """The compiled Hessian-product and curvature passes against the numpy ones on both sides' rows (an empty
    row too), and the in-process half-steps' Hessian product and blocks against ``als.hessian_vector`` and
    ``als.curvature_grams`` on the whole table."""
    from dxplain.models.als.half_steps import LocalHalfSteps, csr_view

    d = random_interactions(60, 80, 0.15, seed=k)
    rng = np.random.default_rng(k)
    U, V, dU, dV = (rng.normal(size=(m, k)) for m in (d.n_users, d.n_items, d.n_users, d.n_items))
    y, lam, n = d.rating - d.rating.mean(), 0.03, len(d)
    for side, F, G, dF, dG in (("user", U, V, dU, dV), ("item", V, U, dV, dU)):
        view = csr_view(d, y, side)
        ref = als.hessian_rows(*view, F, G, dF, dG, n, lam, fused=False)
        got = als.hessian_rows(*view, F, G, dF, dG, n, lam, fused=True)
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())
        ref = als.curvature_rows(*view[:2], G, n, fused=False)
        got = als.curvature_rows(*view[:2], G, n, fused=True)
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())
    indptr, cols = np.array([0, 0, 2]), np.array([0, 1])  # an empty row: H = λ·dF_row, its block 0
    got = als.hessian_rows(indptr, cols, np.ones(2), U[:2], V, dU[:2], dV, n, lam, fused=True)
    np.testing.assert_allclose(got[0], lam * dU[0])
    np.testing.assert_array_equal(als.curvature_rows(indptr, cols, V, n, fused=True)[0], 0.0)
    local = LocalHalfSteps(d, d.rating.mean(), 1.0)
    P = als.Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items)
    r = y - als.pair_scores(U, V, P.u, P.i)
    for got, ref in zip(local.hessian_vector(U, V, dU, dV, lam), als.hessian_vector(U, V, dU, dV, P, r, lam)):
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())
    for got, ref in zip(local.curvature_grams(U, V), als.curvature_grams(U, V, P, n)):
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())


def test_block_jacobi_solves_each_block_positive_definite_or_not():
    from dxplain.kernels.newton import block_jacobi

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 7, 7))
    blocks = X @ X.transpose(0, 2, 1) + 0.1 * np.eye(7)
    r = rng.normal(size=50 * 7)
    for case in ("definite", "one indefinite block"):
        if case != "definite":
            blocks[17] = np.diag(np.arange(-3.0, 4.0) + 0.5)
        want = np.linalg.solve(blocks, r.reshape(50, 7)[..., None])[..., 0].ravel()
        np.testing.assert_allclose(block_jacobi(blocks)[0](r), want, rtol=1e-10, err_msg=case)
        # in pieces, with a shift, into a reused buffer
        buffer = np.empty_like(blocks)
        apply, L = block_jacobi([blocks[:20] - 0.5 * np.eye(7), blocks[20:] - 0.5 * np.eye(7)], 0.5, buffer)
        assert L is buffer
        np.testing.assert_allclose(apply(r), want, rtol=1e-9, err_msg=case)
