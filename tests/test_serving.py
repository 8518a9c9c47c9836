"""``dxplain predict`` and ``dxplain recommend`` (issue 53's CLI contract) against brute force on a tiny model."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.io.dataset_folders import write_dataset
from dxplain.models.base import FactorModel
from dxplain.serving import predict_pairs, side_bias


@pytest.fixture
def stored(tmp_path):
    """A dataset folder, a random k = 3 model stored on it, and both in memory."""
    data = random_interactions(12, 9, 0.3, seed=3)
    write_dataset(tmp_path / "d", interactions_table(data))
    rng = np.random.default_rng(0)
    model = FactorModel(U=rng.normal(size=(12, 3)), V=rng.normal(size=(9, 3)), mu=3.5, lam=0.1, n_train=len(data))
    model.save(tmp_path / "m.zarr", data)
    return tmp_path, data, model


def read(path) -> dict:
    return pq.read_table(path).to_pydict()


def test_predict_keeps_the_input_order_and_falls_back_to_mu(stored):
    tmp, data, model = stored
    users = ["u004", "u000", "nobody", "u011"]
    items = ["i002", "i008", "i001", "unknown"]
    pq.write_table(pa.table({"user": users, "item": items}), tmp / "pairs.parquet")
    assert (
        main(
            [
                "predict",
                "--model",
                str(tmp / "m.zarr"),
                "--pairs",
                str(tmp / "pairs.parquet"),
                "--out",
                str(tmp / "p.parquet"),
            ]
        )
        == 0
    )
    out = read(tmp / "p.parquet")
    assert out["user"] == users and out["item"] == items
    assert out["known"] == [True, True, False, False]
    expected = [3.5 + model.U[4] @ model.V[2], 3.5 + model.U[0] @ model.V[8], 3.5, 3.5]
    np.testing.assert_allclose(out["prediction"], expected, rtol=1e-12)


def test_predict_of_a_biased_model_falls_back_to_the_known_bias():
    rng = np.random.default_rng(1)
    k, lam, lam_b = 2, 0.5, 2.0
    kappa = np.sqrt(lam / lam_b)
    b, c = rng.normal(size=4), rng.normal(size=5)
    U = np.column_stack([rng.normal(size=(4, k)), b / kappa, np.full(4, kappa)])
    V = np.column_stack([rng.normal(size=(5, k)), np.full(5, kappa), c / kappa])
    settings = {"lam_bias": lam_b, "bias_columns": {"user": k, "item": k + 1}}
    model = FactorModel(U=U, V=V, mu=3.0, lam=lam, n_train=10, kind="biased-mf", settings=settings)
    np.testing.assert_allclose(side_bias(model, "user"), b)
    np.testing.assert_allclose(side_bias(model, "item"), c)
    pred, known = predict_pairs(model, np.array([1, -1, 2, -1]), np.array([3, 4, -1, -1]))
    assert known.tolist() == [True, False, False, False]
    full = 3.0 + b[1] + c[3] + U[1, :k] @ V[3, :k]
    np.testing.assert_allclose(pred, [full, 3.0 + c[4], 3.0 + b[2], 3.0], rtol=1e-12)


def test_recommend_gives_the_best_unseen_items_ranked(stored):
    tmp, data, model = stored
    argv = ["recommend", "--model", str(tmp / "m.zarr"), "--dataset", str(tmp / "d"), "--n", "3"]
    assert main([*argv, "--out", str(tmp / "r.parquet")]) == 0
    out = pq.read_table(tmp / "r.parquet")
    scores = model.U @ model.V.T
    seen = {(u, i) for u, i in zip(data.user, data.item)}
    for u in range(data.n_users):
        unseen = [i for i in range(data.n_items) if (u, i) not in seen]
        best = sorted(unseen, key=lambda i: (-scores[u, i], i))[:3]
        rows = out.filter(pa.compute.equal(out["user"], data.user_ids[u]))
        assert rows["item"].to_pylist() == [data.item_ids[i].as_py() for i in best]
        assert rows["rank"].to_pylist() == list(range(1, len(best) + 1))
        np.testing.assert_allclose(rows["score"].to_numpy(), 3.5 + scores[u, best], rtol=1e-12)


def test_recommend_to_listed_users_only(stored):
    tmp, data, model = stored
    pq.write_table(pa.table({"user": ["u002", "u007"]}), tmp / "users.parquet")
    argv = ["recommend", "--model", str(tmp / "m.zarr"), "--dataset", str(tmp / "d"), "--n", "2"]
    assert main([*argv, "--users", str(tmp / "users.parquet"), "--out", str(tmp / "r.parquet")]) == 0
    assert sorted(set(read(tmp / "r.parquet")["user"])) == ["u002", "u007"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["predict", "--model", "no/such.zarr", "--pairs", "p.parquet"], "not a dxplain model store"),
        (["recommend", "--model", "m.zarr", "--dataset", "d", "--n", "0"], "-n 0: give an integer ≥ 1"),
        (["recommend", "--model", "m.zarr", "--dataset", "d", "--users", "none.parquet"], "knows none of these users"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(stored, capsys, monkeypatch, argv, says):
    tmp, _, _ = stored
    monkeypatch.chdir(tmp)
    pq.write_table(pa.table({"user": ["x", "y"]}), tmp / "none.parquet")
    assert main([*argv, "--out", "o.parquet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dxplain: error:") and says in err[0], err
    assert not (tmp / "o.parquet").exists()
