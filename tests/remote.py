"""Real remote parts for tests (no mock of dxplain's code): an S3 API server on loopback, and a Dask cluster started
with the CLIs a team runs, whose workers share no disk with the test.

``s3_endpoint``: moto's standalone server on a free loopback port; the environment points boto and fsspec at it, so
s3fs speaks HTTP to a real S3 API (and processes started afterwards inherit the endpoint).

``isolated_cluster``: ``dask scheduler`` and N ``dask worker`` processes; each worker runs in its own mount namespace
(``unshare --mount``, root only) with an empty tmpfs over ``/tmp`` (where the test's folders live), its own ``HOME``
(so ``~/.cache/dxplain`` is its own), its own numba cache and Dask local directory. Whatever a task needs it reads
from the object store or receives from the scheduler.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def s3_endpoint(bucket: str = "dxplain"):
    """An S3 endpoint on 127.0.0.1 with ``bucket``; yields an s3fs file system talking to it."""
    from moto import server as moto_server

    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "FSSPEC_S3_ENDPOINT_URL": url,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import fsspec.config
    import s3fs

    fsspec.config.set_conf_env(fsspec.config.conf)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(endpoint_url=url)
    fs.mkdir(bucket)
    try:
        yield fs
    finally:
        server.stop()
        fsspec.config.conf.pop("s3", None)
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def isolation_missing() -> str:
    """Why workers cannot get their own mount namespace here ("" when they can)."""
    if os.geteuid() != 0:
        return "workers in their own mount namespace need root (unshare --mount); CI runs as root"
    if shutil.which("unshare") is None:
        return "no unshare on PATH (util-linux)"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    return "" if probe.returncode == 0 else f"unshare --mount failed here: {probe.stderr.strip()}"


WORKER_SHELL = (
    # the namespace's own empty /tmp, HOME and caches; then the dask worker CLI
    "mount -t tmpfs tmpfs /tmp && mkdir -p /tmp/home /tmp/dask && "
    "HOME=/tmp/home NUMBA_CACHE_DIR=/tmp/home/numba DXPLAIN_HOME=/tmp/home/dxplain TMPDIR=/tmp "
    'exec "$0" -m dask worker "$1" --name "$2" --nthreads 1 --nworkers 1 --memory-limit 0 '
    "--local-directory /tmp/dask --no-dashboard"
)


@contextlib.contextmanager
def isolated_cluster(logs: Path, n_workers: int = 2, timeout: float = 120):
    """``dask scheduler`` on loopback and ``n_workers`` isolated ``dask worker`` processes; yields the scheduler's
    address. Their logs go to ``logs`` (on the test's side)."""
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    try:
        with open(logs / "scheduler.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port)]
                    + ["--no-dashboard"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        for i in range(n_workers):
            with open(logs / f"worker-{i}.log", "wb") as log:
                cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", WORKER_SHELL]
                procs.append(
                    subprocess.Popen(
                        [*cmd, sys.executable, address, f"isolated-{i}"], stdout=log, stderr=subprocess.STDOUT, env=env
                    )
                )
        from distributed import Client

        deadline = time.time() + timeout
        while True:
            try:
                with Client(address, timeout=10) as client:
                    client.wait_for_workers(n_workers, timeout=max(1.0, deadline - time.time()))
                break
            except OSError:
                if time.time() > deadline or any(p.poll() is not None for p in procs):
                    tails = {f.name: f.read_text()[-2000:] for f in sorted(logs.glob("*.log"))}
                    raise RuntimeError(f"the isolated cluster did not start: {tails}") from None
                time.sleep(0.5)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
