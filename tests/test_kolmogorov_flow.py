"""``dxplain kolmogorov fit``: the output contract, rules checked on the stored model, bad input, Dask = local."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import interactions_table, random_interactions, write_random_dataset

from dxplain.cli import main
from dxplain.kolmogorov.data import probabilities
from dxplain.kolmogorov.fit import fit_ikm

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder, d = write_random_dataset(tmp_path_factory, seed=21)
    test = tmp_path_factory.mktemp("test") / "test.parquet"
    rng = np.random.default_rng(0)
    u, i = rng.integers(0, d.n_users, 60), rng.integers(0, d.n_items, 60)
    pairs = np.unique(u * d.n_items + i)
    u, i = pairs // d.n_items, pairs % d.n_items
    pq.write_table(
        pa.table(
            {
                "user": d.user_ids.take(pa.array(u)),
                "item": d.item_ids.take(pa.array(i)),
                "rating": rng.integers(1, 6, len(u)).astype(float),
            }
        ),
        test,
    )
    return folder, test, d


def fit(folder, out, *extra):
    return main(["kolmogorov", "fit", "--dataset", str(folder), "--out", str(out), "--in-memory", *extra])


def test_fit_writes_the_contract_and_every_rule_holds_in_the_stored_model(dataset, tmp_path):
    folder, test, d = dataset
    out = tmp_path / "o"
    assert fit(folder, out, "--test", str(test), "--dim", "4", "--check-exhaustive", "--iterations", "3") == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"rmse_stars", "nrmse", "train_objective", "sdr_vs_exhaustive_error"} <= set(metrics)
    assert len(metrics["train_objective"]) == 3 and np.all(np.diff(metrics["train_objective"]) <= 1e-9)
    assert np.isclose(metrics["rmse_stars"], 5 * metrics["nrmse"])
    assert {"lam", "mu"} <= set(metrics) and len(metrics["validation"]) == 9  # λ, μ chosen on the grid

    g = zarr.open_group(str(out / "model"), mode="r")
    theta, psi = g["user_factors"][:], g["item_factors"][:]
    assert theta.shape == (d.n_users, 4) and psi.shape == (d.n_items, 4)
    assert np.allclose(theta.sum(axis=1), 1) and set(np.unique(psi)) <= {0.0, 1.0}
    row = {v: n for n, v in enumerate(g["item_ids"][:].tolist())}

    rules = pq.read_table(out / "rules.parquet")
    assert rules.column_names[:3] == ["antecedent", "consequent", "support"] and rules.num_rows > 0
    for a, c in zip(rules.column("antecedent").to_pylist(), rules.column("consequent").to_pylist()):
        i, j = row[a], row[c]
        assert i != j and np.all(psi[j] <= psi[i])  # supp ψ_j ⊆ supp ψ_i

    influence = pq.read_table(out / "influence.parquet")
    assert influence.column_names[:3] == ["item", "beta", "maximal"] and influence.num_rows == d.n_items
    maximal = dict(zip(influence.column("item").to_pylist(), influence.column("maximal").to_pylist()))
    assert all(maximal[v] == bool(psi[n].all()) for v, n in row.items())


def test_exhaustive_solver_and_given_regularisers(dataset, tmp_path):
    folder, test, _ = dataset
    out = tmp_path / "o"
    assert (
        fit(
            folder,
            out,
            "--test",
            str(test),
            "--dim",
            "3",
            "--solver",
            "exhaustive",
            "--lam",
            "0.5",
            "--mu",
            "0.1",
            "--iterations",
            "2",
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["lam"] == 0.5 and metrics["mu"] == 0.1 and "sdr_vs_exhaustive_error" not in metrics


def write_bad(tmp_path, d, rating=None, drop_rating=False, extra_user=False):
    t = interactions_table(d)
    if rating is not None:
        t = t.set_column(2, "rating", pa.array(np.where(np.arange(len(d)) == 0, rating, d.rating)))
    if drop_rating:
        t = t.drop_columns(["rating"])
    path = tmp_path / "bad.parquet"
    pq.write_table(t, path)
    return path


@pytest.mark.parametrize(
    "case, needle",
    [
        ("rating7", "outside [R_min, R_max] = [1, 5]"),
        ("dim1", "--dim 1"),
        ("exhaustive17", "exhaustive search is capped at D ≤ 16"),
        ("unseen", "absent from the training data"),
        ("no_rating", "no 'rating' column"),
    ],
)
def test_bad_input_is_one_named_line_and_writes_nothing(dataset, tmp_path, capsys, case, needle):
    folder, test, d = dataset
    out = tmp_path / "o"
    args = {
        "rating7": lambda: ["--dataset", str(write_bad(tmp_path, d, rating=7.0)), "--dim", "3"],
        "dim1": lambda: ["--dataset", str(folder), "--dim", "1"],
        "exhaustive17": lambda: ["--dataset", str(folder), "--dim", "17", "--solver", "exhaustive"],
        "unseen": lambda: ["--dataset", str(folder), "--dim", "3", "--test", str(unseen_test(tmp_path, d))],
        "no_rating": lambda: ["--dataset", str(write_bad(tmp_path, d, drop_rating=True)), "--dim", "3"],
    }[case]()
    code = main(["kolmogorov", "fit", *args, "--out", str(out), "--in-memory", "--lam", "0", "--mu", "0"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dxplain: error:")]
    assert code == 2 and len(err) == 1 and needle in err[0]
    assert not out.exists()


def unseen_test(tmp_path, d):
    path = tmp_path / "unseen.parquet"
    pq.write_table(pa.table({"user": ["u000", "nobody"], "item": ["i000", "i001"], "rating": [4.0, 3.0]}), path)
    return path


def test_skip_unseen_drops_the_unseen_rows(dataset, tmp_path):
    folder, _, d = dataset
    out = tmp_path / "o"
    assert (
        fit(
            folder,
            out,
            "--dim",
            "3",
            "--test",
            str(unseen_test(tmp_path, d)),
            "--skip-unseen",
            "--lam",
            "0",
            "--mu",
            "0",
            "--iterations",
            "1",
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_test"] == 1 and metrics["skipped_unseen"] == 1


def test_implicit_mode_reads_pairs_without_ratings(dataset, tmp_path):
    _, _, d = dataset
    path = write_bad(tmp_path, d, drop_rating=True)
    out = tmp_path / "o"
    assert fit(path, out, "--dim", "3", "--feedback", "implicit", "--lam", "0", "--mu", "0", "--iterations", "2") == 0
    assert (out / "model" / "zarr.json").exists()


@pytest.mark.distributed
def test_dask_mapper_fits_the_same_model_as_local():
    from dxplain.config import Settings
    from dxplain.distributed.cluster import connect
    from dxplain.distributed.mapper import DaskMapper

    d = probabilities(random_interactions(50, 40, 0.3, seed=22), "explicit", 5.0, 4.0, 1, 0)
    kw = dict(iterations=3, lam=0.2, mu=0.1, shards=3, seed=5)
    local = fit_ikm(d, 4, **kw)
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
        dask = fit_ikm(d, 4, mapper=DaskMapper(client), **kw)
    assert np.array_equal(local.psi, dask.psi) and np.array_equal(local.theta, dask.theta)
    assert local.info["trace"] == dask.info["trace"]


def test_why_spells_a_prediction_as_its_events_and_refuses_another_model(dataset, tmp_path, capsys):
    import re

    folder, _, d = dataset
    out = tmp_path / "o"
    assert fit(folder, out, "--dim", "4", "--lam", "0.5", "--mu", "0.1", "--iterations", "2") == 0
    g = zarr.open_group(str(out / "model"), mode="r")
    theta, psi = g["user_factors"][:], g["item_factors"][:]
    capsys.readouterr()
    u, i = 3, int(np.argmax(psi.sum(axis=1)))  # an item liked in many events
    user, item = d.user_ids[u].as_py(), d.item_ids[i].as_py()
    assert (
        main(
            [
                "kolmogorov",
                "why",
                "--model",
                str(out / "model"),
                "--user",
                user,
                "--item",
                item,
                "--dataset",
                str(folder),
                "--top",
                "2",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    p = float(re.search(r"= ([0-9.]+), the sum", printed).group(1))
    shares = [float(x) for x in re.findall(r"θ = ([0-9.]+)", printed)]
    assert abs(p - theta[u] @ psi[i]) < 1e-3 and abs(sum(shares) - p) < 5e-3 * max(1, len(shares))
    assert len(shares) == int(np.count_nonzero(theta[u] * psi[i]))
    assert main(["kolmogorov", "why", "--model", str(out / "model"), "--user", "nobody", "--item", item]) == 2
    assert "nobody" in capsys.readouterr().err
