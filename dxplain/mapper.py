"""How an algorithm maps work over shards: written once, run in this process or on a Dask cluster.

An algorithm that has a cluster path takes a ``Mapper`` and never a client. ``LocalMapper`` runs every
call here, in order; ``distributed.mapper.DaskMapper`` submits the same calls as Dask tasks (retries,
keys, progress) and is the only one that knows about Dask. The tests run both and compare their output
byte for byte. This module imports nothing heavy, so kernels' callers and the in-process path never load
Dask.

The interface is four verbs:

* ``put(obj, broadcast)`` — read-only state sent once (a scatter on Dask); the handle it returns is
  passed as an argument to later calls in place of the object.
* ``map(fn, args, name, report)`` — ``fn(*a)`` for every ``a`` in ``args``; results in order.
  ``report(done, result)`` is called as each one finishes (progress for logs and bars).
* ``imap(fn, args, name)`` — the same calls, yielding ``(index, result)`` as each finishes, and
  releasing it on the cluster: for reductions that must not hold every result at once.
* ``persist(fn, args, name)`` — the same calls, results kept where they were computed (futures on a
  cluster, values here): state that later ``map`` calls take as arguments, e.g. a part read once and
  solved against every sweep, or SBQ's per-shard state. Lost workers recompute from lineage.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .io.proc import peak_resident_kib

log = logging.getLogger(__name__)

Report = Callable[[int, Any], None]


@runtime_checkable
class Mapper(Protocol):
    """Where an algorithm's tasks run: this process (``LocalMapper``) or a Dask cluster (``DaskMapper``)."""

    @property
    def workers(self) -> int:
        """Worker processes that run tasks (1 in this process)."""

    def put(self, obj: Any, broadcast: bool = False) -> Any:
        """Send read-only ``obj`` once; return what to pass to tasks in its place."""

    def map(
        self,
        fn: Callable,
        args: Iterable[Sequence],
        name: str = "task",
        report: Report | None = None,
        near_first: bool = False,
    ) -> list:
        """``[fn(*a) for a in args]``, in order; ``report(done, result)`` as each finishes. ``near_first``: run
        each task where its first argument (a handle from ``persist``) is, as every method here takes it."""

    def imap(
        self, fn: Callable, args: Iterable[Sequence], name: str = "task", near_first: bool = False
    ) -> Iterator[tuple[int, Any]]:
        """``(index, fn(*args[index]))`` as each finishes (any order), holding no finished result."""

    def persist(self, fn: Callable, args: Iterable[Sequence], name: str = "task", near_first: bool = False) -> list:
        """``fn(*a)`` for every ``a``, left where it was computed: handles to pass to later tasks. With
        ``near_first``, a chain of states (each task's first argument the state before) stays where it is."""

    def peak_rss_mib(self) -> dict:
        """Peak resident memory (MiB): ``{"flow": this process, "workers": {address: MiB}}``."""

    def release_memory(self) -> None:
        """Return the heap memory the tasks so far freed to the system, in every worker (``trim_heap``).
        Best effort: a worker that is gone is skipped, and the run goes on."""


def peak_rss_mib() -> float:
    """This process's high-water mark of resident memory: the number a memory limit is about.

    Linux: VmHWM of /proc/self/status. Not ru_maxrss: a worker is forked from the process that starts
    the cluster and then exec'd, and Linux carries the parent's high-water mark across both, so a worker
    started by a flow holding the whole table reported the flow's peak as its own (measured: a spawned
    child of a 1.5 GiB process had ru_maxrss 1.5 GiB and VmHWM 28 MiB).
    """
    peak = peak_resident_kib()
    if peak is not None:
        return round(peak / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux, bytes on macOS


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: give the free pages of this process's heaps back to the system; a no-op
    elsewhere. Workers run without a trim threshold (faster temporaries: docs/scaling.md, "Worker
    allocator"), so heap that training freed under live allocations stayed resident beneath the
    explanation's working set; trimmed between the two, it is returned (tested; measured in scaling.md)."""
    try:
        glibc().malloc_trim(0)
    except (OSError, AttributeError):
        pass


def glibc():
    """The C library, for glibc's allocator controls (raises OSError, or AttributeError on use, elsewhere)."""
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class LocalMapper:
    """Every task in this process, in submission order: the reference the Dask mapper is tested against."""

    workers = 1

    def put(self, obj, broadcast: bool = False):
        return obj

    def map(self, fn, args, name: str = "task", report: Report | None = None, near_first: bool = False) -> list:
        out = []
        for _, result in self.imap(fn, args, name):
            out.append(result)
            if report is not None:
                report(len(out), result)
        return out

    def imap(self, fn, args, name: str = "task", near_first: bool = False):
        for n, a in enumerate(args):
            yield n, fn(*a)

    def persist(self, fn, args, name: str = "task", near_first: bool = False) -> list:
        return [fn(*a) for a in args]

    def peak_rss_mib(self) -> dict:
        return {"flow": peak_rss_mib(), "workers": {}}

    def release_memory(self) -> None:
        trim_heap()
