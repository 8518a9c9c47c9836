"""``import-embeddings --loss ials``: factors trained elsewhere, polished to stationarity or re-solved, and
explained with the loss they were trained on (issue 53)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.interactions import Interactions
from dxplain.io.dataset_folders import write_dataset
from dxplain.kernels import ials as K
from dxplain.models.base import FactorModel
from dxplain.models.ials import IALS
from dxplain.models.imports import import_ials


def clicks(seed=0) -> Interactions:
    d = random_interactions(30, 24, 0.25, seed=seed)
    counts = np.random.default_rng(seed).integers(1, 4, len(d)).astype(float)
    return Interactions.from_indices(d.user, d.item, counts, d.user_ids, d.item_ids)


def history_side_miss(m: FactorModel, d: Interactions, alpha: float) -> float:
    """The largest |Σ attributions + unobserved − score| over every user's items, relative to the scores."""
    c, p = K.confidence(d.rating, alpha, "implicit")
    G = m.V.T @ m.V
    worst, scale = 0.0, 0.0
    for u in range(d.n_users):
        a, b = d.user_indptr[u], d.user_indptr[u + 1]
        targets = np.arange(d.n_items)
        alpha_e, local, aggregate = K.attributions(m.U[u], d.item[a:b], c[a:b], p[a:b], m.V, G, m.lam, targets)
        score = m.V[targets] @ m.U[u]
        worst = max(worst, np.abs(alpha_e @ local + aggregate - score).max())
        scale = max(scale, np.abs(score).max())
    return worst / scale


@pytest.fixture
def external():
    """Factors of a few plain sweeps from a seeded start: far from stationary, as implicit's 15 iterations are."""
    d = clicks()
    m = IALS(k=4, lam=0.1, alpha=2.0, max_sweeps=3, anderson=0, balance=False, seed=5).fit(d)
    assert not m.info["converged"]
    return d, m.U, m.V


def test_polish_trains_on_to_stationarity_and_reports_the_route(external):
    d, U, V = external
    m = import_ials(U, V, d, "implicit", 2.0, 0.1, "polish")
    record = m.settings["import"]
    assert record["route"] == "polish" and record["converged"] and record["sweeps"] > 0
    stalled = import_ials(U, V, d, "implicit", 2.0, 0.1, "polish", trainer=IALS(stall_sweeps=2))  # polishes early
    assert stalled.settings["import"]["newton_steps"] > 0 and stalled.settings["import"]["converged"]
    assert record["moved"]["user"] > 0 and 0 <= record["users_top20_changed"] <= d.n_users
    assert (m.loss, m.kind, m.settings["convention"], m.settings["alpha"]) == ("ials", "imported-ials", "implicit", 2.0)
    assert history_side_miss(m, d, 2.0) < 1e-6
    unpolished = FactorModel(U, V, 0.0, 0.1, len(d), loss="ials")
    assert history_side_miss(unpolished, d, 2.0) > 1e-3  # the check can fail: the imported factors miss


def test_resolve_solves_every_user_exactly_against_the_items(external):
    d, U, V = external
    m = import_ials(U, V, d, "implicit", 2.0, 0.1, "resolve")
    assert m.settings["import"]["route"] == "resolve" and np.array_equal(m.V, V)
    assert history_side_miss(m, d, 2.0) < 1e-9  # the side over a user's own items is exact
    c, p = K.confidence(d.rating, 2.0, "implicit")
    lam_w = 0.1 * np.ones(d.n_users)
    # the same solve, row by row with numpy: (VᵀV + Σ (c−1) V_iV_iᵀ + λI) U_u = Σ c p V_i
    for u in (0, 7, 29):
        a, b = d.user_indptr[u], d.user_indptr[u + 1]
        Vo = V[d.item[a:b]]
        A = V.T @ V + Vo.T @ ((c[a:b] - 1)[:, None] * Vo) + lam_w[u] * np.eye(4)
        np.testing.assert_allclose(m.U[u], np.linalg.solve(A, Vo.T @ (c[a:b] * p[a:b])), rtol=1e-9)


