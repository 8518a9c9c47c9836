"""s3:// locations against a real S3 API: moto's server on a loopback port, spoken to by s3fs over HTTP
(no mock of dxplain's code). A refresh whose dataset, model store and runs live on S3 publishes the same
bytes as the same refresh on local paths; publishing a folder replaces the old one's objects."""

import os

import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions
from remote import local_parts, published_parts

from dxplain.cli import main

pytestmark = pytest.mark.usefixtures("prefect_server")  # the s3 fixture (conftest.py) skips without the test extra


def test_publishing_a_folder_on_s3_replaces_the_old_objects(s3):
    from dxplain.io.atomic import atomic_dir

    for files in ({"a.bin": b"1", "sub/b.bin": b"2", "zarr.json": b"{}"}, {"a.bin": b"3", "zarr.json": b"[]"}):
        with atomic_dir("s3://dxplain/store") as tmp:
            for name, data in files.items():
                with s3.open(f"{tmp}/{name}", "wb") as fh:
                    fh.write(data)
        s3.invalidate_cache()
        assert sorted(k.removeprefix("dxplain/store/") for k in s3.find("dxplain/store")) == sorted(files)
        assert all(s3.cat_file(f"dxplain/store/{n}") == d for n, d in files.items())
        assert not [k for k in s3.ls("dxplain") if ".tmp-" in k]  # the temporary prefix is gone


@pytest.mark.slow  # the same, on isolated workers, runs by default (test_s3_cluster.py)
def test_a_refresh_on_s3_publishes_the_bytes_of_the_same_refresh_on_local_paths(s3, tmp_path):
    table = interactions_table(random_interactions(40, 30, 0.3, seed=8))
    pq.write_table(table, tmp_path / "data.parquet")
    with s3.open("dxplain/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--k", "4", "--lam", "5e-3", "--top-k", "3", "--in-memory", "-q"]
    assert main([*args, "--dataset", str(tmp_path / "data.parquet"), "--out", str(tmp_path / "out")]) == 0
    assert main([*args, "--dataset", "s3://dxplain/data.parquet", "--out", "s3://dxplain/out"]) == 0
    remote, local = published_parts(s3, "dxplain/out"), local_parts(tmp_path / "out")
    assert len(remote) == len(local) > 0 and remote == local
    run = s3.ls("dxplain/out/runs")[0]
    assert s3.cat_file("dxplain/out/LATEST").decode().strip() == run.rsplit("/", 1)[-1]
    assert not [k for k in s3.find("dxplain/out") if ".tmp-" in k]  # no temporaries left


