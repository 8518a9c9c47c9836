"""Result folders on an S3 API (moto's server over HTTP): every command other than the refresh writes to an
``s3://`` ``--out`` the folder it writes to a local one, staged under a temporary prefix that tasks write to as well
and published object by object; nothing temporary is left behind. ``evaluate`` keeps its resume cache's keys on
the flow's host (beside Prefect's local result storage), named by the URL."""

import pyarrow.parquet as pq
import pytest
from conftest import only_run, write_random_dataset
from test_gammli_flow import FIXED, fit_args, write_case

from dxplain.cli import main

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_random_dataset(tmp_path_factory, seed=3)[0]


def remote_files(s3, prefix: str) -> dict[str, str]:
    """Relative name → key of every object under ``prefix`` (after the listing cache is dropped)."""
    s3.invalidate_cache()
    return {k[len(prefix) + 1 :]: k for k in s3.find(prefix)}


def local_files(folder) -> dict[str, object]:
    return {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}


def assert_same_tables(s3, prefix: str, folder, names: list[str]) -> None:
    remote, local = remote_files(s3, prefix), local_files(folder)
    assert set(remote) == set(local), (sorted(remote), sorted(local))
    for name in names:
        with s3.open(remote[name], "rb") as fh:
            assert pq.read_table(fh).equals(pq.read_table(local[name])), name
    assert not [k for k in s3.find(prefix.split("/", 1)[0]) if ".tmp-" in k]


def one_result(s3, prefix: str) -> str:
    s3.invalidate_cache()
    (folder,) = [k for k in s3.ls(prefix) if not k.rsplit("/", 1)[-1].startswith(".")]
    return folder


# The default run keeps sampled negatives (tasks write under the staged prefix) and evaluate here; the other cases
# run by default on isolated workers against S3 (test_s3_cluster.py), and here with -m slow.
@pytest.mark.parametrize(
    "sampled", [pytest.param(False, marks=pytest.mark.slow), True], ids=["all-negatives", "sampled-in-parts"]
)
def test_negatives_on_s3(s3, dataset, tmp_path, sampled):
    extra = ["--k", "3", "--lam", "2e-4", "--percent", "5", "--in-memory"] + (["--negatives", "2"] if sampled else [])
    out = f"s3://dxplain/negatives-{sampled}"
    assert main(["negatives", "--dataset", str(dataset), "--out", str(tmp_path / "o"), *extra]) == 0
    assert main(["negatives", "--dataset", str(dataset), "--out", out, *extra]) == 0
    folder = only_run(tmp_path / "o", "negatives")
    names = ["flagged.parquet"] + (["cleaned-negatives.parquet/part-00000.parquet"] if sampled else [])
    assert_same_tables(s3, one_result(s3, f"dxplain/negatives-{sampled}/negatives"), folder, names)


@pytest.mark.slow  # by default: on isolated workers (test_s3_cluster.py)
def test_prototypes_on_s3(s3, dataset, tmp_path):
    extra = [
        "--user",
        "u005",
        "--top-n",
        "4",
        "-m",
        "3",
        "--k",
        "3",
        "--lam",
        "2e-3",
        "--in-memory",
        "--max-sweeps",
        "4",
    ]
    assert main(["prototypes", "--dataset", str(dataset), "--out", str(tmp_path / "o"), *extra]) == 0
    assert main(["prototypes", "--dataset", str(dataset), "--out", "s3://dxplain/proto", *extra]) == 0
    folder = only_run(tmp_path / "o", "prototypes")
    names = ["prototypes.parquet", "targets.parquet"]
    assert_same_tables(s3, one_result(s3, "dxplain/proto/prototypes"), folder, names)


@pytest.mark.slow
def test_kolmogorov_fit_on_s3(s3, dataset, tmp_path):
    args = ["kolmogorov", "fit", "--dataset", str(dataset), "--in-memory", "--dim", "4", "--iterations", "2"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    assert main([*args, "--out", "s3://dxplain/kolmogorov"]) == 0
    names = [n for n in local_files(tmp_path / "o") if n.endswith(".parquet")]
    assert names
    assert_same_tables(s3, "dxplain/kolmogorov", tmp_path / "o", names)
    assert main([*args, "--out", "s3://dxplain/kolmogorov"]) == 2  # not empty: refused as a local folder is


@pytest.mark.slow  # by default: on isolated workers (test_s3_cluster.py)
def test_gammli_fit_on_s3(s3, tmp_path):
    data = write_case(tmp_path / "case", n=40)
    assert main(fit_args(data, tmp_path / "o", *FIXED)) == 0
    assert main(fit_args(data, "s3://dxplain/gammli", *FIXED)) == 0
    local = local_files(tmp_path / "o")
    names = [n for n in local if n.endswith(".parquet") and "/train/" not in n]
    assert any(n.startswith("model/train/") for n in local)  # the residuals the tasks wrote, remote too
    assert_same_tables(s3, "dxplain/gammli", tmp_path / "o", names)


def test_evaluate_on_s3_writes_what_a_local_out_gets_its_resume_keys_on_this_host(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("DXPLAIN_HOME", str(tmp_path / "home"))
    args = ["evaluate", "--dataset", "synthetic-small", "--trials", "2", "--targets", "2", "--in-memory", "-q"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 0
    assert main([*args, "--out", "s3://dxplain/eval"]) == 0
    (keys,) = (tmp_path / "home" / "evaluations").iterdir()  # the URL's resume cache, on this host
    assert any(keys.iterdir())
    folder, remote = only_run(tmp_path / "o", "evaluations"), one_result(s3, "dxplain/eval/evaluations")
    assert s3.cat_file(f"{remote}/deletions.csv") == (folder / "deletions.csv").read_bytes()
    assert s3.exists(f"{remote}/auc_del.md") and s3.exists(f"{remote}/summary.json")  # (they hold timings)
