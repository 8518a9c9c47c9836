"""Real remote parts for tests (no mock of dxplain's code): an S3 API server on loopback, and a Dask cluster started
with the CLIs a team runs, whose workers share no disk with the test.

``s3_endpoint``: moto's standalone server on a free loopback port; the environment points boto and fsspec at it, so
s3fs speaks HTTP to a real S3 API (and processes started afterwards inherit the endpoint).

``isolated_cluster``: a scheduler and N workers started by ``deploy/start-dask-cluster.sh``; each worker runs in its
own mount namespace (``unshare --mount``, root only) with an empty tmpfs over ``/tmp`` (where the test's folders
live), its own ``HOME`` (so ``~/.cache/dxplain`` is its own) and Dask local directory. Whatever a task needs it
reads from the object store or receives from the scheduler.
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
    # moto keeps its buckets per process, across servers: a module's fixture starts from an empty bucket
    if fs.exists(bucket):
        fs.rm(bucket, recursive=True)
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


WORKERS: dict[str, list] = {}  # a running isolated cluster's worker processes by its address (to kill one)

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "start-dask-cluster.sh"  # what a team runs on each host

WORKER_SHELL = (
    # Code the worker runs that lives under /tmp (a clone and its venv there, as on some CI machines) is bound back
    # over the namespace's own empty /tmp, as an image would ship it; then HOME and caches in that /tmp; then
    # deploy/start-dask-cluster.sh worker ADDRESS. "$2" lists those code folders, colon-separated.
    'mount -t tmpfs tmpfs /mnt && i=0 && for p in $(echo "$2" | tr : " "); do '
    'mkdir -p /mnt/$i && mount --bind "$p" /mnt/$i && i=$((i+1)); done && '
    "mount -t tmpfs tmpfs /tmp && "
    'i=0 && for p in $(echo "$2" | tr : " "); do mkdir -p "$p" && mount --bind /mnt/$i "$p" && i=$((i+1)); done && '
    "mkdir -p /tmp/home && HOME=/tmp/home DXPLAIN_HOME=/tmp/home/dxplain TMPDIR=/tmp "
    'exec bash "$0" worker "$1"'
)


def code_under_tmp() -> list[str]:
    """The folders of this Python's environment and of dxplain's code that lie under /tmp (outermost only)."""
    import dxplain

    found = sorted({str(Path(p).resolve()) for p in (sys.prefix, Path(dxplain.__file__).parents[1])})
    found = [p for p in found if p.startswith("/tmp/")]
    return [p for p in found if not any(p != q and p.startswith(q + "/") for q in found)]


def tls_environment(security) -> dict[str, str]:
    """Dask's configuration, as environment variables, for processes that speak only TLS with the certificates
    of ``security`` (a ``distributed.security.Security`` holding PEM contents, e.g. ``Security.temporary()``): each
    process gets its own copy through its environment, as a host would from its own files."""
    conf = "DASK_DISTRIBUTED__COMM__"
    return {
        f"{conf}REQUIRE_ENCRYPTION": "True",
        f"{conf}TLS__CA_FILE": security.tls_ca_file,
        f"{conf}TLS__SCHEDULER__CERT": security.tls_scheduler_cert,
        f"{conf}TLS__SCHEDULER__KEY": security.tls_scheduler_key,
        f"{conf}TLS__WORKER__CERT": security.tls_worker_cert,
        f"{conf}TLS__WORKER__KEY": security.tls_worker_key,
    }


@contextlib.contextmanager
def isolated_cluster(
    logs: Path, n_workers: int = 2, timeout: float = 120, security=None, empty_kernel_cache: bool = False
):
    """A Dask scheduler and ``n_workers`` isolated workers, each started by ``deploy/start-dask-cluster.sh`` as on a
    team's hosts; yields the scheduler's address. Their logs go to ``logs`` (on the test's side). With ``security``
    every connection is TLS (``tls://`` address; a client needs the same ``security``).

    The workers find numba's compiled kernels beside the installed code, as a host whose image was built with them
    would (compiling them costs each worker about a minute here); with ``empty_kernel_cache`` each starts from an
    empty cache of its own, as a fresh host does."""
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    protocol = "tls" if security is not None else "tcp"
    address = f"{protocol}://127.0.0.1:{port}"
    # deploy/start-dask-cluster.sh on each "host": one worker process with one BLAS thread (two such hosts share
    # this machine's two cores); with security, every connection TLS
    env = {**os.environ, "DXPLAIN_PYTHON": sys.executable, "DXPLAIN_WORKERS_PER_HOST": "1", "DXPLAIN_BLAS_THREADS": "1"}
    env["DXPLAIN_SCHEDULER_PORT"] = str(port)
    if security is not None:
        env.update(tls_environment(security), DXPLAIN_TLS_ARGS="--protocol tls")
    if empty_kernel_cache:
        env["NUMBA_CACHE_DIR"] = "/tmp/home/numba"  # inside the worker's private /tmp
    procs = []
    try:
        with open(logs / "scheduler.log", "wb") as log:
            procs.append(
                subprocess.Popen(["bash", str(DEPLOY), "scheduler"], stdout=log, stderr=subprocess.STDOUT, env=env)
            )
        for i in range(n_workers):
            with open(logs / f"worker-{i}.log", "wb") as log:
                cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", WORKER_SHELL]
                procs.append(
                    subprocess.Popen(
                        [*cmd, str(DEPLOY), address, ":".join(code_under_tmp())],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
        from distributed import Client

        deadline = time.time() + timeout
        while True:
            try:
                with Client(address, timeout=10, security=security) as client:
                    client.wait_for_workers(n_workers, timeout=max(1.0, deadline - time.time()))
                break
            except OSError:
                if time.time() > deadline or any(p.poll() is not None for p in procs):
                    tails = {f.name: f.read_text()[-2000:] for f in sorted(logs.glob("*.log"))}
                    raise RuntimeError(f"the isolated cluster did not start: {tails}") from None
                time.sleep(0.5)
        WORKERS[address] = procs[1:]
        yield address
    finally:
        WORKERS.pop(address, None)
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


class FlakyProxy:
    """An HTTP proxy in front of an S3 endpoint that answers every ``every``-th request with 503 SlowDown (what S3
    says under load) instead of forwarding it (never with ``every=0``): the client's retries must carry the run
    through. ``failed`` counts the requests it refused; ``url`` is where to point clients. ``stop()`` is the store
    going away (new connections refused, open ones dropped unanswered) and ``start()`` it coming back on the same
    port, as a restarted server."""

    BODY = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
        b"<Message>Please reduce your request rate.</Message></Error>"
    )

    def __init__(self, upstream: str, every: int = 7):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        host, upstream_port = urlsplit(upstream).hostname, urlsplit(upstream).port
        proxy, lock = self, threading.Lock()
        self.seen = self.failed = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers "Expect: 100-continue", which clients send before a body
            disable_nagle_algorithm = True  # headers and body go out as two writes: no delayed-ACK stall between

            def log_message(self, *args):
                pass

            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.down:  # the store is gone: no answer, the connection closes
                    self.close_connection = True
                    return
                with lock:
                    proxy.seen += 1
                    refuse = every > 0 and proxy.seen % every == 0
                    proxy.failed += refuse
                if refuse:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(FlakyProxy.BODY)))
                    self.end_headers()
                    self.wfile.write(FlakyProxy.BODY)
                    return
                skip = ("connection", "keep-alive", "expect")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                conn = getattr(self, "upstream", None) or http.client.HTTPConnection(host, upstream_port, timeout=60)
                self.upstream = conn  # kept for this client connection's next request
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                head = self.command == "HEAD"  # its Content-Length is the object's, with no body
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection") and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.down, self._make = False, lambda port: ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server = None
        self.start(0)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self, port: int | None = None) -> None:
        import threading

        self.server = self._make(self.server.server_address[1] if port is None else port)
        self.down = False
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.down = True
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def s3_through(url: str):
    """Point boto and fsspec (in this process) at ``url`` for the ``with`` block, then back."""
    import fsspec.config
    import s3fs

    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL")}
    os.environ.update({"AWS_ENDPOINT_URL": url, "FSSPEC_S3_ENDPOINT_URL": url})
    fsspec.config.conf.pop("s3", None)
    fsspec.config.set_conf_env(fsspec.config.conf)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fsspec.config.conf.pop("s3", None)
        fsspec.config.set_conf_env(fsspec.config.conf)
        s3fs.S3FileSystem.clear_instance_cache()


def published_parts(s3, out: str) -> list[bytes]:
    """The part files of the one run published under the S3 prefix ``out``, in name order (its ``_meta`` aside)."""
    s3.invalidate_cache()
    (run,) = s3.ls(f"{out}/runs")
    return [
        s3.cat_file(k) for k in sorted(s3.find(run)) if "/_meta/" not in k and k.rsplit("/", 1)[-1].startswith("part-")
    ]


def local_parts(out: Path) -> list[bytes]:
    """``published_parts`` of a local out folder."""
    return [p.read_bytes() for p in sorted(out.glob("runs/*/part-*.parquet"))]
