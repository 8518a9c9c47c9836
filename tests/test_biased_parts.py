"""Biased MF over the partitioned interactions (``models.biased_half_steps.BiasedPartHalfSteps``): each pass over the
parts equals the in-process one and the Hessian product is the gradient's derivative on the free coordinates; a fit
over parts (on a LocalMapper, on a 2-process LocalCluster, from a streamed table's summary alone) is the in-process
fit."""

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from conftest import random_interactions
from test_partitions import scan, streamed_folder

from dxplain import ingest
from dxplain.config import Settings
from dxplain.io.partitions import write_partitions
from dxplain.io.spill import SpillList
from dxplain.mapper import LocalMapper
from dxplain.models.als.losses import BCERows, SquaredRows
from dxplain.models.biased_half_steps import BiasedHalfSteps, BiasedPartHalfSteps
from dxplain.models.biased_mf import BiasedMF, augment, kappa_of

LAM, LAM_BIAS = 3e-3, 1e-2


@pytest.fixture(scope="module")
def client():
    from dxplain.distributed.cluster import connect

    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as c:
        yield c


def mapper_of(kind, request):
    if kind == "local":
        return LocalMapper()
    from dxplain.distributed.mapper import DaskMapper

    return DaskMapper(request.getfixturevalue("client"))


MAPPERS = ["local", pytest.param("dask", marks=pytest.mark.distributed)]


@pytest.fixture(scope="module")
def data():
    # Data on which BUDGETS hold as their comments say: Anderson's sweeps reach the bound without stalling and the
    # polish's stop is above f's rounding floor (on seed 21 the rescaled sweeps cross to a lower minimum and stall).
    return random_interactions(120, 90, 0.15, seed=25)


