"""``dxplain gammli fit`` / ``explain`` (Prefect ephemeral mode): the contract's files and columns, the exact
local decomposition, the latent training-data identity, and bad input."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from threadpoolctl import threadpool_limits

from dxplain.cli import main
from dxplain.gammli.synthetic import eq6

pytestmark = pytest.mark.usefixtures("prefect_server", "one_blas_thread")

FAST = ["--in-memory", "--grid-rounds", "1", "--rank", "2", "--max-pairs", "4"]
FIXED = ["--K", "4", "--L", "4", "--lam", "5"]  # one grid point: for tests about something else


@pytest.fixture(scope="module")
def one_blas_thread():
    # Tiny Gram blocks on a loaded 2-core machine: BLAS threads only contend (10x slower measured).
    with threadpool_limits(1, user_api="blas"):
        yield


def write_case(folder, n=70, seed=0, task="regression", cold_users=5):
    """eq. 6 at n×n: feature tables, a train file and a test file holding ``cold_users`` unseen users."""
    d = eq6(n, n, missing=0.75, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    users = d["users"].append_column("segment", pa.array(np.where(np.arange(n) % 3 == 0, "a", "b")))
    pq.write_table(users, folder / "users.parquet")
    pq.write_table(d["items"], folder / "items.parquet")
    y = d["y"] if task == "regression" else d["label"]
    rng = np.random.default_rng(seed)
    test = (d["u"] < cold_users) | (rng.random(len(y)) < 0.15)
    for name, sel in (("train", ~test), ("test", test)):
        pq.write_table(
            pa.table({"user": d["u"][sel], "item": d["i"][sel], "rating": y[sel]}), folder / f"{name}.parquet"
        )
    pq.write_table(pa.table({"user": d["u"][test][:20], "item": d["i"][test][:20]}), folder / "pairs.parquet")
    return folder


def fit_args(data, out, *extra):
    return [
        "gammli",
        "fit",
        "--dataset",
        str(data / "train.parquet"),
        "--user-features",
        str(data / "users.parquet"),
        "--item-features",
        str(data / "items.parquet"),
        "--test",
        str(data / "test.parquet"),
        "--out",
        str(out),
        "--categorical",
        "segment",
        *FAST,
        *extra,
    ]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    data = write_case(tmp_path_factory.mktemp("gdata"))
    out = tmp_path_factory.mktemp("gout") / "O"
    assert main(fit_args(data, out, "--lam", "5")) == 0  # K and L from a 3×3 grid
    return data, out


def test_fit_writes_the_contract(fitted):
    data, out = fitted
    m = json.loads((out / "metrics.json").read_text())
    for key in ("rmse", "mae", "n_test", "n_cold", "rmse_cold", "K", "L", "lam", "ir"):
        assert key in m, key
    test = pq.read_table(data / "test.parquet")
    assert m["n_test"] == test.num_rows and m["n_cold"] >= (test.column("user").to_numpy() < 5).sum() > 0
    assert abs(sum(m["ir"].values()) - 1) < 1e-9 and "latent" in m["ir"]
    local = pq.read_table(out / "local.parquet")
    assert local.column_names == ["user", "item", "term", "contribution", "prediction"]
    pairs = set(zip(test.column("user").to_pylist(), test.column("item").to_pylist()))
    assert set(zip(local.column("user").to_pylist(), local.column("item").to_pylist())) == pairs
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert "ir.png" in pngs and "groups.png" in pngs and any(p.startswith("main_") for p in pngs)
    for name in ("shapes", "interactions", "groups"):
        assert pq.read_table(out / "plots" / f"{name}.parquet").num_rows > 0
    assert sorted(p.name for p in (out / "model").iterdir()) == [
        "arrays.npz",
        "item_features.parquet",
        "meta.json",
        "train",
        "user_features.parquet",
    ]
    # the training residuals were written by the tasks, one file per user part, each row once
    meta = json.loads((out / "model" / "meta.json").read_text())
    parts = sorted((out / "model" / "train").iterdir())
    assert [p.name for p in parts] == [f"part-{n:05d}.parquet" for n in range(meta["train_parts"])]
    train = pa.concat_tables([pq.read_table(p) for p in parts])
    assert train.num_rows == m["n_train"] and np.all(np.diff(train.column("u").to_numpy()) >= 0)
    assert set(m["peak_rss_mib"]) == {"flow", "workers"}
    # the metric is the one of the written predictions
    pred = local.group_by(["user", "item"]).aggregate([("prediction", "max")])
    joined = pred.join(test, ["user", "item"])
    rmse = np.sqrt(np.mean((joined.column("prediction_max").to_numpy() - joined.column("rating").to_numpy()) ** 2))
    assert rmse == pytest.approx(m["rmse"], rel=1e-12)


def test_a_failed_fit_resumes_after_its_selection_and_equals_an_unbroken_one(fitted, tmp_path, monkeypatch):
    import dxplain.gammli.fit as F

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    data, out = write_case(tmp_path / "d"), tmp_path / "O"  # the fixture's data, in another folder
    checkpoint = tmp_path / ".O.checkpoint"
    with monkeypatch.context() as m:
        m.setattr(F, "fit_backfitted", killed)  # dies in stage 3, after the selection
        with pytest.raises(RuntimeError, match="killed"):
            main(fit_args(data, out, "--lam", "5"))
    assert not out.exists() and (checkpoint / "selection.json").exists()
    with monkeypatch.context() as m:
        m.setattr(F, "select", killed)  # a rerun must not select again
        assert main(fit_args(data, out, "--lam", "5")) == 0
    assert json.loads((out / "metrics.json").read_text())["resumed"] == ["selection"] and not checkpoint.exists()
    assert pq.read_table(out / "local.parquet").equals(pq.read_table(fitted[1] / "local.parquet"))
    # other inputs: the stale selection is dropped, not reused
    with monkeypatch.context() as m:
        m.setattr(F, "fit_backfitted", killed)
        with pytest.raises(RuntimeError):
            main(fit_args(data, tmp_path / "O2", "--lam", "5"))
    write_case(data, seed=1)
    with monkeypatch.context() as m:
        m.setattr(F, "select", killed)
        with pytest.raises(RuntimeError, match="killed"):
            main(fit_args(data, tmp_path / "O2", "--lam", "5"))


def test_explain_reads_exactly_the_training_rows_of_its_pairs(fitted):
    from dxplain.io.gammli_model import load_model, read_training_rows

    model = fitted[1] / "model"
    arrays, _, _, _ = load_model(model)
    assert "train_u" not in arrays  # the residuals stay in train/ until a set of pairs asks for its rows
    full = pa.concat_tables([pq.read_table(p) for p in sorted((model / "train").glob("part-*.parquet"))])
    u, i, e = (full[k].to_numpy() for k in "uie")
    users, items = np.array([3, 10]), np.array([7])
    keep = np.isin(u, users) | np.isin(i, items)
    assert 0 < keep.sum() < len(u)
    inline = {**arrays, "train_u": u, "train_i": i, "train_e": e}  # a model that kept them in its arrays
    for got in (read_training_rows(model, arrays, users, items), read_training_rows(model, inline, users, items)):
        for k, want in zip("uie", (u, i, e)):
            np.testing.assert_array_equal(got[k], want[keep])


def test_local_contributions_sum_to_the_prediction_on_every_row(fitted):
    _, out = fitted
    t = pq.read_table(out / "local.parquet").to_pandas()
    sums = t.groupby(["user", "item"]).agg(
        s=("contribution", "sum"), p=("prediction", "first"), spread=("prediction", lambda x: x.max() - x.min())
    )
    assert (sums["spread"] == 0).all()
    assert np.abs(sums["s"] - sums["p"]).max() < 1e-9
    assert {"intercept", "latent"} <= set(t["term"])


def test_explain_gives_the_same_local_rows_and_attributions_that_sum_to_the_latent_score(fitted, tmp_path):
    data, out = fitted
    o2 = tmp_path / "O2"
    assert (
        main(
            [
                "gammli",
                "explain",
                "--model",
                str(out / "model"),
                "--pairs",
                str(data / "pairs.parquet"),
                "--out",
                str(o2),
                "--top-k",
                "3",
            ]
        )
        == 0
    )
    local = pq.read_table(o2 / "local.parquet").to_pandas()
    fit_local = pq.read_table(out / "local.parquet").to_pandas()
    merged = local.merge(fit_local, on=["user", "item", "term"], suffixes=("", "_fit"))
    assert len(merged) == len(local) > 0
    assert np.abs(merged["contribution"] - merged["contribution_fit"]).max() < 1e-12
    lat = pq.read_table(o2 / "latent.parquet").to_pandas()
    scale = np.abs(lat["latent"]).max()
    for side in ("user", "item"):
        err = np.abs(lat[f"{side}_prior"] + lat[f"{side}_attributions"] - lat["latent"]).max()
        assert err < 1e-6 * scale, side
    att = pq.read_table(o2 / "attributions.parquet").to_pandas()
    assert set(att.columns) >= {"user", "item", "side", "rank", "train_user", "train_item", "attribution"}
    assert att.groupby(["user", "item", "side"])["rank"].max().max() <= 3
    # the user side's training ratings are the user's own; the item side's are the item's
    train = pq.read_table(data / "train.parquet").to_pandas()
    rated = set(zip(train["user"], train["item"]))
    assert all((a, b) in rated for a, b in zip(att["train_user"], att["train_item"]))
    us = att[att["side"] == "user"]
    assert (us["train_user"] == us["user"]).all()


def test_classification_reports_auc_and_log_loss(tmp_path):
    data = write_case(tmp_path / "c", seed=1, task="classification")
    assert main(fit_args(data, tmp_path / "O", "--task", "classification", *FIXED)) == 0
    m = json.loads((tmp_path / "O" / "metrics.json").read_text())
    assert 0.5 < m["auc"] <= 1 and 0 < m["log_loss"] < np.log(2)
    t = pq.read_table(tmp_path / "O" / "local.parquet").to_pandas()
    s = t.groupby(["user", "item"]).agg(s=("contribution", "sum"), p=("prediction", "first"))
    assert np.abs(s["s"] - s["p"]).max() < 1e-9


def _break(data, kind):
    users = pq.read_table(data / "users.parquet")
    if kind == "missing-user":
        pq.write_table(users.slice(1), data / "users.parquet")
        return "user feature table", []
    if kind == "missing-item":
        items = pq.read_table(data / "items.parquet")
        pq.write_table(items.slice(0, items.num_rows - 1), data / "items.parquet")
        return "item feature table", []
    if kind == "inf":
        items = pq.read_table(data / "items.parquet")
        z = items.column("z2").to_numpy().copy()
        z[5] = -np.inf
        pq.write_table(items.set_column(items.column_names.index("z2"), "z2", pa.array(z)), data / "items.parquet")
        return "infinite", []
    if kind == "nan":
        x = users.column("x1").to_numpy().copy()
        x[3] = np.nan
        pq.write_table(users.set_column(1, "x1", pa.array(x)), data / "users.parquet")
        return "NaN", []
    if kind == "text":
        return "--categorical segment", ["--categorical", "x1"]  # segment is text and now undeclared
    if kind == "labels":
        return "not 0 or 1", ["--task", "classification"]
    if kind == "K":
        return "--K 1000", ["--K", "1000"]
    if kind == "L":
        return "--L 41", ["--L", "41"]  # one more than the 40 items
    if kind == "empty-val":
        return "validation split is empty", ["--val-fraction", "0"]
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["missing-user", "missing-item", "nan", "inf", "text", "labels", "K", "L", "empty-val"]
)
def test_bad_input_is_one_named_error_and_nothing_is_written(kind, tmp_path, capsys):
    data = write_case(tmp_path / "d", n=40)
    needle, extra = _break(data, kind)
    out = tmp_path / "O"
    args = fit_args(data, out, *(extra + ([] if kind in ("K", "L") else FIXED)))
    if kind == "text":
        args.remove("segment")
        args.remove("--categorical")
    assert main(args) == 2
    err = capsys.readouterr().err
    named = [line for line in err.splitlines() if line.startswith("dxplain: error:")]
    assert len(named) == 1 and needle in named[0], err
    assert not out.exists()


def test_a_missing_user_can_be_treated_as_cold(tmp_path):
    data = write_case(tmp_path / "d", n=40)
    users = pq.read_table(data / "users.parquet")
    pq.write_table(users.slice(6), data / "users.parquet")  # users 0..5 have no features
    out = tmp_path / "O"
    assert main(fit_args(data, out, "--cold-start-missing", *FIXED)) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["dropped_train"] > 0 and m["n_cold"] > 0
    t = pq.read_table(out / "local.parquet").to_pandas()
    nofeat = t[t["user"] < 6]
    assert len(nofeat) and (nofeat[nofeat["term"].str.startswith("user:")]["contribution"] == 0).all()
