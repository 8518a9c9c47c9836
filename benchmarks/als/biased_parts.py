"""Biased MF trained in this process against the same fit over the partitioned interactions, on ml-100k.

    python -m benchmarks.als.biased_parts            # BiasedMF() defaults (k = 32, ridges 15 · 3, miss_tol 1e-8)

Three fits of ``BiasedMF()``: ``BiasedHalfSteps`` over the whole table here; ``BiasedPartHalfSteps`` over
``--rows-per-part`` parts on a ``LocalMapper`` (every task in this process); the same on a Dask LocalCluster of
``--workers`` processes with one thread each. Each fit is timed whole (``--repeats``, median), after a two-sweep
warm-up that loads numba's compiled kernels. Recorded beside the times: sweeps, Newton steps, the miss bound, the
largest difference from the in-process factors relative to their largest entry, and the largest difference of the
predictions over sampled pairs (rating units). BLAS and numba at one thread in every process.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
from numba import set_num_threads
from threadpoolctl import threadpool_limits

from benchmarks.als.common import ALS, named_interactions
from benchmarks.common import CACHE, parser
from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.io.partitions import write_partitions
from dxplain.mapper import LocalMapper
from dxplain.models.biased_half_steps import BiasedPartHalfSteps
from dxplain.models.biased_mf import BiasedMF


def timed(fit, repeats: int):
    seconds, model = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        model = fit()
        seconds.append(time.perf_counter() - t0)
    return model, statistics.median(seconds)


def compared(model, reference, trainer, seconds: float, pairs) -> dict:
    u, i = pairs
    return {
        "seconds": round(seconds, 2),
        "sweeps": model.info["sweeps"],
        "newton_steps": model.info["newton_iters"],
        "converged": trainer.converged(model),
        "miss_bound": model.info["miss_bound"],
        "factors_max_rel_diff": max(
            float(np.abs(model.U - reference.U).max() / np.abs(reference.U).max()),
            float(np.abs(model.V - reference.V).max() / np.abs(reference.V).max()),
        ),
        "predictions_max_abs_diff": float(np.abs(model.predict(u, i) - reference.predict(u, i)).max()),
    }


def main():
    ap = parser(__doc__)
    ap.add_argument("--dataset", default="movielens-100k")
    ap.add_argument("--rows-per-part", type=int, default=25_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    data = named_interactions(a.dataset, Path(a.cache))
    set_num_threads(1)
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, data.n_users, 20_000), rng.integers(0, data.n_items, 20_000)
    trainer = BiasedMF()
    out = {"dataset": a.dataset, "interactions": len(data), "trainer": repr(trainer), "rows_per_part": a.rows_per_part}
    with threadpool_limits(1, user_api="blas"), tempfile.TemporaryDirectory() as tmp:
        parts = write_partitions(tmp, data, rows_per_part=a.rows_per_part)
        out["parts"] = {"user": len(parts.user_cuts) - 1, "item": len(parts.item_cuts) - 1}
        BiasedMF(max_sweeps=2, newton_steps=0).fit(data)  # loads numba's cached kernels
        here, s = timed(lambda: trainer.fit(data), a.repeats)
        out["in_process"] = compared(here, here, trainer, s, pairs)
        over = partial(BiasedPartHalfSteps, LocalMapper(), parts)
        m, s = timed(lambda: trainer.fit(data, half_steps=over), a.repeats)
        out["parts_local_mapper"] = compared(m, here, trainer, s, pairs)
        with connect(Settings(workers=a.workers, threads_per_worker=1, blas_threads=1)) as client:
            over = partial(BiasedPartHalfSteps, DaskMapper(client), parts)
            BiasedMF(max_sweeps=2, newton_steps=0).fit(data, half_steps=over)  # the workers' kernels
            m, s = timed(lambda: trainer.fit(data, half_steps=over), a.repeats)
        out[f"parts_dask_{a.workers}_workers"] = compared(m, here, trainer, s, pairs)
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "biased_parts.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
