"""A real cluster: ``dask scheduler`` and two ``dask worker`` processes, each worker in its own mount namespace (an
empty private ``/tmp``, its own ``HOME`` and caches: no disk shared with the test), with dataset, model and runs on
an S3 API (moto's server over HTTP). A refresh submitted to it publishes the bytes of the same refresh run in one
process on local paths. Skips, saying why, where workers cannot get a namespace (not root, no ``unshare``)."""

import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, only_run, random_interactions, write_random_dataset
from remote import isolated_cluster, isolation_missing, local_parts, published_parts

from dxplain.cli import main

MISSING = isolation_missing()
pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=MISSING),
    pytest.mark.distributed,
    pytest.mark.slow,  # a scheduler and two workers that compile their own kernels: about 80 s
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


@pytest.fixture(scope="module")
def prepared(s3, tmp_path_factory):
    """A prepared dataset folder, local and the same on S3."""
    folder, _ = write_random_dataset(tmp_path_factory, seed=3)
    s3.put(str(folder), "dxplain/prepared", recursive=True)
    return folder, "s3://dxplain/prepared"


def remote_tables(s3, prefix: str) -> dict[str, bytes]:
    s3.invalidate_cache()
    return {k[len(prefix) + 1 :]: k for k in s3.find(prefix) if k.endswith(".parquet")}


def result_folder(s3, prefix: str) -> str:
    s3.invalidate_cache()
    (folder,) = [k for k in s3.ls(prefix) if not k.rsplit("/", 1)[-1].startswith(".")]
    return folder


@pytest.mark.parametrize(
    "command, args, kind",
    [
        ("negatives", ["--k", "3", "--lam", "2e-4", "--percent", "5", "--negatives", "2"], "negatives"),
        ("prototypes", ["--user", "u005", "--top-n", "4", "-m", "3", "--k", "3", "--lam", "2e-3"], "prototypes"),
        ("kolmogorov fit", ["--dim", "4", "--iterations", "2"], None),
    ],
)
def test_other_flows_on_the_cluster_with_s3_write_what_a_local_run_writes(
    cluster, s3, prepared, tmp_path, command, args, kind
):
    local_data, remote_data = prepared
    name = command.replace(" ", "-")
    local = tmp_path / "out"
    assert main([*command.split(), "--dataset", str(local_data), "--out", str(local), "--in-memory", *args]) == 0
    out = f"s3://dxplain/cluster/{name}"
    before = executed(cluster)
    assert main([*command.split(), "--dataset", remote_data, "--out", out, "--scheduler", cluster, *args]) == 0
    assert sum(executed(cluster).values()) > sum(before.values())
    prefix = f"dxplain/cluster/{name}"
    remote = remote_tables(s3, result_folder(s3, f"{prefix}/{kind}") if kind else prefix)
    folder = only_run(local, kind) if kind else local
    mine = {str(p.relative_to(folder)): p for p in folder.rglob("*.parquet") if p.is_file()}
    assert set(remote) == set(mine) and mine
    for rel, key in remote.items():
        with s3.open(key, "rb") as fh:
            assert pq.read_table(fh).equals(pq.read_table(mine[rel])), rel
    s3.invalidate_cache()
    assert not [k for k in s3.find(prefix) if ".tmp-" in k or ".dxplain-scratch-" in k]  # nothing left behind


@pytest.fixture(scope="module")
def tls_cluster(s3, tmp_path_factory):
    """The same isolated cluster speaking only TLS, with a certificate authority made here."""
    from distributed.security import Security

    security = Security.temporary()
    with isolated_cluster(tmp_path_factory.mktemp("tls-logs"), security=security) as address:
        yield address, security


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


def test_a_worker_killed_mid_refresh_loses_nothing(s3, tmp_path):
    """SIGKILL one of the two isolated workers while a refresh runs on them: the run still publishes the bytes of a
    clean local run (the lost worker's tasks are recomputed on the other)."""
    import signal
    import subprocess
    import sys
    import time

    from remote import WORKERS

    table = interactions_table(random_interactions(300, 120, 0.2, seed=11))
    pq.write_table(table, tmp_path / "data.parquet")
    with s3.open("dxplain/killed/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--k", "6", "--lam", "5e-3", "--top-k", "3", "--shards", "8", "-q"]
    local = tmp_path / "out"
    assert main([*args, "--dataset", str(tmp_path / "data.parquet"), "--out", str(local), "--in-memory"]) == 0
    with isolated_cluster(tmp_path / "logs") as address:
        cmd = [sys.executable, "-m", "dxplain.cli", *args, "--dataset", "s3://dxplain/killed/data.parquet"]
        cmd += ["--out", "s3://dxplain/killed/out", "--scheduler", address]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim, started = WORKERS[address][1], executed(address)
        deadline = time.time() + 300
        while sum(executed(address).values()) < sum(started.values()) + 6:  # mid-run: some tasks done
            assert run.poll() is None and time.time() < deadline, "the refresh ended before a worker could be killed"
            time.sleep(0.2)
        victim.send_signal(signal.SIGKILL)
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-3000:]
        assert victim.wait(10) == -signal.SIGKILL
    remote, mine = published_parts(s3, "dxplain/killed/out"), local_parts(local)
    assert len(remote) == len(mine) == 8 and remote == mine
