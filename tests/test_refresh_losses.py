"""``dxplain refresh --model-kind biased|ials``: the published rows are the whole-table formula's, every side sums to
the score within --tol, the extra rows (bias, unobserved) are there once per target and side; bad settings fail at
once; prototypes and negatives refuse these models by name."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.errors import InputError, UnsupportedModelError
from dxplain.flows.refresh import refresh
from dxplain.interactions import Interactions
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.kernels import ials
from dxplain.models.base import FactorModel
from dxplain.models.biased_mf import biases, interaction_factors

pytestmark = pytest.mark.usefixtures("prefect_server")

TOL = 1e-6


def binarised(d: Interactions) -> Interactions:
    """r = 1[rating ≥ 4] on every stored entry: positives and stored zeros (a stored 0 leaves implicit's sum and is
    an unobserved term in Spark's)."""
    return Interactions.from_indices(d.user, d.item, (d.rating >= 4).astype(float), d.user_ids, d.item_ids)


@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "ratings"
    d = random_interactions(40, 30, 0.3, seed=5)
    write_dataset(folder, interactions_table(d))
    return folder, d


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "binary"
    d = binarised(random_interactions(40, 30, 0.3, seed=6))
    write_dataset(folder, interactions_table(d))
    return folder, d


def run_rows(out) -> pa.Table:
    return runs.open_run(runs.resolve_run(out)).to_table()


def indices(table: pa.Table, d: Interactions) -> dict[str, np.ndarray]:
    """The rows' ids as indices of ``d`` (−1 for a null id)."""
    out = {}
    for column, ids in (
        ("user", d.user_ids),
        ("item", d.item_ids),
        ("train_user", d.user_ids),
        ("train_item", d.item_ids),
    ):
        pos = pc.index_in(table.column(column), value_set=ids)
        out[column] = pc.fill_null(pos, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return out


def check_sides_sum_to_the_score(table: pa.Table, floor: float):
    g = table.group_by(["user", "item", "side"]).aggregate([("importance", "sum"), ("score", "max")])
    total, score = g.column("importance_sum").to_numpy(), g.column("score_max").to_numpy()
    assert np.max(np.abs(total - score) / np.maximum(np.abs(score), floor)) <= TOL


def dense_biased(m: FactorModel, d: Interactions):
    """{(u, j, side, train user, train item, kind): importance} of every row, from the model's U, V, b, c."""
    U, V = interaction_factors(m)
    b, c = biases(m)
    k2 = m.settings["kappa"] ** 2
    alpha = 2 * (d.rating - m.predict(d.user, d.item)) / (m.lam * len(d))

    def rows(u, j):
        out = {(u, j, "item", -1, j, "bias"): c[j], (u, j, "user", u, -1, "bias"): b[u]}
        for p in np.flatnonzero(d.user == u):
            out[(u, j, "item", u, d.item[p], "interaction")] = alpha[p] * (V[d.item[p]] @ V[j] + k2)
        for p in np.flatnonzero(d.item == j):
            out[(u, j, "user", d.user[p], j, "interaction")] = alpha[p] * (U[d.user[p]] @ U[u] + k2)
        return out

    return rows


def dense_ials(m: FactorModel, d: Interactions):
    """The same from iALS's dense weights over every entry: stored terms, and the unobserved ones summed."""
    conv, a = m.settings["convention"], m.settings["alpha"]
    C, P = np.ones((d.n_users, d.n_items)), np.zeros((d.n_users, d.n_items))
    C[d.user, d.item], P[d.user, d.item] = ials.confidence(d.rating, a, conv)
    stored = np.zeros(C.shape, bool)
    stored[d.user, d.item] = True
    pos = np.zeros(C.shape)
    pos[d.user, d.item] = d.rating > 0
    wU, wV = (np.ones(d.n_users), np.ones(d.n_items)) if conv == "implicit" else (pos.sum(1), pos.sum(0))
    U, V = np.asarray(m.U), np.asarray(m.V)
    R = C * (P - U @ V.T)

    def rows(u, j):
        item = R[u] / (m.lam * wU[u]) * (V @ V[j]) if wU[u] > 0 else np.zeros(d.n_items)
        user = R[:, j] / (m.lam * wV[j]) * (U @ U[u]) if wV[j] > 0 else np.zeros(d.n_users)
        out = {
            (u, j, "item", u, -1, "unobserved"): item[~stored[u]].sum(),
            (u, j, "user", -1, j, "unobserved"): user[~stored[:, j]].sum(),
        }
        out.update({(u, j, "item", u, i, "interaction"): item[i] for i in np.flatnonzero(stored[u])})
        out.update({(u, j, "user", v, j, "interaction"): user[v] for v in np.flatnonzero(stored[:, j])})
        return out

    return rows


def check_rows_equal_the_dense_formula(table: pa.Table, d: Interactions, rows):
    ix = indices(table, d)
    side = table.column("side").cast(pa.string()).to_pylist()
    kind = table.column("kind").cast(pa.string()).to_pylist()
    got = {
        (u, j, s, tu, ti, k): v
        for u, j, s, tu, ti, k, v in zip(
            ix["user"],
            ix["item"],
            side,
            ix["train_user"],
            ix["train_item"],
            kind,
            table.column("importance").to_numpy(),
        )
    }
    want = {}
    for u, j in set(zip(ix["user"], ix["item"])):
        want.update(rows(u, j))
    assert set(got) == set(want)
    keys = sorted(want)
    np.testing.assert_allclose([got[x] for x in keys], [want[x] for x in keys], rtol=1e-7, atol=1e-9)


def test_biased_refresh_publishes_the_exact_rows_and_a_bias_row_per_side(ratings, tmp_path):
    folder, d = ratings
    out = tmp_path / "out"
    s = refresh(dataset=str(folder), out=str(out), model_kind="biased", k=3, top_n=3, top_k=0, tol=TOL, in_memory=True)
    assert s["model_kind"] == "biased" and s["loss"] == "squared" and "kappa" in s["model_settings"]
    assert s["fidelity_ok"] and max(s["fidelity_max_rel_error"].values()) <= TOL
    assert s["fidelity_score_floor"] == pytest.approx(1e-2 * (d.rating.max() - d.rating.min()))
    table = run_rows(out)
    assert table.column_names[-1] == "kind"
    bias = table.filter(pc.equal(table.column("kind").cast(pa.string()), "bias"))
    assert bias.num_rows == 2 * s["targets"] and bias.column("rating").null_count == bias.num_rows
    check_sides_sum_to_the_score(table, s["fidelity_score_floor"])
    m = FactorModel.load(s["model"], d)
    check_rows_equal_the_dense_formula(table, d, dense_biased(m, d))
    # the targets are the model's own top-3 by its full score μ + b_u + c_i + ⟨U_u, V_i⟩, rated items excluded
    ix = indices(table, d)
    scores = m.predict(ix["user"], ix["item"]) - m.mu
    np.testing.assert_allclose(table.column("score").to_numpy(), scores, rtol=1e-12, atol=1e-12)


def test_the_default_model_is_biased_mf_for_ratings_and_ials_for_implicit_feedback(ratings, tmp_path):
    """What won on validation (docs/model.md): biased MF for ratings, iALS (implicit's convention) for feedback with
    a single value; either exactly explained at the default --tol."""
    folder, d = ratings
    s = refresh(dataset=str(folder), out=str(tmp_path / "r"), k=3, top_n=2, in_memory=True)
    assert (s["model_kind"], s["loss"]) == ("biased", "squared") and s["fidelity_ok"]
    ones = tmp_path / "ones"
    keep = d.rating >= 4
    write_dataset(
        ones,
        interactions_table(
            Interactions.from_indices(d.user[keep], d.item[keep], np.ones(keep.sum()), d.user_ids, d.item_ids)
        ),
    )
    s = refresh(dataset=str(ones), out=str(tmp_path / "i"), k=3, top_n=2, in_memory=True)
    assert (s["model_kind"], s["model_settings"]["convention"]) == ("ials", "implicit") and s["fidelity_ok"]


@pytest.mark.parametrize("convention", ["implicit", "spark"])
def test_ials_refresh_publishes_the_exact_rows_and_an_unobserved_row_per_side(binary, tmp_path, convention):
    folder, d = binary
    out = tmp_path / "out"
    s = refresh(
        dataset=str(folder),
        out=str(out),
        model_kind="ials",
        convention=convention,
        alpha=2.0,
        lam=0.05,
        k=4,
        top_n=3,
        top_k=0,
        tol=TOL,
        in_memory=True,
    )
    assert s["model_kind"] == "ials" and s["model_settings"]["convention"] == convention
    assert s["model_settings"]["alpha"] == 2.0 and s["prediction"].startswith("preference")
    assert max(s["fidelity_max_rel_error"].values()) <= TOL
    table = run_rows(out)
    unobserved = table.filter(pc.equal(table.column("kind").cast(pa.string()), "unobserved"))
    assert unobserved.num_rows == 2 * s["targets"]
    assert unobserved.column("global_importance").null_count == unobserved.num_rows
    check_sides_sum_to_the_score(table, 1e-12)
    m = FactorModel.load(s["model"], d)
    check_rows_equal_the_dense_formula(table, d, dense_ials(m, d))
    # a stored entry (0 or 1) is never recommended
    ix = indices(table, d)
    assert not np.isin(ix["user"] * d.n_items + ix["item"], d.user.astype(np.int64) * d.n_items + d.item).any()


@pytest.mark.parametrize("convention", ["implicit", "spark"])
def test_top_unobserved_adds_the_largest_terms_of_each_targets_unobserved_row(binary, tmp_path, convention):
    """--top-unobserved K: each target's K unobserved items with the largest |term| on the item side, as the dense
    formula ranks them, with their own importance; the identity still sums the interaction and aggregate rows."""
    folder, d = binary
    s = refresh(
        **dict(dataset=str(folder), out=str(tmp_path / "out"), model_kind="ials", convention=convention, alpha=2.0),
        **dict(lam=0.05, k=4, top_n=3, top_k=0, top_unobserved=2, tol=TOL, in_memory=True),
    )
    table = run_rows(tmp_path / "out")
    kinds = table.column("kind").cast(pa.string())
    terms = table.filter(pc.equal(kinds, "unobserved_term"))
    assert terms.num_rows == 2 * s["targets"] and set(terms.column("side").cast(pa.string()).to_pylist()) == {"item"}
    check_sides_sum_to_the_score(table.filter(pc.not_equal(kinds, "unobserved_term")), 1e-12)
    m = FactorModel.load(s["model"], d)
    conv, a = m.settings["convention"], m.settings["alpha"]
    C, P = np.ones((d.n_users, d.n_items)), np.zeros((d.n_users, d.n_items))
    C[d.user, d.item], P[d.user, d.item] = ials.confidence(d.rating, a, conv)
    stored = np.zeros(C.shape, bool)
    stored[d.user, d.item] = True
    w = np.ones(d.n_users) if conv == "implicit" else np.bincount(d.user, d.rating > 0, d.n_users)
    U, V = np.asarray(m.U), np.asarray(m.V)
    ix = indices(terms, d)
    got = terms.column("importance").to_numpy()
    for u, j in set(zip(ix["user"], ix["item"])):
        term = C[u] * (P[u] - V @ U[u]) / (m.lam * w[u]) * (V @ V[j])
        unobserved = np.flatnonzero(~stored[u])
        want = unobserved[np.argsort(-np.abs(term[unobserved]), kind="stable")[:2]]
        mine = (ix["user"] == u) & (ix["item"] == j)
        assert set(ix["train_item"][mine]) == set(want)
        np.testing.assert_allclose(np.sort(got[mine]), np.sort(term[want]), rtol=1e-8, atol=1e-12)


def test_top_unobserved_is_refused_for_a_model_without_an_unobserved_row(ratings, tmp_path):
    folder, _ = ratings
    with pytest.raises(
        InputError, match="--top-unobserved 2: the terms of iALS's unobserved row; this run's model is biased"
    ):
        refresh(dataset=str(folder), out=str(tmp_path / "out"), top_unobserved=2, in_memory=True)
    assert not (tmp_path / "out" / "runs").exists()


def test_top_k_keeps_the_extra_row_and_the_summary_names_the_kind(binary, tmp_path, capsys):
    folder, _ = binary
    out = tmp_path / "out"
    code = main(
        [
            "refresh",
            "--dataset",
            str(folder),
            "--out",
            str(out),
            "--model-kind",
            "ials",
            "--convention",
            "spark",
            "--lam",
            "0.05",
            "--k",
            "4",
            "--top-n",
            "2",
            "--top-k",
            "1",
            "--in-memory",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[: printed.index("\n}") + 2])
    assert summary["model_kind"] == "ials" and summary["model_settings"]["convention"] == "spark"
    assert "(all unobserved items)" in printed and "(all unobserved users)" in printed  # the example explanation
    table = run_rows(out)
    kinds = table.group_by(["user", "item", "side"]).aggregate([("kind", "count_distinct")])
    assert set(kinds.column("kind_count_distinct").to_pylist()) == {2}  # interaction rows and the unobserved row
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page), "--users", "3", "--reasons", "1"]) == 0
    html = page.read_text()
    assert html.count("(all unobserved items)") == html.count("(all unobserved users)") == 3 * 2  # 3 users, top-2


