"""Implicit feedback end to end: BCE MF on positives and sampled negatives, explained with its own α."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.errors import DegenerateError, UnsupportedModelError
from dxplain.explain.representer import Preprocessed, RepresenterExplainer
from dxplain.interactions import Interactions, Targets
from dxplain.models.als.trainer import ALSMF
from dxplain.models.base import FactorModel
from dxplain.models.implicit_mf import ImplicitMF, looks_implicit, sample_negatives, terms_of, training_table


def implicit_data(n_users=60, n_items=45, density=0.15, seed=0) -> Interactions:
    d = random_interactions(n_users, n_items, density, seed=seed)
    return Interactions.from_indices(d.user, d.item, np.ones(len(d)), d.user_ids, d.item_ids)


def fit_bce(P: Interactions, k=4, per_positive=3, w=1.0, seed=0):
    table = training_table(P, *sample_negatives(P, per_positive, seed))
    return table, ImplicitMF(k=k, neg_weight=w, rtol=1e-10, seed=seed).fit(terms_of(table, w))


def assert_identity(table: Interactions, model, t: Targets, rtol=1e-6):
    """Both sides sum to the score, and sampled negatives are among the attributed points."""
    pre = Preprocessed.from_model(model, table)
    ex = RepresenterExplainer(table, pre)
    s = ex.scores(t)
    for side in ("item", "user"):
        np.testing.assert_allclose(ex.side_sum(t, side), s, rtol=rtol, atol=1e-9 * np.abs(s).max())
    a = ex.user_side(t, top_k=0)
    negatives = table.rating[a.train] == 0
    assert negatives.any() and np.abs(a.global_importance[negatives]).max() > 0
    assert (a.global_importance[negatives] <= 0).all()  # a negative pushes its item's score down (y − σ < 0)
    return s


def test_the_identity_holds_on_synthetic_implicit_data_with_the_negatives_attributed():
    P = implicit_data()
    assert looks_implicit(P)
    table, m = fit_bce(P)
    assert m.loss == "bce" and len(table) == m.n_train
    t = Targets.from_pairs(np.arange(20), (np.arange(20) * 7) % P.n_items)
    s = assert_identity(table, m, t)
    assert np.abs(s).max() > 0.1  # a real model, not all-zero factors


@pytest.mark.slow
def test_the_identity_holds_on_ml100k_binarised(ml100k):
    d = ml100k.interactions
    keep = d.rating >= 4
    P = Interactions.from_indices(d.user[keep], d.item[keep], np.ones(int(keep.sum())), d.user_ids, d.item_ids)
    table, m = fit_bce(P, k=8, per_positive=4)
    rng = np.random.default_rng(1)
    t = Targets.from_pairs(rng.integers(0, P.n_users, 200), rng.integers(0, P.n_items, 200))
    assert_identity(table, m, t)


def test_a_bce_model_is_never_explained_with_another_formula(small):
    P = implicit_data()
    table, m = fit_bce(P)
    stored = FactorModel(m.U, m.V, 0.0, m.lam, m.n_train, loss="bce", kind="implicit-mf", info=m.info)
    # Against its own table: the BCE α, and the identity holds.
    assert_identity(table, stored, Targets.from_pairs([0, 1], [2, 3]))
    # Against the positives alone (as a squared-loss refresh would pass them): refused, named.
    with pytest.raises(UnsupportedModelError, match="BCE model was trained on"):
        Preprocessed.from_model(stored, P)
    # Against explicit ratings: refused too.
    with pytest.raises(UnsupportedModelError, match="ratings other than 0/1"):
        Preprocessed.from_model(
            FactorModel(np.ones((small.n_users, 2)), np.ones((small.n_items, 2)), 0.0, 0.1, len(small), loss="bce"),
            small,
        )
    with pytest.raises(UnsupportedModelError, match="'hinge' has no representer formula"):
        Preprocessed.from_model(FactorModel(m.U, m.V, 0.0, m.lam, m.n_train, loss="hinge"), table)


def test_squared_loss_on_a_single_rating_value_is_a_named_error(tmp_path):
    from functools import partial

    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper
    from dxplain.models.als.block_half_steps import BlockHalfSteps

    d = implicit_data()
    with pytest.raises(DegenerateError, match="single rating value .1.*use --implicit"):
        ALSMF(k=3).fit(d)
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 3)
    with pytest.raises(DegenerateError, match="single rating value .1.*use --implicit"):  # factors in block files
        ALSMF(k=3).fit(d, half_steps=partial(BlockHalfSteps, LocalMapper(), parts))


def all_ones_file(tmp_path) -> str:
    path = tmp_path / "implicit.parquet"
    pq.write_table(interactions_table(implicit_data(50, 40, 0.2, seed=3)), path)
    return str(path)


def test_refresh_detects_implicit_data_and_publishes_identity_checked_explanations(tmp_path, prefect_server):
    from dxplain.explain.report import format_explanation

    out = tmp_path / "out"
    assert (
        main(
            [
                "refresh",
                "--dataset",
                all_ones_file(tmp_path),
                "--out",
                str(out),
                "--in-memory",
                "-k",
                "4",
                "--top-n",
                "3",
                "--top-k",
                "5",
                "--model-kind",
                "bce",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "runs" / (out / "LATEST").read_text().strip() / "_meta" / "manifest.json").read_text())
    s = manifest["summary"]
    assert s["loss"] == "bce" and s["prediction"] == "probability σ(score)"
    assert s["targets"] == 50 * 3 and s["attributions"] > 0 and s["fidelity_ok"]
    assert max(s["fidelity_max_rel_error"].values()) <= 1e-6
    rows = pa.concat_tables([pq.read_table(p) for p in sorted((out / "runs").glob("*/part-*.parquet"))])
    assert set(np.unique(rows.column("rating").to_numpy())) == {0.0, 1.0}  # positives and sampled negatives
    shown = format_explanation(rows.slice(0, 1), loss=s["loss"])
    assert "probability σ(score)" in shown and "predicted rating" not in shown
    p = rows.column("prediction").to_numpy()
    assert ((p > 0) & (p < 1)).all()
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-rows.column("score").to_numpy())), rtol=1e-12)


def test_prototypes_on_implicit_data_match_part_of_the_targets(tmp_path, prefect_server):
    from dxplain.flows.prototypes import prototypes

    s = prototypes(dataset=all_ones_file(tmp_path), user="u001", m=5, k=4, out=str(tmp_path / "out"), in_memory=True)
    assert s["loss"] == "bce" and s["explained_share"] > 0 and s["selected"] > 0
    table = pq.read_table(f"{s['folder']}/prototypes.parquet")
    assert table.num_rows == s["selected"]


def test_a_run_that_explains_nothing_fails_and_latest_stays(tmp_path, prefect_server, capsys):
    # Every user has rated every item: no unseen item, so no recommendation and nothing to explain.
    u, i = np.divmod(np.arange(6 * 5), 5)
    rng = np.random.default_rng(0)
    d = Interactions.from_indices(
        u,
        i,
        rng.integers(1, 6, len(u)).astype(float),
        pa.array([f"u{x}" for x in range(6)]),
        pa.array([f"i{x}" for x in range(5)]),
    )
    path = tmp_path / "full.parquet"
    pq.write_table(interactions_table(d), path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "LATEST").write_text("runs/an-earlier-run\n")
    assert main(["refresh", "--dataset", str(path), "--out", str(out), "--in-memory", "-k", "2"]) == 2
    assert "nothing to recommend" in capsys.readouterr().err  # the CLI's check, before any flow
    # the flow refuses it too when called directly (a deployment, a library call)
    from dxplain.flows.refresh import refresh

    with pytest.raises(DegenerateError, match="explained nothing"):
        refresh(dataset=str(path), out=str(out), in_memory=True, k=2, lam=1e-3)  # the default collapses here
    assert (out / "LATEST").read_text() == "runs/an-earlier-run\n"
    assert not list(out.glob("runs/*/_meta/manifest.json"))


def test_fidelity_above_tol_is_said_and_strict_refuses_to_publish(tmp_path, prefect_server, capsys):
    path = tmp_path / "explicit.parquet"
    pq.write_table(interactions_table(random_interactions(40, 30, 0.3, seed=5)), path)
    capped = [
        "refresh",
        "--dataset",
        str(path),
        "--in-memory",
        "-k",
        "4",
        "--top-n",
        "2",
        "--max-sweeps",
        "1",
        "--newton-steps",
        "0",
    ]  # one ALS sweep: far from stationary
    assert main([*capped, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning: fidelity")]
    assert len(warning) == 1 and "above --tol 0.0001" in warning[0]
    s = json.loads(next((tmp_path / "a" / "runs").glob("*/_meta/manifest.json")).read_text())["summary"]
    assert s["fidelity_ok"] is False and max(s["fidelity_max_rel_error"].values()) > 1e-4
    assert main([*capped, "--out", str(tmp_path / "b"), "--strict"]) == 2
    assert "--strict refuses to publish it" in capsys.readouterr().err
    assert not (tmp_path / "b" / "LATEST").exists()


def test_refresh_on_a_prepared_implicit_dataset_samples_and_trains_by_tasks(tmp_path, prefect_server):
    """A prepared dataset of all-ones ratings: the negatives are drawn per by-user part by tasks and BCE MF
    trains over the parts of D; the explanations still sum to the score."""
    from dxplain.io.dataset_folders import write_dataset

    folder = tmp_path / "ones"
    write_dataset(folder, interactions_table(implicit_data(50, 40, 0.2, seed=3)))
    out = tmp_path / "out"
    assert (
        main(
            [
                "refresh",
                "--dataset",
                str(folder),
                "--out",
                str(out),
                "--in-memory",
                "-k",
                "4",
                "--top-n",
                "3",
                "--top-k",
                "5",
                "--model-kind",
                "bce",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "runs" / (out / "LATEST").read_text().strip() / "_meta" / "manifest.json").read_text())
    s = manifest["summary"]
    assert s["loss"] == "bce" and s["fidelity_ok"] and max(s["fidelity_max_rel_error"].values()) <= 1e-6
    sampled = list((out / "partitions").glob("*/sampled-m4-s0/interactions.parquet/part-*.parquet"))
    assert sampled  # D's rows as the sampling tasks wrote them
    D = pa.concat_tables([pq.read_table(p) for p in sampled])
    assert set(np.unique(D.column("rating").to_numpy())) == {0.0, 1.0}
    assert D.num_rows == len(set(zip(D.column("user").to_pylist(), D.column("item").to_pylist())))
    # A training budget applies to BCE too: the capped model is stored under its own name.
    assert (
        main(
            [
                "refresh",
                "--dataset",
                str(folder),
                "--out",
                str(out),
                "--in-memory",
                "-k",
                "4",
                "--top-n",
                "3",
                "--top-k",
                "5",
                "--max-sweeps",
                "2",
                "--newton-steps",
                "0",
                "--model-kind",
                "bce",
            ]
        )
        == 0
    )
    assert (
        len(list((out / "models").glob("*bce-k4*sweeps2-newton0*")))
        == 1
        == len(list((out / "models").glob("*bce-k4*"))) - 1
    )


def test_factors_that_shrank_to_nearly_zero_are_refused_naming_lambda():
    """A λ large enough that the optimum is UVᵀ = 0: ALS only approaches the zero, so the factors are tiny,
    not zero, and every recommendation would be a tie broken by rounding."""
    from conftest import random_interactions

    d = random_interactions(60, 50, 0.2, seed=4)
    with pytest.raises(DegenerateError, match=r"shrank to nearly zero .*λ = 10 outweighs the data: lower --lam"):
        ALSMF(k=3, lam=10.0).fit(d)
    assert np.abs(ALSMF(k=3, lam=1e-3).fit(d).U).max() > 1e-3  # a smaller λ on the same data is kept
    imported = FactorModel(
        np.full((d.n_users, 3), 1e-9), np.full((d.n_items, 3), 1e-9), 3.0, None, len(d), kind="imported"
    )  # factors of another scale, with no λ to blame
    with pytest.raises(DegenerateError, match="the imported factors shrank .*check the factor files"):
        imported.check_not_degenerate(d)
