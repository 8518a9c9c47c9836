"""`dxplain pairwise explain`: the output contract, bad input (exit 2, one line, nothing written), and the
Dask path equal to the in-process one."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dxplain.cli import main
from dxplain.config import Settings
from dxplain.mapper import LocalMapper
from dxplain.pairwise.explain import explain_pairs
from dxplain.pairwise.models import OPAUC, LowRank
from dxplain.pairwise.shapley import reference

pytestmark = pytest.mark.usefixtures("prefect_server")

COLUMNS = ["pair", "i", "j", "feature", "phi", "zeta", "base", "rank"]


def table(n=100, D=5, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    s = X @ rng.normal(size=D) + 0.5 * rng.normal(size=n)
    y = np.digitize(s, np.quantile(s, np.linspace(0, 1, classes + 1)[1:-1]))
    cols = {f"f{d}": X[:, d] for d in range(D)}
    return pa.table({**cols, "note": [f"r{k}" for k in range(n)], "y": y})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("pw") / "small.parquet"
    pq.write_table(table(), path)
    return path


@pytest.fixture(scope="module", autouse=True)
def first_flow_outside_capsys(prefect_server, data, tmp_path_factory):
    """The first flow run of a process binds Prefect's console log handler to the sys.stderr of the moment;
    inside a capsys test that stream is closed when the test ends, and later flows' error logs would fail
    on it. One small run here, outside any capsys, binds it to pytest's own stream."""
    out = tmp_path_factory.mktemp("first") / "o"
    assert (
        main(
            [
                "pairwise",
                "explain",
                "--data",
                str(data),
                "--label",
                "y",
                "--model",
                "opauc",
                "--method",
                "asipair",
                "--pairs",
                "1",
                "--out",
                str(out),
                "--in-memory",
            ]
        )
        == 0
    )


