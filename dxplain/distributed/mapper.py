"""``DaskMapper``: the ``dxplain.mapper.Mapper`` interface on a Dask client passed in.

Every task gets a unique, readable key (``dxplain-<name>-<n>-<stamp>``, so the dashboard and logs say
what runs), ``retries`` for errors raised inside it (a task lost with its worker is recomputed by the
scheduler anyway), and ``pure=False``: tasks write files, so the scheduler must never dedupe two of them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import weakref

import numpy as np
from dask.sizeof import sizeof
from distributed import Client, Future, as_completed, wait
from distributed.client import FutureCancelledError

from ..mapper import Report, peak_rss_mib, trim_heap
from .cluster import scatter

log = logging.getLogger(__name__)
_stamp = itertools.count()

# distributed reads a message's first numpy buffer into the same allocation as its header, at whatever
# offset that leaves, so the first array of every scattered or fetched object arrives unaligned
# (measured: every bare array, and the first array attribute of a dataclass). numpy then takes its slow
# unaligned paths (np.take of rows of U: two orders of magnitude slower than on an aligned copy).
# What ``put`` sends goes behind a one-byte array (``Padded``), so its own arrays arrive aligned with no
# copy, on the worker it is sent to and on every peer that fetches it. Anything else a task receives
# (another task's result fetched from a peer) is realigned by ``aligned``: an object's array attributes
# in place (once: the worker keeps the object), a bare array's copy kept while the array lives.
_copies: dict[int, tuple[weakref.ref, np.ndarray]] = {}
_copies_lock = threading.Lock()
copies_made = itertools.count()  # every aligned copy made in this process (tests read it)


def aligned(x, depth: int = 2, cache: bool = True):
    """``x`` with unaligned arrays replaced by aligned copies: ``x`` itself if it is an array (its copy
    kept while it lives, when ``cache``), the object a ``Padded`` carries, else its attributes (replaced in
    place) and list or tuple items down to ``depth`` levels."""
    if type(x) is Padded:
        return x.obj
    if isinstance(x, np.ndarray):
        if x.flags.aligned:
            return x
        key = id(x)
        if cache:
            with _copies_lock:
                hit = _copies.get(key)
            if hit is not None and hit[0]() is x:
                return hit[1]
        copy = np.array(x, subok=True)  # a fresh allocation: aligned
        next(copies_made)
        if cache:
            with _copies_lock:
                _copies[key] = (weakref.ref(x, lambda ref, key=key: _forget(key, ref)), copy)
        return copy
    if depth == 0:
        return x
    if type(x) in (list, tuple):
        items = [aligned(v, depth - 1) for v in x]
        return x if all(a is v for a, v in zip(items, x)) else type(x)(items)
    if hasattr(x, "__dict__") and not isinstance(x, type):
        for name, v in list(vars(x).items()):
            a = aligned(v, depth - 1, cache=False)  # the object keeps the copy: nothing to remember
            if a is not v:
                object.__setattr__(x, name, a)  # frozen dataclasses too
    return x


def _forget(key: int, ref: weakref.ref) -> None:
    """Drop a dead array's aligned copy (a weakref callback: the array was collected)."""
    with _copies_lock:
        if _copies.get(key, (None,))[0] is ref:
            del _copies[key]


class Padded:
    """An object sent behind a one-byte array, which takes the unaligned first-buffer slot."""

    __slots__ = ("pad", "obj")

    def __init__(self, obj, pad: np.ndarray | None = None):
        self.pad, self.obj = (np.zeros(1, np.uint8) if pad is None else pad), obj

    def __reduce__(self):
        return _padded, (self.pad, self.obj)  # the pad is pickled first: its buffer comes first


def _padded(pad: np.ndarray, obj) -> Padded:
    return Padded(obj, pad)


# Dask sizes data to place tasks near it and to budget workers' memory: a Padded object weighs its content.
sizeof.register(Padded)(lambda p: sizeof(p.obj) + 1)


def _call_aligned(fn, *args):
    return fn(*(aligned(a) for a in args))


