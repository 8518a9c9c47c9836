"""One writer at a time per output folder: ``<out>/refresh.lock``, held by ``fcntl.flock`` for the whole refresh
(or ``forget``).

The kernel holds the lock for the open file and drops it when its process ends, however it ends (``kill -9``
included), so a killed holder never leaves a lock to clean up: the next writer acquires it and, finding the file
still marked ``running`` by the dead holder, says that it took over. A second writer polls until the holder is done
or ``wait`` seconds have passed, then refuses with the holder's pid, host and start.

The file says who holds it (JSON: pid, host, command, since, state), for that message and for operators; the holder
deletes it as it releases, so only a killed writer leaves one.
Object stores (``s3://``) and ``memory://`` have no such lock: there the writer logs that it runs unlocked.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from .atomic import is_local

log = logging.getLogger(__name__)

LOCK = "refresh.lock"
POLL_SECONDS = 0.5


def _holder(path: Path) -> dict | None:
    """What the lock file says about its last holder (None if it is empty or unreadable)."""
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None


def _describe(h: dict | None) -> str:
    if not h:
        return "another process"
    return f"pid {h.get('pid')} on {h.get('host')} (since {h.get('since')}: {h.get('command')})"


def _write(fd: int, state: dict) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(state).encode(), 0)
    os.fsync(fd)


@contextmanager
def out_lock(out, wait: float, what: str = "refresh", logger=None) -> Iterator[dict | None]:
    """Hold ``<out>/refresh.lock`` for the block; wait up to ``wait`` seconds for another holder (0: refuse at once).

    Yields what the previous holder left if it stopped without releasing (a killed run), else None. Raises
    ``InputError`` naming the holder when the wait runs out; nothing in ``out`` has been touched then."""
    logger = logger or log
    if not is_local(out):
        logger.warning("%s: no lock on %s (object stores have none): run one writer at a time on it", what, out)
        yield None
        return
    root = Path(out)
    # Made for this lock (by us or by the writer we wait for): removed again if nothing else lands in it.
    created = not root.exists() or {p.name for p in root.iterdir()} <= {LOCK}
    path = root / LOCK
    deadline, announced = time.monotonic() + wait, False
    while True:
        root.mkdir(parents=True, exist_ok=True)  # again: a holder that created it removes it if it stays empty
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _holder(path)
            if time.monotonic() >= deadline:
                raise InputError(
                    f"{path}: another writer holds it, {_describe(holder)}; waited {wait:g} s. Wait for it to "
                    "finish (or stop it) and run again, or give --lock-wait more seconds"
                ) from None
            if not announced:
                logger.info("%s: waiting up to %g s for %s to finish", path, wait, _describe(holder))
                announced = True
            time.sleep(POLL_SECONDS)
            continue
        try:  # the holder before us unlinks the file as it releases: ours must still be the file at the path
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        previous = _holder(path)
        killed = previous if previous and previous.get("state") == "running" else None
        if killed:
            logger.warning(
                "%s: the last writer, %s, stopped without releasing it (killed?); taking over. Its unfinished "
                "run is resumed if this run has the same plan, else left unpublished",
                path,
                _describe(killed),
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": what,
            "argv": sys.argv[1:],
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "state": "running",
        }
        _write(fd, me)
        yield killed
    finally:
        # Unlinked while held (a waiter then retries on a new file), so a finished writer leaves nothing behind;
        # a killed one leaves its "running" file, which the next writer reports.
        path.unlink(missing_ok=True)
        os.close(fd)
        if created:
            try:
                root.rmdir()  # a writer that failed before writing anything leaves no empty folder either
            except OSError:
                pass
