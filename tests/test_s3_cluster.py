"""A real cluster: a Dask scheduler and two workers started by ``deploy/start-dask-cluster.sh``, each worker in its
own mount namespace (an empty private ``/tmp``, its own ``HOME``: no disk shared with the test), with datasets,
models and results on an S3 API (moto's server over HTTP). Every flow submitted to it (refresh trained and imported,
negatives, prototypes, Kolmogorov and GAMMLI fits, pairwise explain, evaluate) publishes the tables of the same run
on this machine with local paths. With ``-m slow``: the same over TLS, and a worker SIGKILLed mid-refresh. Skips,
saying why, where workers cannot get a namespace (not root, no ``unshare``)."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, only_run, random_interactions, write_random_dataset
from remote import isolated_cluster, isolation_missing, local_parts, published_parts

from dxplain.cli import main

MISSING = isolation_missing()
pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=MISSING),
    pytest.mark.distributed,
    pytest.mark.usefixtures("prefect_server"),
]


@pytest.fixture(scope="module")
def cluster(s3, tmp_path_factory):
    with isolated_cluster(tmp_path_factory.mktemp("cluster-logs")) as address:
        yield address


def executed(address: str) -> dict:
    from distributed import Client

    with Client(address) as client:
        return client.run(lambda dask_worker: dask_worker.state.executed_count)


def test_the_workers_share_no_disk_with_the_test(cluster, tmp_path):
    from distributed import Client

    here = tmp_path / "only-here.txt"
    here.write_text("the test's side")
    with Client(cluster) as client:
        seen = client.run(lambda p=str(here): __import__("os").path.exists(p))
        homes = client.run(lambda: __import__("os").path.expanduser("~"))
        workers = list(seen)
        for w in workers:  # a task that reads the file fails on either worker
            with pytest.raises(FileNotFoundError):
                client.submit(Path.read_text, here, workers=[w], pure=False).result()
    assert len(seen) == 2 and not any(seen.values())
    assert set(homes.values()) == {"/tmp/home"}


def test_a_refresh_on_the_cluster_with_s3_publishes_the_bytes_of_a_local_run(cluster, s3, tmp_path):
    table = interactions_table(random_interactions(60, 40, 0.3, seed=9))
    pq.write_table(table, tmp_path / "data.parquet")
    with s3.open("dxplain/cluster/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--k", "4", "--lam", "5e-3", "--top-k", "3", "--shards", "3", "-q"]
    local = tmp_path / "out"
    assert main([*args, "--dataset", str(tmp_path / "data.parquet"), "--out", str(local), "--in-memory"]) == 0
    out = "s3://dxplain/cluster/out"
    before = executed(cluster)
    assert main([*args, "--dataset", "s3://dxplain/cluster/data.parquet", "--out", out, "--scheduler", cluster]) == 0
    after = executed(cluster)
    assert sum(after.values()) > sum(before.values())  # the work ran on the isolated workers
    remote, mine = published_parts(s3, "dxplain/cluster/out"), local_parts(local)
    assert len(remote) == len(mine) == 3 and remote == mine
    assert not [k for k in s3.find("dxplain/cluster/out") if ".tmp-" in k]  # nothing temporary left behind


def test_a_refresh_of_an_imported_model_with_supplied_targets_on_the_cluster(cluster, s3, tmp_path):
    """``--model`` (factors imported with ``import-embeddings``) and ``--targets``, all on S3."""
    import numpy as np
    import pyarrow as pa

    d = random_interactions(50, 30, 0.3, seed=4)
    rng = np.random.default_rng(0)
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(interactions_table(d), folder / "data.parquet")
    for side, ids in (("U", d.user_ids), ("V", d.item_ids)):
        pq.write_table(
            pa.table({"id": ids, "embedding": list(rng.normal(size=(len(ids), 4)))}), folder / f"{side}.parquet"
        )
    pq.write_table(pa.table({"user": d.user_ids[:6], "item": d.item_ids[3:9]}), folder / "targets.parquet")
    s3.put(str(folder), "dxplain/imported/data", recursive=True)

    def argv(data: str, out: str) -> list[list[str]]:
        imp = ["import-embeddings", "--dataset", f"{data}/data.parquet", "--lam", "5e-3", "-q"]
        imp += ["--user-factors", f"{data}/U.parquet", "--item-factors", f"{data}/V.parquet", "--out", f"{out}/m.zarr"]
        ref = ["refresh", "--dataset", f"{data}/data.parquet", "--model", f"{out}/m.zarr", "--targets"]
        ref += [f"{data}/targets.parquet", "--top-k", "3", "--shards", "2", "--out", f"{out}/o", "-q"]
        return [imp, ref]

    local = tmp_path / "local"
    for args in argv(str(folder), str(local)):
        assert main([*args, *(["--in-memory"] if args[0] == "refresh" else [])]) == 0
    for args in argv("s3://dxplain/imported/data", "s3://dxplain/imported"):
        assert main([*args, *(["--scheduler", cluster] if args[0] == "refresh" else [])]) == 0
    remote, mine = published_parts(s3, "dxplain/imported/o"), local_parts(local / "o")
    assert len(remote) == len(mine) == 2 and remote == mine


@pytest.fixture(scope="module")
def inputs(s3, tmp_path_factory):
    """Every flow's input, in a local folder and the same under ``s3://dxplain/inputs``: a prepared interactions
    dataset, GAMMLI's tables and a labelled table."""
    from test_gammli_flow import write_case
    from test_pairwise_cli import table

    folder, _ = write_random_dataset(tmp_path_factory, seed=3)
    root = folder.parent
    write_case(root / "gammli", n=40)
    pq.write_table(table(), root / "labelled.parquet")
    s3.put(str(root), "dxplain/inputs", recursive=True)
    return root


