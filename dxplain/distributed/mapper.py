"""``DaskMapper``: the ``dxplain.mapper.Mapper`` interface on a Dask client passed in.

Every task gets a unique, readable key (``dxplain-<name>-<n>-<stamp>``, so the dashboard and logs say
what runs), ``retries`` for errors raised inside it (a task lost with its worker is recomputed by the
scheduler anyway), and ``pure=False``: tasks write files, so the scheduler must never dedupe two of them.
"""

from __future__ import annotations

import itertools
import time

from distributed import Client, as_completed

from ..mapper import Report, peak_rss_mib
from .cluster import scatter

_stamp = itertools.count()


class DaskMapper:
    """Tasks on a Dask cluster (``client`` passed in; the library never creates a cluster)."""

    def __init__(self, client: Client, retries: int = 2):
        self.client, self.retries = client, retries

    @property
    def workers(self) -> int:
        return max(1, len(self.client.scheduler_info()["workers"]))

    def put(self, obj, broadcast: bool = False):
        return scatter(self.client, obj, broadcast=broadcast)

    def _submit(self, fn, args, name: str) -> list:
        stamp = f"{time.time_ns()}-{next(_stamp)}"
        return [self.client.submit(fn, *a, retries=self.retries, pure=False, key=f"dxplain-{name}-{n:05d}-{stamp}")
                for n, a in enumerate(args)]

    def map(self, fn, args, name: str = "task", report: Report | None = None) -> list:
        futures = self._submit(fn, args, name)
        index = {f.key: n for n, f in enumerate(futures)}
        out: list = [None] * len(futures)
        for done, fut in enumerate(as_completed(futures), start=1):
            out[index[fut.key]] = result = fut.result()
            if report is not None:
                report(done, result)
        return out

    def imap(self, fn, args, name: str = "task"):
        futures = self._submit(fn, args, name)
        index = {f.key: n for n, f in enumerate(futures)}
        for fut in as_completed(futures):
            result = fut.result()
            fut.release()  # merged by the caller: free it on the worker
            yield index[fut.key], result

    def persist(self, fn, args, name: str = "task") -> list:
        return self._submit(fn, args, name)

    def peak_rss_mib(self) -> dict:
        return {"flow": peak_rss_mib(), "workers": self.client.run(peak_rss_mib)}
