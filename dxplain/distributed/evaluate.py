"""Case-deletion retrainings as Dask tasks: the case (data and model) is scattered once per trial, then
one task per deletion curve. The in-memory twin is ``run_in_memory``; both return curves in job order."""

from __future__ import annotations

import logging
import time

from distributed import Client

from ..explain.deletion import deletion_curve
from .cluster import gather_in_order, scatter

log = logging.getLogger(__name__)


def _curve(case, job, base):
    return deletion_curve(case, job.target, list(job.sets), base[job.target])


def run_in_memory(case, jobs, base) -> list[list[float]]:
    return [_curve(case, job, base) for job in jobs]


def run_on_cluster(client: Client, case, jobs, base, retries: int = 2) -> list[list[float]]:
    t0 = time.perf_counter()
    case_f = scatter(client, case, broadcast=True)
    futures = [client.submit(_curve, case_f, job, base, retries=retries, pure=False) for job in jobs]
    step = max(1, len(jobs) // 10)

    def report(done, _):
        if done % step == 0 or done == len(jobs):
            log.info("case deletion: %d/%d curves (%d retrainings) in %.1fs", done, len(jobs),
                     done * len(jobs[0].sets), time.perf_counter() - t0)

    return gather_in_order(futures, report)