def flow_args(root) -> dict[str, list[str]]:
    """Each flow's arguments but --out, on inputs under ``root`` (a local folder or a URL)."""
    from test_gammli_flow import FIXED, fit_args

    gammli = fit_args(Path("GAMMLI"), "OUT", *FIXED, "--max-sweeps", "5")  # each stage-3 sweep: rounds of tasks
    gammli = [a.replace("GAMMLI", f"{root}/gammli") for a in gammli]
    del gammli[gammli.index("--out") : gammli.index("--out") + 2]
    gammli.remove("--in-memory")  # each run below says where it runs
    data = ["--dataset", f"{root}/small"]
    short = ["--max-sweeps", "5", "--newton-steps", "3"]  # on the cluster each is a few rounds of tasks
    return {
        "negatives": ["negatives", *data, "--k", "3", "--lam", "2e-4", "--percent", "5", "--negatives", "2", *short],
        "prototypes": [
            "prototypes",
            *data,
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
            *short,
        ],
        "kolmogorov": ["kolmogorov", "fit", *data, "--dim", "4", "--iterations", "2"],
        "gammli": gammli,
        "pairwise": ["pairwise", "explain", "--data", f"{root}/labelled.parquet", "--label", "y", "--pairs", "2"],
        "evaluate": ["evaluate", "--dataset", "synthetic-small", "--trials", "1", "--targets", "2"],
    }


# Where each flow's result is: a kind's one timestamped folder, or --out itself; the files compared.
RESULTS = {
    "negatives": ("negatives", "*.parquet"),
    "prototypes": ("prototypes", "*.parquet"),
    "kolmogorov": (None, "*.parquet"),
    "gammli": (None, "*.parquet"),
    "pairwise": (None, "attributions.parquet"),
    "evaluate": ("evaluations", "*.csv"),
}


def result_folder(s3, prefix: str) -> str:
    s3.invalidate_cache()
    (folder,) = [k for k in s3.ls(prefix) if not k.rsplit("/", 1)[-1].startswith(".")]
    return folder


def same_file(s3, key: str, path: Path) -> bool:
    if path.suffix == ".parquet":
        with s3.open(key, "rb") as fh:
            return pq.read_table(fh).equals(pq.read_table(path))
    return s3.cat_file(key) == path.read_bytes()


