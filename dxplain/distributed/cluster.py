"""Connecting to a cluster: an existing scheduler, or a LocalCluster sized for this machine.

The library never creates a cluster on its own; flows and the CLI call ``connect``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

import dask
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from ..config import Settings

log = logging.getLogger(__name__)


class BlasThreads(WorkerPlugin):
    """Cap BLAS threads in every worker so workers × BLAS threads ≤ cores (no oversubscription).

    A plugin rather than a one-off ``client.run`` so that a restarted worker gets the cap too.
    """

    name = "dxplain-blas-threads"

    def __init__(self, threads: int):
        self.threads = threads

    def setup(self, worker):
        from threadpoolctl import threadpool_limits

        self._limits = threadpool_limits(limits=self.threads, user_api="blas")


class IgnoreInterrupt(WorkerPlugin):
    """Leave Ctrl-C to the client's process in a LocalCluster's workers.

    A terminal's Ctrl-C signals the whole process group, workers included. A worker process then dies of
    its KeyboardInterrupt, printing a traceback into the interrupted command's output (two screens of
    them for two workers), while the client's process is already stopping the cluster and ends its
    children itself (``cli._interrupt``). Remote workers are not in the group and keep their default."""

    name = "dxplain-ignore-interrupt"

    def setup(self, worker):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():  # a worker process's event loop runs there
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def blas_threads(client: Client) -> dict:
    """BLAS thread counts per worker (for logs and tests)."""
    from threadpoolctl import threadpool_info

    def info():
        return max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=0)

    return client.run(info)


def scatter(client: Client, data, broadcast: bool = False, attempts: int = 3):
    """``client.scatter`` (unhashed) that survives a worker dying under it.

    A worker killed just before a scatter is still on the scheduler's list for a moment, and sending
    to it fails with a comm error (an OSError); wait, then scatter again. Measured by
    ``test_worker_killed_mid_training_loses_nothing``. Broadcasting to such a worker can also retry
    replication for minutes, so data sent repeatedly during a run goes to one worker (``broadcast=False``)
    and the others fetch it from their peer.
    """
    for attempt in range(1, attempts + 1):
        try:
            return client.scatter(data, broadcast=broadcast, hash=False)
        except OSError as e:  # CommClosedError is an OSError
            if attempt == attempts:
                raise
            log.warning("scatter attempt %d/%d failed (%s): a worker died; retrying", attempt, attempts, e)
            time.sleep(2.0 * attempt)


def check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail at once, in one line, when nothing listens at a scheduler address (instead of the client's 30 s
    connect timeout and its traceback)."""
    import socket
    from urllib.parse import urlsplit

    from ..errors import InputError

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        socket.create_connection((parts.hostname, parts.port or 8786), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise InputError(
            f"--scheduler {address}: cannot reach the Dask scheduler ({exc}); is it running? "
            "deploy/README.md says how to start one, or leave --scheduler out for a LocalCluster"
        ) from None


def tls_security(settings: Settings):
    """A ``distributed.security.Security`` requiring TLS when the settings name certificates, else None."""
    files = settings.tls_files()
    if files is None:
        return None
    from distributed.security import Security

    ca, cert, key = files
    return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)


# The client's process gathers part-sized results (U's rows of a part: 10 MB at 50M, k = 64) and frees
# them at once. glibc raises its mmap threshold to the largest block freed (up to 32 MB), so such blocks
# then come from the heap, which keeps them after they are freed. A fixed 1 MB threshold returns them.
MMAP_THRESHOLD = 1 << 20


def return_freed_blocks() -> None:
    """Fix glibc's mmap threshold in this process (``MMAP_THRESHOLD``); elsewhere a no-op. Not for
    workers: there it makes every temporary a fresh mapping (docs/scaling.md, "Worker allocator")."""
    from ..mapper import glibc

    try:
        glibc().mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _client_of(address: str, security):
    """A Client of the scheduler at ``address``; a scheduler that answers but ends the handshake (it speaks TLS and
    this process does not, or the certificates do not match) is one ``InputError`` naming the fix."""
    from ..errors import InputError

    try:
        return Client(address, security=security, timeout="20s")
    except OSError as exc:  # distributed's CommClosedError and TimeoutError are OSErrors
        fix = (
            "if it requires TLS, give its tls:// address and set DXPLAIN_TLS_CA_FILE, DXPLAIN_TLS_CERT and "
            "DXPLAIN_TLS_KEY"
            if security is None
            else "check that DXPLAIN_TLS_CA_FILE, DXPLAIN_TLS_CERT and DXPLAIN_TLS_KEY are the cluster's"
        )
        raise InputError(
            f"--scheduler {address}: the scheduler did not accept this client ({type(exc).__name__}: {exc}); {fix} "
            "(docs/operations.md, TLS)"
        ) from None


@contextlib.contextmanager
def connect(settings: Settings, security=None):
    """Yield a Client: to ``settings.scheduler`` when set, else to a fresh LocalCluster of processes.

    ``security`` (a ``distributed.security.Security``; default from the settings' TLS files) makes
    every connection TLS; a LocalCluster then listens on tls:// as well.
    """
    security = security if security is not None else tls_security(settings)
    return_freed_blocks()
    if settings.scheduler:
        log.info("connecting to the Dask scheduler at %s", settings.scheduler)
        with _client_of(settings.scheduler, security) as client:
            client.register_plugin(BlasThreads(settings.blas_threads_per_worker()))
            yield client
        return
    threads = settings.blas_threads_per_worker()
    # Workers start without MALLOC_TRIM_THRESHOLD_ (see deploy/dask.yaml for why and the measurement).
    # A nanny copies its pre-spawn variables into this process's environment for good, and the
    # environment wins over the config, so a cluster started earlier in this process (a test, a
    # notebook) would pass its value on: drop it here too. This process's own malloc read it at startup.
    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), "MALLOC_TRIM_THRESHOLD_": None}
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    # numba's parallel kernels (kernels/*_fused.py) start one thread per core in every worker unless told
    # otherwise before numba loads: give them the BLAS share, so workers × threads ≤ cores holds for both. Set in
    # the worker only (the nanny's ``env``): a pre-spawn variable lands in this process's environment at every
    # worker (re)start, and numba here, which rereads it at each compile, refuses a value its threads did not
    # start with.
    worker_env = {"NUMBA_NUM_THREADS": str(threads)}
    log.info(
        "starting a LocalCluster: %d worker processes × %d thread(s), BLAS threads per worker %d",
        settings.workers,
        settings.threads_per_worker,
        threads,
    )
    tls = {"security": security, "protocol": "tls://"} if security is not None else {}
    with (
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ}),
        LocalCluster(
            n_workers=settings.workers,
            threads_per_worker=settings.threads_per_worker,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.WARNING,
            env=worker_env,
            **tls,
        ) as cluster,
        Client(cluster, security=security, direct_to_workers=True) as client,
    ):
        # direct_to_workers: a LocalCluster's scheduler runs in this process, and a scatter through it
        # holds a deserialised copy of the data here (measured: +244 MB of peak RSS for U at 50M, k = 64).
        client.register_plugin(BlasThreads(threads))
        client.register_plugin(IgnoreInterrupt())
        yield client