@pytest.mark.parametrize("model, method", [("opauc", "asipair"), ("lowrank", "raipair")])
def test_cli_writes_the_contract(data, tmp_path, model, method):
    out = tmp_path / "o"
    assert (
        main(
            [
                "pairwise",
                "explain",
                "--data",
                str(data),
                "--label",
                "y",
                "--model",
                model,
                "--method",
                method,
                "--pairs",
                "6",
                "--seed",
                "1",
                "--out",
                str(out),
                "--in-memory",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["attributions.parquet", "metrics.json"]
    t = pq.read_table(out / "attributions.parquet")
    assert t.column_names == COLUMNS and t.num_rows == 6 * 5
    df = t.to_pandas()
    assert set(df.feature) == {f"f{d}" for d in range(5)}  # 'note' (a string) and the label are not features
    for _, g in df.groupby("pair"):
        assert list(g["rank"]) == [1, 2, 3, 4, 5] and np.all(np.diff(g.phi) <= 0)
        assert g.i.nunique() == g.j.nunique() == 1 and g.i.iloc[0] != g.j.iloc[0]
        if method == "asipair":
            assert abs(g.phi.sum() - (g.zeta.iloc[0] - g.base.iloc[0])) <= 1e-9
    m = json.loads((out / "metrics.json").read_text())
    assert 0.5 < m["auc"] <= 1.0
    assert [r["p"] for r in m["masking"]] == [0.001, 0.01, 0.05, 0.1, 0.15, 0.2, 0.25]
    assert all(0 <= r[f"auc_{k}"] <= 1 for r in m["masking"] for k in ("method", "permutation", "random"))
    assert m["near_chance"] is False and m["auc_lower_bound"] < m["auc"]
    assert m["efficiency_met"] is True and m["max_relative_efficiency_error"] <= 1e-9  # RAIPair too
    assert m["reference_rows"] == m["reference_sampled_from"] == 80  # under the default sample size
    assert m["log_features"] == []  # normal features: no log
    # the estimator's setting chosen and recorded: OPAUC's λ, LowRank's λ or shrinkage
    assert (m["lam"] is not None and f"λ={m['lam']:g}" in m["estimator"]) or "shrinkage" in m["estimator"]
    if model == "opauc":  # (positive, negative) pairs from the test rows
        y = pq.read_table(data).column("y").to_numpy()
        assert np.all(y[df.i] == 1) and np.all(y[df.j] == 0)


def test_csv_input_and_an_existing_out_is_refused(tmp_path, capsys):
    path = tmp_path / "t.csv"
    pacsv.write_csv(table(seed=2), path)
    out = tmp_path / "o"
    args = [
        "pairwise",
        "explain",
        "--data",
        str(path),
        "--label",
        "y",
        "--model",
        "opauc",
        "--method",
        "asipair",
        "--pairs",
        "2",
        "--out",
        str(out),
        "--in-memory",
    ]
    assert main(args) == 0
    before = (out / "attributions.parquet").read_bytes()
    assert main(args) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "attributions.parquet").read_bytes() == before


def _write(tmp_path, t, name="bad.parquet"):
    path = tmp_path / name
    pq.write_table(t, path)
    return path


def nan_table():
    t = table()
    f2 = t.column("f2").to_numpy().copy()
    f2[7] = np.nan
    return t.set_column(2, "f2", pa.array(f2))


@pytest.mark.parametrize(
    "make, args, needle",
    [
        (nan_table, [], "NaN, infinite or missing feature values (first: column 'f2', row 7"),
        (table, ["--eta", "1.5"], "--eta 1.5"),
        (table, ["--eta", "0"], "--eta 0.0"),
        (table, ["--sigma", "0"], "--sigma 0.0"),
        (table, ["--sigma", "-0.2"], "--sigma -0.2"),
        (lambda: table(D=17), [], "D = 17 is above its cap of 16"),
        (lambda: table(classes=3), [], "label column 'y' has 3 classes (0, 1, 2); OPAUC needs exactly two"),
        (table, ["--k1", "81"], "--k1 81: K₁ needs 81 reference instances a side and there are only 80"),
        (lambda: table().rename_columns([f"f{d}" for d in range(5)] + ["note", "target"]), [], "no label column 'y'"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, make, args, needle):
    path = _write(tmp_path, make())
    out = tmp_path / "o"
    argv = [
        "pairwise",
        "explain",
        "--data",
        str(path),
        "--label",
        "y",
        "--model",
        "opauc",
        "--method",
        "asipair",
        "--pairs",
        "3",
        "--out",
        str(out),
        "--in-memory",
        *args,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dxplain: error:") and len(err.splitlines()) == 1 and needle in err
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_a_reference_sample_is_recorded_and_raipair_still_adds_up(data, tmp_path):
    out = tmp_path / "o"
    argv = ["pairwise", "explain", "--data", str(data), "--label", "y", "--method", "raipair", "--pairs", "4"]
    assert main([*argv, "--reference-rows", "25", "--out", str(out), "--in-memory"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["reference_rows"] == 25 and m["reference_sampled_from"] == 80
    assert m["efficiency_met"] is True and m["max_relative_efficiency_error"] <= 1e-9
    df = pq.read_table(out / "attributions.parquet").to_pandas()
    sums = df.groupby("pair").agg(phi=("phi", "sum"), zeta=("zeta", "first"), base=("base", "first"))
    np.testing.assert_allclose(sums.phi, sums.zeta - sums.base, rtol=1e-9, atol=1e-12)


def test_a_url_out_gets_the_folder_a_local_out_gets(data, tmp_path):
    import fsspec

    argv = ["pairwise", "explain", "--data", str(data), "--label", "y", "--pairs", "2", "--in-memory"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    assert main([*argv, "--out", "memory://pw/out"]) == 0
    fs = fsspec.filesystem("memory")
    local = pq.read_table(tmp_path / "o" / "attributions.parquet")
    with fs.open("/pw/out/attributions.parquet", "rb") as fh:
        assert pq.read_table(fh).equals(local)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find("/pw/out")) == sorted(
        p.name for p in (tmp_path / "o").iterdir()
    )
    assert not [p for p in fs.find("/pw") if ".tmp-" in p]  # the staged prefix is gone
    assert main([*argv, "--out", "memory://pw/out"]) == 2  # not empty: refused as a local folder is


def chance_table(n=100, D=5, seed=3):
    t = table(n, D, seed)
    return t.set_column(t.schema.get_field_index("y"), "y", pa.array(np.random.default_rng(9).integers(0, 2, n)))


def test_a_model_at_chance_is_refused_unless_allowed(tmp_path, capsys):
    path = _write(tmp_path, chance_table())
    argv = ["pairwise", "explain", "--data", str(path), "--label", "y", "--pairs", "3", "--in-memory"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "ranks no better than chance" in err and "--allow-chance" in err
    assert not (tmp_path / "o").exists()
    assert main([*argv, "--out", str(tmp_path / "forced"), "--allow-chance"]) == 0
    m = json.loads((tmp_path / "forced" / "metrics.json").read_text())
    assert m["near_chance"] is True and m["auc_lower_bound"] <= 0.5


@pytest.mark.distributed
def test_dask_mapper_equals_local_mapper():
    from dxplain.distributed.cluster import connect
    from dxplain.distributed.mapper import DaskMapper

    t = table(n=80, D=6, seed=3)
    X = np.column_stack([t.column(f"f{d}").to_numpy() for d in range(6)])
    y = t.column("y").to_numpy()
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
        for zeta in (OPAUC(seed=0).fit(X[:60], y[:60]), LowRank(seed=0).fit(X[:60], y[:60])):
            ref = reference(zeta, X[:60])
            Xi, Xj = X[60:70], X[70:80]
            for method in ("asipair", "raipair"):
                a = explain_pairs(zeta, ref, Xi, Xj, method, seed=4, mapper=LocalMapper(), shards=1)
                b = explain_pairs(zeta, ref, Xi, Xj, method, seed=4, mapper=DaskMapper(client), shards=3)
                assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