@pytest.mark.slow  # retries back off: 3 to 4 minutes
def test_a_store_that_answers_503_now_and_then_still_gets_the_same_run(s3, tmp_path):
    from remote import FlakyProxy, s3_through

    table = interactions_table(random_interactions(40, 30, 0.3, seed=8))
    with s3.open("dxplain/flaky/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    args = ["refresh", "--dataset", "s3://dxplain/flaky/data.parquet", "--k", "4", "--top-k", "3", "--in-memory", "-q"]
    assert main([*args, "--out", "s3://dxplain/flaky/clean"]) == 0
    proxy = FlakyProxy(os.environ["AWS_ENDPOINT_URL"], every=10)
    try:
        with s3_through(proxy.url):
            assert main([*args, "--out", "s3://dxplain/flaky/out"]) == 0
    finally:
        proxy.close()
    assert proxy.failed > 10  # every 10th request was refused: the retries carried the run
    clean, flaky = published_parts(s3, "dxplain/flaky/clean"), published_parts(s3, "dxplain/flaky/out")
    assert len(clean) == len(flaky) > 0 and clean == flaky
    assert not [k for k in s3.find("dxplain/flaky") if ".tmp-" in k]


def refresh_through(proxy, args: list[str], **env: str):
    """``dxplain refresh`` in its own process, talking to S3 through ``proxy``."""
    import subprocess
    import sys

    env = {**os.environ, "AWS_ENDPOINT_URL": proxy.url, "FSSPEC_S3_ENDPOINT_URL": proxy.url, **env}
    cmd = [sys.executable, "-m", "dxplain.cli", "refresh", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def outage_at(proxy, requests: int, seconds: float | None):
    """Stop ``proxy`` once it has relayed ``requests`` more requests; start it again ``seconds`` later (never, with
    None). Returns the watching thread."""
    import threading
    import time

    start = proxy.seen + requests

    def watch():
        while proxy.seen < start:
            time.sleep(0.01)
        proxy.stop()
        if seconds is not None:
            time.sleep(seconds)
            proxy.start()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def flaky_data(s3):
    table = interactions_table(random_interactions(40, 30, 0.3, seed=8))
    with s3.open("dxplain/outage/data.parquet", "wb") as fh:
        pq.write_table(table, fh)
    return [
        "--dataset",
        "s3://dxplain/outage/data.parquet",
        "--k",
        "4",
        "--lam",
        "5e-3",
        "--shards",
        "2",
        "--in-memory",
        "-q",
    ]


@pytest.mark.slow  # two refresh processes and a backoff: about 40 s
def test_a_store_restarted_mid_run_still_gets_the_same_run(s3, flaky_data):
    """The store goes away for 3 s halfway through a refresh and comes back (a restart): the client's retries with
    backoff carry the run, which publishes the bytes of an undisturbed one."""
    from remote import FlakyProxy

    proxy = FlakyProxy(os.environ["AWS_ENDPOINT_URL"], every=0)
    try:
        clean = refresh_through(proxy, [*flaky_data, "--out", "s3://dxplain/outage/clean"])
        assert clean.wait(300) == 0, clean.stderr.read()[-3000:]
        watcher = outage_at(proxy, proxy.seen // 2, seconds=3)
        run = refresh_through(proxy, [*flaky_data, "--out", "s3://dxplain/outage/restarted"])
        out, err = run.communicate(timeout=600)
        assert not watcher.is_alive() and not proxy.down  # the store did go away, and came back
        assert run.returncode == 0, err[-3000:]
    finally:
        proxy.close()
    restarted, undisturbed = (
        published_parts(s3, "dxplain/outage/restarted"),
        published_parts(s3, "dxplain/outage/clean"),
    )
    assert len(restarted) == len(undisturbed) > 0 and restarted == undisturbed


@pytest.mark.slow  # two refresh processes: about 30 s
def test_a_store_down_past_the_retries_is_one_named_error_and_latest_stays(s3, flaky_data):
    """The store goes away halfway through a refresh and stays away past the client's retries (two attempts
    here): exit 1, one error line naming it (no traceback), and LATEST still names the run before."""
    from remote import FlakyProxy

    out = "s3://dxplain/outage/down"
    proxy = FlakyProxy(os.environ["AWS_ENDPOINT_URL"], every=0)
    try:
        first = refresh_through(proxy, [*flaky_data, "--top-k", "3", "--out", out])
        assert first.wait(300) == 0, first.stderr.read()[-3000:]
        latest = s3.cat_file("dxplain/outage/down/LATEST")
        watcher = outage_at(proxy, proxy.seen // 2, seconds=None)
        run = refresh_through(proxy, [*flaky_data, "--top-k", "2", "--out", out], AWS_MAX_ATTEMPTS="2")
        _, err = run.communicate(timeout=600)
        assert proxy.down and not watcher.is_alive()
    finally:
        proxy.close()
    assert run.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err[-3000:]
    (error,) = [ln for ln in lines if "error" in ln.lower()]
    assert error.startswith("dxplain: error: the object store did not answer") and "nothing was published" in error
    s3.invalidate_cache()
    assert s3.cat_file("dxplain/outage/down/LATEST") == latest
    assert not [
        k for k in s3.find("dxplain/outage/down") if k.endswith("/manifest.json") and latest.decode().strip() not in k
    ]