def write_factors(folder, d: Interactions, U, V):
    for side, ids, F in (("user", d.user_ids, U), ("item", d.item_ids, V)):
        pq.write_table(pa.table({"id": ids, "embedding": [list(r) for r in F]}), folder / f"{side}.parquet")


def test_the_cli_imports_polishes_and_stores(tmp_path, external):
    d, U, V = external
    write_dataset(tmp_path / "d", interactions_table(d))
    write_factors(tmp_path, d, U, V)
    argv = ["import-embeddings", "--dataset", str(tmp_path / "d"), "--user-factors", str(tmp_path / "user.parquet")]
    argv += ["--item-factors", str(tmp_path / "item.parquet"), "--loss", "ials", "--alpha", "2", "--lam", "0.1"]
    assert main([*argv, "--out", str(tmp_path / "m.zarr")]) == 0
    back = FactorModel.load(tmp_path / "m.zarr")
    assert back.loss == "ials" and back.settings["import"]["route"] == "polish" and back.settings["alpha"] == 2.0


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--loss", "magic"], "--loss 'magic': give one of squared, ials"),
        (["--loss", "ials", "--convention", "mllib"], "unknown iALS convention 'mllib'"),
        (["--loss", "ials", "--alpha", "0"], "--alpha 0.0: give a number > 0"),
        (["--convention", "spark"], "pass --loss ials"),
        (["--loss", "ials", "--route", "guess"], "--route 'guess': give one of polish, resolve"),
        (["--loss", "ials", "--short"], "have no embedding"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, external, capsys, extra, says):
    d, U, V = external
    write_dataset(tmp_path / "d", interactions_table(d))
    short = "--short" in extra
    write_factors(tmp_path, d, U, V)
    if short:  # a user's row missing: the factors' rows disagree with the data
        pq.write_table(
            pa.table({"id": d.user_ids[:-1], "embedding": [list(r) for r in U[:-1]]}), tmp_path / "user.parquet"
        )
        extra = [x for x in extra if x != "--short"]
    argv = ["import-embeddings", "--dataset", str(tmp_path / "d"), "--user-factors", str(tmp_path / "user.parquet")]
    argv += ["--item-factors", str(tmp_path / "item.parquet"), *extra, "--out", str(tmp_path / "m.zarr")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dxplain: error:") and says in err[0], err
    assert not (tmp_path / "m.zarr").exists()


def test_an_imported_model_of_clicks_is_refreshed_against_the_clicks_themselves(tmp_path, prefect_server):
    """Clicks (a single value) look like BCE's positives; an imported iALS model was fitted on them as they are, so
    the refresh explains it against them, not against a table of sampled negatives (another fingerprint)."""
    from dxplain.flows.refresh import refresh

    d = random_interactions(30, 24, 0.25, seed=2)
    d = Interactions.from_indices(d.user, d.item, np.ones(len(d)), d.user_ids, d.item_ids)
    m = IALS(k=4, lam=0.1, alpha=2.0, max_sweeps=3, anderson=0, balance=False, seed=5).fit(d)
    write_dataset(tmp_path / "d", interactions_table(d))
    write_factors(tmp_path, d, m.U, m.V)
    argv = ["import-embeddings", "--dataset", str(tmp_path / "d"), "--user-factors", str(tmp_path / "user.parquet")]
    argv += ["--item-factors", str(tmp_path / "item.parquet"), "--loss", "ials", "--alpha", "2", "--lam", "0.1"]
    assert main([*argv, "--out", str(tmp_path / "m.zarr")]) == 0
    s = refresh(dataset=str(tmp_path / "d"), model=str(tmp_path / "m.zarr"), out=str(tmp_path / "o"), in_memory=True)
    assert s["model_kind"] == "ials" and s["fidelity_ok"] and s["targets"] == 10 * d.n_users