class DaskMapper:
    """Tasks on a Dask cluster (``client`` passed in; the library never creates a cluster)."""

    def __init__(self, client: Client, retries: int = 2):
        self.client, self.retries = client, retries
        # What each live ``put`` handle was made from (dropped with the handle): a handle scattered to a worker that
        # then dies is forgotten by the scheduler, with no lineage to recompute it from; ``map`` sends it again.
        self._origins: dict[str, tuple] = {}

    @property
    def workers(self) -> int:
        return max(1, len(self.client.scheduler_info()["workers"]))

    def put(self, obj, broadcast: bool = False):
        # A list is sent element by element (one handle each), as Dask's scatter does; anything else,
        # tuples and dicts included, as one object with one handle.
        wrapped = [Padded(x) for x in obj] if type(obj) is list else Padded(obj)
        handles = scatter(self.client, wrapped, broadcast=broadcast)
        for h, w in zip(handles, wrapped) if type(obj) is list else [(handles, wrapped)]:
            self._origins[h.key] = (w, broadcast)
            weakref.finalize(h, self._origins.pop, h.key, None)
        return handles

    def _resent(self, args: list) -> list | None:
        """``args`` with every ``put`` handle the cluster lost (its only worker died) scattered again; None when none
        was lost (a task's failure is then its own)."""
        lost = {
            a.key: a
            for t in args
            for a in t
            if isinstance(a, Future) and a.key in self._origins and a.status in ("lost", "cancelled", "error")
        }
        if not lost:
            return None
        log.warning("%d input(s) were lost with a worker; sending them again", len(lost))
        fresh = {}
        for key in lost:
            wrapped, broadcast = self._origins[key]
            fresh[key] = h = scatter(self.client, wrapped, broadcast=broadcast)
            self._origins[h.key] = (wrapped, broadcast)
            weakref.finalize(h, self._origins.pop, h.key, None)
        return [tuple(fresh.get(a.key, a) if isinstance(a, Future) else a for a in t) for t in args]

    def _submit(self, fn, args, name: str, near_first: bool = False) -> list:
        stamp = f"{time.time_ns()}-{next(_stamp)}"
        args = [tuple(a) for a in args]
        where = self._holders([a[0] for a in args if a and isinstance(a[0], Future)]) if near_first else {}
        return [
            self.client.submit(
                _call_aligned,
                fn,
                *a,
                retries=self.retries,
                pure=False,
                key=f"dxplain-{name}-{n:05d}-{stamp}",
                **self._near(where, a),
            )
            for n, a in enumerate(args)
        ]

    def _holders(self, futures: list) -> dict:
        """The workers holding each of ``futures`` (once computed: a chain's previous step must finish
        before its next can run anyway)."""
        if not futures:
            return {}
        wait(futures)
        return self.client.who_has(futures)

    @staticmethod
    def _near(where: dict, a: tuple) -> dict:
        # The scheduler otherwise weighs a task's placement by its inputs' reported sizes and the workers'
        # queues, and ran some of a chain's steps on the other worker: each move copies the state (a part's
        # SBQ candidates and the item whiteners it was sent). Loose: a task still runs elsewhere when its
        # worker is gone (the state is then recomputed from its lineage).
        holders = where.get(a[0].key) if a and isinstance(a[0], Future) else None
        return {"workers": list(holders), "allow_other_workers": True} if holders else {}

    def map(self, fn, args, name: str = "task", report: Report | None = None, near_first: bool = False) -> list:
        args = [tuple(a) for a in args]
        out: list = [None] * len(args)
        # closed on any exception here (a report's Ctrl-C too), so the rest is cancelled even while the
        # exception's traceback keeps this frame, and the generator, alive
        with contextlib.closing(self.imap(fn, args, name, near_first)) as results:
            for done, (n, result) in enumerate(results, 1):
                out[n] = result
                if report is not None:
                    report(done, result)
        return out

    def imap(self, fn, args, name: str = "task", near_first: bool = False):
        args = [tuple(a) for a in args]
        pending = list(range(len(args)))
        for attempt in (1, 2):
            futures = self._submit(fn, [args[n] for n in pending], name, near_first)
            index = {f.key: n for n, f in zip(pending, futures)}
            finished = set()
            try:
                for fut in as_completed(futures):
                    result = fut.result()
                    fut.release()  # merged by the caller: free it on the worker
                    finished.add(index[fut.key])
                    yield index[fut.key], result
                return
            except FutureCancelledError:
                self._cancel(futures)
                resent = self._resent(args) if attempt == 1 else None
                if resent is None:
                    raise
                # The tasks not finished again, on the inputs sent again: each is a function of its inputs.
                args, pending = resent, [n for n in pending if n not in finished]
            except BaseException:  # GeneratorExit too: a caller that stops early wants no more of them
                self._cancel(futures)
                raise

    def _cancel(self, futures: list) -> None:
        """Stop the rest of a map that failed or was interrupted (Ctrl-C, a task's error): without this the
        workers go on running its queued tasks, for a result nobody reads, while the flow unwinds; on a
        shared scheduler, until they are done. Best effort: the client may be closing already."""
        try:
            self.client.cancel([f for f in futures if not f.done()])
        except Exception:  # noqa: BLE001 - the error being raised is the one to report
            pass

    def persist(self, fn, args, name: str = "task", near_first: bool = False) -> list:
        return self._submit(fn, args, name, near_first)

    def peak_rss_mib(self) -> dict:
        return {"flow": peak_rss_mib(), "workers": self.client.run(peak_rss_mib)}

    def release_memory(self) -> None:
        try:
            self.client.run(trim_heap, on_error="ignore")
        except OSError as exc:  # the scheduler unreachable: the next stage will say so, with retries
            log.debug("release_memory skipped: %s", exc)