@pytest.fixture(scope="module")
def parts(data, tmp_path_factory):
    p = write_partitions(tmp_path_factory.mktemp("parts"), data, rows_per_part=len(data) // 5 + 1)
    assert len(p.user_cuts) - 1 == 5 and len(p.item_cuts) - 1 >= 4  # every pass spans several parts a side
    return p


def a_point(data, k, kappa, seed=0):
    """Augmented factors (Ũ, Ṽ) of rank k with random factors and biases."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(scale=0.5, size=(data.n_users, k)), rng.normal(scale=0.5, size=(data.n_items, k))
    return augment(U, V, rng.normal(size=data.n_users), rng.normal(size=data.n_items), kappa)


def test_passes_over_parts_equal_the_in_process_ones(data, parts):
    """Both half-steps (the users' exact and by CG steps), the gradient, the measure with its miss bound, the Hessian
    product and the curvature blocks: the rows over parts equal the whole table's in this process."""
    mu, kappa, n = data.rating_mean(), kappa_of(LAM, LAM_BIAS), len(data)
    ridge = LAM * n / 2
    cg = SquaredRows(cg_steps=3)  # the users' half-step by CG steps when given the users' previous rows
    local = BiasedHalfSteps(data, mu, ridge, loss=cg, kappa=kappa)
    over = BiasedPartHalfSteps(LocalMapper(), parts, data, mu, ridge, loss=cg, kappa=kappa)
    U, V = a_point(data, 3, kappa)
    rng = np.random.default_rng(1)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)

    close(over.users(V), local.users(V))
    close(over.users(V, U), local.users(V, U))
    assert not np.allclose(local.users(V, U), local.users(V))  # the CG steps stop short of the exact solve
    close(over.items(U), local.items(U))
    for a, b in zip(over.gradient(U, V, LAM), local.gradient(U, V, LAM)):
        close(a, b)
    for bound in (True, False):
        got, want = over.stationarity(U, V, LAM, bound), local.stationarity(U, V, LAM, bound)
        assert got[:2] == pytest.approx(want[:2], rel=1e-12)
        assert got[2] == (pytest.approx(want[2], rel=1e-12) if bound else None)
    for a, b in zip(over.hessian_vector(U, V, dU, dV, LAM), local.hessian_vector(U, V, dU, dV, LAM)):
        close(a, b)
    for a, b in zip(over.curvature_grams(U, V), local.curvature_grams(U, V)):
        close(a, b)


def test_miss_bound_and_hessian_on_the_free_coordinates(data, parts):
    """The measure's bound is max_u ‖∇_u f‖ · max_j ‖[V_j, κ]‖/λ and its mirror; the Hessian product over parts is
    the derivative of the gradient along a direction of the free coordinates, and ignores the fixed ones."""
    mu, kappa, n = data.rating_mean(), kappa_of(LAM, LAM_BIAS), len(data)
    over = BiasedPartHalfSteps(LocalMapper(), parts, data, mu, LAM * n / 2, kappa=kappa)
    U, V = a_point(data, 3, kappa, seed=2)
    _, gU, gV = over.gradient(U, V, LAM)
    assert not gU[:, 4].any() and not gV[:, 3].any()  # the fixed coordinates have no gradient

    def longest(X):
        return np.linalg.norm(X, axis=1).max()

    want = longest(gU) * longest(V[:, :4]) / LAM, longest(gV) * longest(U[:, [0, 1, 2, 4]]) / LAM
    assert over.stationarity(U, V, LAM, bound=True)[2] == pytest.approx(want, rel=1e-12)
    rng = np.random.default_rng(3)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    dU[:, 4], dV[:, 3] = 0.0, 0.0
    hU, hV = over.hessian_vector(U, V, dU, dV, LAM)
    eps = 1e-6
    plus, minus = over.gradient(U + eps * dU, V + eps * dV, LAM), over.gradient(U - eps * dU, V - eps * dV, LAM)
    np.testing.assert_allclose(hU, (plus[1] - minus[1]) / (2 * eps), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(hV, (plus[2] - minus[2]) / (2 * eps), rtol=1e-6, atol=1e-9)
    dU[:, 4], dV[:, 3] = rng.normal(size=len(U)), rng.normal(size=len(V))
    for a, b in zip(over.hessian_vector(U, V, dU, dV, LAM), (hU, hV)):
        np.testing.assert_array_equal(a, b)


class CountingMapper(LocalMapper):
    """A LocalMapper that counts what is put: what would travel to the workers."""

    def __init__(self):
        super().__init__()
        self.puts = 0

    def put(self, obj, broadcast: bool = False):
        self.puts += 1
        return super().put(obj, broadcast)


def test_a_newton_steps_passes_send_its_point_once(data, parts):
    """The gradient, the curvature blocks and the Hessian products at one (U, V) put U and V once, each product
    its direction only; a new point is put again; the results are those of fresh puts."""
    mu, kappa, n = data.rating_mean(), kappa_of(LAM, LAM_BIAS), len(data)
    mapper = CountingMapper()
    over = BiasedPartHalfSteps(mapper, parts, data, mu, LAM * n / 2, kappa=kappa)
    U, V = a_point(data, 3, kappa)
    rng = np.random.default_rng(4)
    directions = [(rng.normal(size=U.shape), rng.normal(size=V.shape)) for _ in range(3)]
    mapper.puts = 0
    over.gradient(U, V, LAM)
    over.curvature_grams(U, V)
    products = [over.hessian_vector(U, V, dU, dV, LAM) for dU, dV in directions]
    assert mapper.puts == 2 + 2 * len(directions)
    U2 = U + 0.1
    over.gradient(U2, V, LAM)
    assert mapper.puts == 2 + 2 * len(directions) + 2
    fresh = BiasedPartHalfSteps(LocalMapper(), parts, data, mu, LAM * n / 2, kappa=kappa)
    for (dU, dV), got in zip(directions, products):
        for a, b in zip(got, fresh.hessian_vector(U, V, dU, dV, LAM)):
            np.testing.assert_array_equal(a, b)


BUDGETS = [
    {"max_sweeps": 40, "newton_steps": 0},  # Anderson sweeps cut short: the same sweeps, not converged
    {"miss_tol": 1e-9},  # Anderson sweeps to the bound (they do not stall here: no polish)
    {"miss_tol": 1e-8, "anderson": 0, "max_sweeps": 3},  # three plain sweeps, then the polish
]


@pytest.mark.parametrize(
    "kind, budget",
    [
        # On the cluster the first budget runs by default; the others (Anderson to the bound, the polish after
        # plain sweeps: 10 to 25 s each there) call the mapper as it does: with -m slow.
        pytest.param(kind, budget, marks=[pytest.mark.distributed] + [pytest.mark.slow] * (n >= 1), id=f"{kind}-{n}")
        if kind == "dask"
        else pytest.param(kind, budget, id=f"{kind}-{n}")
        for n, budget in enumerate(BUDGETS)
        for kind in ("local", "dask")
    ],
)
def test_fit_over_parts_is_the_in_process_fit(data, parts, kind, budget, request):
    """The same sweeps and Newton steps, to the same factors, whether the sweeps stop on their budget, on the bound,
    or hand over to the polish. (Where the polish's stop lies at the rounding floor of
    f, its line search is decided by f's last bits, which the parts sum in another order: the bounds here are above
    it: at 1e-9 one order of summation stops a Newton step before the other, depending on how numba compiled.)"""
    trainer = BiasedMF(k=3, lam=LAM, lam_bias=LAM_BIAS, **budget)
    here = trainer.fit(data)
    over = trainer.fit(data, half_steps=partial(BiasedPartHalfSteps, mapper_of(kind, request), parts))
    assert trainer.converged(here) == trainer.converged(over) == ("miss_tol" in budget)
    assert (over.info["sweeps"], over.info["newton_iters"]) == (here.info["sweeps"], here.info["newton_iters"])
    assert (here.info["newton_iters"] > 0) == ("anderson" in budget)
    np.testing.assert_allclose(over.U, here.U, rtol=0, atol=1e-10 * np.abs(here.U).max())
    np.testing.assert_allclose(over.V, here.V, rtol=0, atol=1e-10 * np.abs(here.V).max())
    assert (over.kind, over.settings, over.mu, over.lam) == (here.kind, here.settings, here.mu, here.lam)
    assert over.info["miss_bound"] == pytest.approx(here.info["miss_bound"], rel=1e-6)


def test_fit_from_a_streamed_tables_summary_alone(tmp_path):
    """The flow's process of a refresh keeps the table's summary (``ingest.scan_source``), never its rows, and the
    Anderson history in files: the fit over the streamed parts takes only that, and is the in-process fit."""
    d = random_interactions(90, 70, 0.2, seed=5)
    folder = streamed_folder(tmp_path, d)
    summary = scan(folder)
    streamed = ingest.stream_partitions(
        LocalMapper(), folder / "interactions.parquet", summary, tmp_path / "s", rows_per_part=200, rows_per_chunk=200
    )
    trainer = BiasedMF(k=3, lam=LAM, lam_bias=LAM_BIAS, miss_tol=1e-12)
    over = replace(trainer, anderson_store=SpillList).fit(
        summary, half_steps=partial(BiasedPartHalfSteps, LocalMapper(), streamed)
    )
    here = trainer.fit(d)
    assert trainer.converged(over) and over.info["sweeps"] == here.info["sweeps"]
    np.testing.assert_allclose(over.U, here.U, rtol=0, atol=1e-10 * np.abs(here.U).max())
    np.testing.assert_allclose(over.V, here.V, rtol=0, atol=1e-10 * np.abs(here.V).max())


def test_only_the_squared_loss(data, parts):
    with pytest.raises(ValueError, match="squared loss"):
        BiasedPartHalfSteps(LocalMapper(), parts, data, 0.0, 1.0, loss=BCERows(0.5), kappa=1.0)