@pytest.mark.parametrize(("kind", "chosen"), [("biased", {"lam", "lam_bias", "val_rmse"}), ("ials", {"lam", "alpha"})])
def test_select_chooses_on_validation_and_the_summary_shows_the_choice(ratings, binary, tmp_path, kind, chosen):
    folder, d = ratings if kind == "biased" else binary
    s = refresh(
        dataset=str(folder),
        out=str(tmp_path / "out"),
        model_kind=kind,
        select=True,
        k=3,
        top_n=2,
        top_k=2,
        in_memory=True,
    )
    selected = s["model_settings"]["selected"]
    assert chosen <= set(selected) and "grid" not in selected
    assert s["lam"] == selected["lam"] and "-select1" in s["model"]
    assert max(s["fidelity_max_rel_error"].values()) <= 1e-4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-kind", "mf", "--convention", "implicit"], "--convention and --alpha are iALS's settings"),
        (["--convention", "spark"], "pass --model-kind ials"),
        (["--model-kind", "ials", "--alpha", "0"], "--alpha 0.0: give a number > 0"),
        (["--model-kind", "ials", "--lam-bias", "0.1"], "--lam-bias is biased MF's setting"),
        (["--model-kind", "bce", "--select"], "--select chooses λ for mf, biased and ials"),
        (["--model-kind", "biased", "--implicit"], "--implicit trains BCE on sampled negatives"),
        (["--model-kind", "kmeans"], "--model-kind 'kmeans': give one of mf, biased, ials, bce"),
    ],
)
def test_bad_settings_are_one_line_and_nothing_is_written(ratings, tmp_path, capsys, argv, message):
    folder, _ = ratings
    out = tmp_path / "out"
    assert main(["refresh", "--dataset", str(folder), "--out", str(out), "--in-memory", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dxplain: error:") and message in err[0], err
    assert not out.exists()
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        refresh(dataset=str(folder), out=str(out), in_memory=True, **parsed(argv))
    assert not out.exists()


def parsed(argv: list[str]) -> dict:
    kwargs, it = {}, iter(argv)
    for flag in it:
        name = flag[2:].replace("-", "_")
        if name in ("select", "implicit"):
            kwargs[name] = True
            continue
        value = next(it)
        kwargs[name] = float(value) if name in ("alpha", "lam_bias") else value
    return kwargs


def test_a_stored_model_is_explained_with_its_own_formula_and_a_wrong_kind_is_named(binary, tmp_path):
    from dxplain.models.ials import IALS

    folder, d = binary
    m = IALS(k=3, lam=0.05, convention="spark", seed=2).fit(d)
    m.save(tmp_path / "m.zarr", d)
    out = tmp_path / "out"
    s = refresh(dataset=str(folder), model=str(tmp_path / "m.zarr"), out=str(out), top_n=2, top_k=0, in_memory=True)
    assert s["model_kind"] == "ials" and max(s["fidelity_max_rel_error"].values()) <= 1e-5
    check_rows_equal_the_dense_formula(run_rows(out), d, dense_ials(m, d))
    with pytest.raises(InputError, match="is a ials model, --model-kind says biased"):
        refresh(dataset=str(folder), model=str(tmp_path / "m.zarr"), model_kind="biased", out=str(out), in_memory=True)


def test_a_stored_biased_model_is_explained_with_its_bias_rows(ratings, tmp_path):
    from dxplain.models.biased_mf import BiasedMF

    folder, d = ratings
    m = BiasedMF(k=2, lam=0.05, lam_bias=0.01).fit(d)
    m.save(tmp_path / "b.zarr", d)
    out = tmp_path / "out"
    s = refresh(dataset=str(folder), model=str(tmp_path / "b.zarr"), out=str(out), top_n=2, top_k=0, in_memory=True)
    assert s["model_kind"] == "biased" and max(s["fidelity_max_rel_error"].values()) <= 1e-6
    check_rows_equal_the_dense_formula(run_rows(out), d, dense_biased(m, d))


def test_prototypes_and_negatives_refuse_these_models_by_name(ratings, binary):
    from dxplain.explain.negatives import negative_score
    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.interactions import Targets
    from dxplain.models.biased_mf import BiasedMF
    from dxplain.models.ials import IALS

    _, d = ratings
    _, b = binary
    t = Targets.from_pairs([0], [0])
    biased = BiasedMF(k=2, max_sweeps=2, newton_steps=0).fit(d)
    with pytest.raises(UnsupportedModelError, match="biased-mf.*dxplain refresh"):
        mf_fisher_rows(biased, d, t)
    model = IALS(k=2, lam=0.05, max_sweeps=2).fit(b)
    with pytest.raises(UnsupportedModelError, match="'ials'.*unobserved"):
        mf_fisher_rows(model, b, t)
    for m, data in ((model, b), (biased, d)):
        with pytest.raises(UnsupportedModelError, match="BCE"):
            negative_score("representer", m, None, data)


@pytest.fixture(scope="module")
def client():
    from dxplain.config import Settings
    from dxplain.distributed.cluster import connect

    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as c:
        yield c


@pytest.mark.distributed
def test_the_ials_passes_on_a_cluster_write_the_same_bytes_as_in_process(client, tmp_path):
    """Spark's weights (α differs by side) and small parts: the α pass (α per side, B and Bx by item part) and the
    three passes, on LocalMapper and on a 2-process LocalCluster, write byte-identical shards."""
    import pyarrow.parquet as pq

    from dxplain.distributed.mapper import DaskMapper
    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper
    from dxplain.models.ials import IALS
    from dxplain.refresh import RefreshJob, alpha_pass, run_passes, shard_users

    d = binarised(random_interactions(80, 60, 0.2, seed=11))
    m = IALS(k=5, lam=0.05, alpha=3.0, convention="spark", seed=1).fit(d)
    entries = {}
    for name, mapper in (("mem", LocalMapper()), ("dask", DaskMapper(client))):
        parts, factors = alpha_pass(m, write_partitions(tmp_path / f"parts-{name}", d, 150), mapper, d)
        assert len(parts.item_cuts) > 4
        job = RefreshJob(parts, factors, d.item_degree(), top_n=4, top_k=2)
        (tmp_path / name).mkdir()
        entries[name] = run_passes(mapper, job, shard_users(d, 6), str(tmp_path / name)).entries
    assert [e["sha256"] for e in entries["mem"]] == [e["sha256"] for e in entries["dask"]]
    tables = [pq.read_table(tmp_path / name / e["file"]) for name in ("mem", "dask") for e in entries[name][:1]]
    assert tables[0].equals(tables[1]) and tables[0].num_rows > 0
    assert max(e["max_rel_error_item"] for e in entries["mem"]) <= 1e-6
    assert max(e["max_rel_error_user"] for e in entries["mem"]) <= 1e-6


def test_ials_over_parts_of_a_streamed_table_reads_its_ridge_weights_from_the_parts(tmp_path):
    """A prepared dataset's flow holds a TableSummary, not the rows: Spark's weights (positives per user and per
    item) come from the parts, equal to the whole table's."""
    from dxplain.interactions import RowStats, TableSummary
    from dxplain.io.partitions import write_partitions
    from dxplain.mapper import LocalMapper
    from dxplain.models.ials_half_steps import IALSHalfSteps, ridge_weights_of

    d = binarised(random_interactions(40, 30, 0.3, seed=12))
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 3 + 1)
    assert len(parts.user_cuts) > 3
    summary = TableSummary(d.user_ids, d.item_ids, RowStats.of(d.user, d.item, d.rating, d.n_users, d.n_items))
    hs = IALSHalfSteps.over_parts(LocalMapper(), parts, summary, 0.05, 2.0, "spark")
    whole = ridge_weights_of(d, "spark")
    for side in ("user", "item"):
        np.testing.assert_array_equal(hs.w[side], whole[side])
