"""Case-deletion retrainings as Dask tasks: the case (data and model) is scattered once per trial, then
one task per deletion curve. The in-memory twin is ``run_in_memory``; both return curves in job order."""

from __future__ import annotations

import logging
import time

from distributed import Client, as_completed

from ..explain.deletion import deletion_curve
from .cluster import scatter

log = logging.getLogger(__name__)


def _curve(case, job, base):
    return deletion_curve(case, job.target, list(job.sets), base[job.target])


def run_in_memory(case, jobs, base) -> list[list[float]]:
    return [_curve(case, job, base) for job in jobs]


def run_on_cluster(client: Client, case, jobs, base, retries: int = 2) -> list[list[float]]:
    t0 = time.perf_counter()
    case_f = scatter(client, case, broadcast=True)
    futures = [client.submit(_curve, case_f, job, base, retries=retries, pure=False) for job in jobs]
    index = {f.key: n for n, f in enumerate(futures)}
    out: list = [None] * len(jobs)
    step = max(1, len(jobs) // 10)
    for done, fut in enumerate(as_completed(futures), start=1):
        out[index[fut.key]] = fut.result()
        if done % step == 0 or done == len(jobs):
            el = time.perf_counter() - t0
            log.info("case deletion: %d/%d curves (%d retrainings) in %.1fs", done, len(jobs),
                     done * len(jobs[0].sets), el)
    return out