# GAMMLI's (~22 s) is slow: test_gammli_distributed.py compares its Dask fit with the local one in the default run.
@pytest.mark.parametrize("flow", [pytest.param(f, marks=pytest.mark.slow) if f == "gammli" else f for f in RESULTS])
def test_every_other_flow_on_the_cluster_with_s3_writes_what_a_local_run_writes(
    cluster, s3, inputs, tmp_path, monkeypatch, flow
):
    monkeypatch.setenv("DXPLAIN_HOME", str(tmp_path / "home"))  # evaluate's resume keys: this test's own
    local = tmp_path / "out"
    # The same run on this machine with local paths: in this process, or for GAMMLI on a LocalCluster, since its
    # sums round with the BLAS threads of where they run (one per worker, both cores here): within 1e-12
    where = ["--workers", "2"] if flow == "gammli" else ["--in-memory"]
    assert main([*flow_args(inputs)[flow], "--out", str(local), *where, "-q"]) == 0
    prefix = f"dxplain/cluster/{flow}"
    before = executed(cluster)
    remote_args = flow_args("s3://dxplain/inputs")[flow]
    assert main([*remote_args, "--out", f"s3://{prefix}", "--scheduler", cluster, "-q"]) == 0
    assert sum(executed(cluster).values()) > sum(before.values())  # the work ran on the isolated workers
    kind, pattern = RESULTS[flow]
    folder = only_run(local, kind) if kind else local
    mine = {str(p.relative_to(folder)): p for p in folder.rglob(pattern) if p.is_file()}
    if flow == "gammli":  # the training residuals the tasks wrote: there, but named per task
        assert any(n.startswith("model/train/") for n in mine)
        mine = {n: p for n, p in mine.items() if "/train/" not in n}
    base = result_folder(s3, f"{prefix}/{kind}") if kind else prefix
    s3.invalidate_cache()
    remote = {k[len(base) + 1 :]: k for k in s3.find(base) if Path(k).match(pattern) and "/train/" not in k}
    assert set(remote) == set(mine) and mine
    for rel, key in remote.items():
        assert same_file(s3, key, mine[rel]), rel
    if (folder / "metrics.json").exists():  # the contracts' metrics: equal but for where and how long
        theirs = json.loads(s3.cat_file(f"{base}/metrics.json"))
        assert comparable(theirs, "s3://dxplain/inputs") == comparable(
            json.loads((folder / "metrics.json").read_text()), inputs
        )
    assert not [k for k in s3.find(prefix) if ".tmp-" in k or ".dxplain-scratch-" in k]  # nothing left behind


def comparable(metrics, root):
    """A metrics file without its timings and memory peaks, its inputs' root named alike, numbers to 12 significant
    digits (an objective summed in one process and over tasks differs in the last bit)."""

    def tidy(x):
        if isinstance(x, dict):
            return {k: tidy(v) for k, v in x.items() if not k.endswith("seconds") and k != "peak_rss_mib"}
        if isinstance(x, list):
            return [tidy(v) for v in x]
        return float(f"{x:.12g}") if isinstance(x, float) else x

    return tidy(json.loads(json.dumps(metrics).replace(str(root), "<inputs>")))


@pytest.fixture(scope="module")
def tls_cluster(s3, tmp_path_factory):
    """The same isolated cluster speaking only TLS, with a certificate authority made here."""
    from distributed.security import Security

    security = Security.temporary()
    with isolated_cluster(tmp_path_factory.mktemp("tls-logs"), security=security, empty_kernel_cache=True) as address:
        yield address, security


