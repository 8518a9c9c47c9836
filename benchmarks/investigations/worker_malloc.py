"""Page faults of numpy temporaries in a Dask worker, with and without Dask's MALLOC_TRIM_THRESHOLD_.

    python -m benchmarks.investigations.worker_malloc

Runs the same block-wise numpy task (300 rounds of ~10 MB temporaries) in this process and on a
1-worker LocalCluster started with Dask's default worker environment and without the variable, and
prints page faults, user and system seconds, and wall seconds for each.
"""

from __future__ import annotations

import logging
import os
import resource
import time

import dask
import numpy as np
from distributed import Client, LocalCluster

from benchmarks.common import parser


def task() -> dict:
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    x = np.random.default_rng(0).random((1_000_000, 4))
    for _ in range(300):
        y = np.take(x, np.arange(0, 1_000_000, 3), axis=0)  # ~10 MB temporaries, as the kernels' blocks
        np.sort((y * 2.0).sum(axis=1))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "page_faults": r1.ru_minflt - r0.ru_minflt,
        "user_s": round(r1.ru_utime - r0.ru_utime, 2),
        "sys_s": round(r1.ru_stime - r0.ru_stime, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
    }


def on_worker(environ: dict) -> dict:
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # an earlier nanny left its value here, and it would win
    with (
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ}),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        ) as cluster,
        Client(cluster) as client,
    ):
        return client.submit(task, pure=False).result()


if __name__ == "__main__":
    parser(__doc__).parse_args()
    default = dask.config.get("distributed.nanny.pre-spawn-environ")
    print("in-process           ", task())
    print("worker, Dask default ", on_worker(default))
    print("worker, without it   ", on_worker({**default, "MALLOC_TRIM_THRESHOLD_": None}))
