"""The prototypes flow and CLI (Prefect ephemeral mode): outputs, cluster = in memory, bad input."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from conftest import only_run, write_random_dataset

from dxplain.cli import main
from dxplain.datasets import resolve_dataset
from dxplain.explain.prototypes import mf_fisher_embedding
from dxplain.flows.prototypes import prototypes
from dxplain.interactions import Targets
from dxplain.kernels.sbq import greedy, mean_embedding
from dxplain.models.base import FactorModel

ARGS = ["--k", "3", "--lam", "2e-3", "-m", "6"]

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_random_dataset(tmp_path_factory, seed=4)


def test_cli_explains_one_users_list(dataset, tmp_path, capsys):
    folder, _ = dataset
    out = tmp_path / "out"
    assert (
        main(
            [
                "prototypes",
                "--dataset",
                str(folder),
                "--out",
                str(out),
                "--user",
                "u005",
                "--top-n",
                "4",
                "--in-memory",
                *ARGS,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "training interactions explain user u005's list of 4 predictions" in printed
    run = only_run(out, "prototypes")
    protos, targets = pq.read_table(run / "prototypes.parquet"), pq.read_table(run / "targets.parquet")
    summary = json.loads((run / "summary.json").read_text())
    assert targets.column("user").to_pylist() == ["u005"] * 4
    assert protos.num_rows == summary["selected"] == 6
    assert protos.column("rank").to_pylist() == list(range(1, 7))
    assert np.all(np.diff(protos.column("objective").to_numpy()) < 0)
    assert 0 < summary["explained_share"] <= 1
    # Independent recomputation from the stored model: the same points in the same order.
    data = resolve_dataset(str(folder)).interactions
    mf = FactorModel.load(summary["model"], data)
    uid = {str(u): n for n, u in enumerate(data.user_ids.to_pylist())}
    iid = {str(i): n for n, i in enumerate(data.item_ids.to_pylist())}
    T = Targets.from_pairs(
        np.array([uid[u] for u in targets.column("user").to_pylist()]),
        np.array([iid[i] for i in targets.column("item").to_pylist()]),
    )
    Phi, Phi_T = mf_fisher_embedding(mf, data, T)
    ref = greedy(Phi, mean_embedding(Phi_T), 6)
    got = list(zip(protos.column("user").to_pylist(), protos.column("item").to_pylist()))
    assert got == [(data.user_ids[data.user[x]].as_py(), data.item_ids[data.item[x]].as_py()) for x in ref.index]


@pytest.mark.slow  # by default the same comparison runs on isolated workers (test_s3_cluster.py)
def test_cluster_run_selects_the_same_prototypes_as_in_memory(dataset, tmp_path):
    folder, _ = dataset
    targets = tmp_path / "targets.csv"
    pacsv.write_csv(
        pa.table({"user": ["u001", "u002", "u002", "u030"], "item": ["i004", "i007", "i011", "i020"]}), targets
    )
    common = dict(dataset=str(folder), targets=str(targets), m=8, k=3, lam=2e-3)
    mem = prototypes(out=str(tmp_path / "mem"), in_memory=True, **common)
    dsk = prototypes(out=str(tmp_path / "dask"), workers=2, shards=3, **common)
    a = pq.read_table(only_run(tmp_path / "mem", "prototypes") / "prototypes.parquet")
    b = pq.read_table(only_run(tmp_path / "dask", "prototypes") / "prototypes.parquet")
    assert a.column("user").to_pylist() == b.column("user").to_pylist()
    assert a.column("item").to_pylist() == b.column("item").to_pylist()
    np.testing.assert_allclose(a.column("weight").to_numpy(), b.column("weight").to_numpy(), rtol=1e-9)
    assert mem["objective_end"] == pytest.approx(dsk["objective_end"], rel=1e-9)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--user", "u001", "-m", "0"], "-m 0"),
        (["--user", "u001", "--fisher", "hessian"], "--fisher 'hessian'"),
        (["--user", "u001", "--variant", "best"], "--variant 'best'"),
        ([], "--targets FILE"),
        (["--user", "nobody"], "nobody"),
    ],
)
def test_bad_options_are_named_and_nothing_is_written(dataset, tmp_path, capsys, args, message):
    folder, _ = dataset
    out = tmp_path / "out"
    assert main(["prototypes", "--dataset", str(folder), "--out", str(out), "--in-memory", "--k", "3", *args]) == 2
    assert message in capsys.readouterr().err
    assert not (out / "prototypes").exists() and not (out / "models").exists()