@pytest.mark.slow  # a second cluster whose workers compile their own kernels
def test_a_refresh_over_tls_publishes_the_bytes_of_a_local_run(tls_cluster, s3, tmp_path, monkeypatch, capsys):
    address, security = tls_cluster
    assert address.startswith("tls://")
    for name, pem in (
        ("ca", security.tls_ca_file),
        ("cert", security.tls_client_cert),
        ("key", security.tls_client_key),
    ):
        (tmp_path / f"{name}.pem").write_text(pem)
    table = interactions_table(random_interactions(60, 40, 0.3, seed=9))
    pq.write_table(table, tmp_path / "data.parquet")
    with s3.open("dxplain/tls/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--k", "4", "--lam", "5e-3", "--top-k", "3", "--shards", "3", "-q"]
    local = tmp_path / "out"
    assert main([*args, "--dataset", str(tmp_path / "data.parquet"), "--out", str(local), "--in-memory"]) == 0
    monkeypatch.setenv("DXPLAIN_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("DXPLAIN_TLS_CERT", str(tmp_path / "cert.pem"))
    monkeypatch.setenv("DXPLAIN_TLS_KEY", str(tmp_path / "key.pem"))
    out = "s3://dxplain/tls/out"
    assert main([*args, "--dataset", "s3://dxplain/tls/data.parquet", "--out", out, "--scheduler", address]) == 0
    remote, mine = published_parts(s3, "dxplain/tls/out"), local_parts(local)
    assert len(remote) == len(mine) == 3 and remote == mine
    monkeypatch.delenv("DXPLAIN_TLS_CA_FILE")
    monkeypatch.delenv("DXPLAIN_TLS_CERT")
    monkeypatch.delenv("DXPLAIN_TLS_KEY")
    plain = address.replace("tls://", "tcp://")
    assert main([*args, "--dataset", "s3://dxplain/tls/data.parquet", "--out", out + "2", "--scheduler", plain]) == 2
    err = capsys.readouterr().err  # one line naming the fix, not a traceback
    assert "did not accept this client" in err and "DXPLAIN_TLS_CA_FILE" in err and "Traceback" not in err


def explain_tasks(address: str) -> int:
    """How many of the refresh's explain-pass tasks (its census, user-side and shard maps) the scheduler holds."""
    from distributed import Client

    def count(dask_scheduler):
        stages = ("dxplain-census-", "dxplain-user-side-", "dxplain-shard-")
        return sum(str(k).startswith(stages) for k in dask_scheduler.tasks)

    with Client(address) as client:
        return client.run_on_scheduler(count)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["training", "explain"])
def test_a_worker_killed_mid_refresh_loses_nothing(s3, tmp_path, stage):
    """SIGKILL one of the two isolated workers while a refresh runs on them, during its training (after six
    tasks) or its explain pass (once its first task is submitted): the run still publishes the bytes of a clean
    local run (the lost worker's tasks are recomputed on the other, inputs it held are sent again)."""
    import signal
    import subprocess
    import sys
    import time

    from remote import WORKERS

    table = interactions_table(random_interactions(300, 120, 0.2, seed=11))
    pq.write_table(table, tmp_path / "data.parquet")
    with s3.open(f"dxplain/killed-{stage}/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--k", "6", "--lam", "5e-3", "--top-k", "3", "--shards", "8", "-q"]
    local = tmp_path / "out"
    assert main([*args, "--dataset", str(tmp_path / "data.parquet"), "--out", str(local), "--in-memory"]) == 0
    with isolated_cluster(tmp_path / "logs", empty_kernel_cache=True) as address:
        cmd = [sys.executable, "-m", "dxplain.cli", *args, "--dataset", f"s3://dxplain/killed-{stage}/data.parquet"]
        cmd += ["--out", f"s3://dxplain/killed-{stage}/out", "--scheduler", address]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim, started = WORKERS[address][1], executed(address)
        deadline = time.time() + 300

        def reached() -> bool:
            if stage == "training":
                return sum(executed(address).values()) >= sum(started.values()) + 6
            return explain_tasks(address) > 0

        while not reached():
            assert run.poll() is None and time.time() < deadline, "the refresh ended before a worker could be killed"
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-3000:]
        assert victim.wait(10) == -signal.SIGKILL
    remote, mine = published_parts(s3, f"dxplain/killed-{stage}/out"), local_parts(local)
    assert len(remote) == len(mine) == 8 and remote == mine
