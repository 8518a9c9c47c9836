"""Why the trainers run BLAS on one thread (``models.threads.numba_owns_the_cores``): in-process fits, one run.

    python -m benchmarks.als.blas_threads      # ml-100k: biased MF, ALS-MF (ratings), iALS λ 20, α 1 (ratings ≥ 4)

The iALS fit starts from implicit's random start: at α 1 on 0/1 data the default start is the optimum (one sweep).

Each model is fitted in this process twice, as ``dxplain train`` fits it: with the trainer's BLAS limit (one thread,
numba on every core) and with it lifted (BLAS's own pool, one thread per core, beside numba's threads). The same
sweeps either way; the wall time differs by what the spinning BLAS threads take from numba's loops. numba's kernels
are compiled by a warm-up fit first. Writes benchmarks/results/als/blas_threads.json.
"""

from __future__ import annotations

import contextlib
import json
import time

import numpy as np
from threadpoolctl import threadpool_info

from benchmarks.als import implicit_peers as pe
from benchmarks.als.common import ALS
from benchmarks.als.converged_ratings import trainers
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.models import ials, ials_half_steps, threads
from dxplain.models.als import trainer
from dxplain.models.ials import IALS

TOL = 1e-4
USERS = (trainer, ials, ials_half_steps)  # the modules whose trainers and tasks enter ``numba_owns_the_cores``


def fits(ratings, clicks) -> dict:
    """The refresh's rating models as ``converged_ratings`` trains them, and iALS where its rows share G + λI."""
    biased, mf = trainers(ratings, 32, TOL).values()
    return {
        "biased MF k=32": (lambda: biased.fit(ratings)),
        "ALS-MF k=32": (lambda: mf.fit(ratings)),
        "iALS k=32 λ 20 α 1": (lambda: IALS(k=32, lam=20.0, alpha=1.0, start="random").fit(clicks)),
    }


def main():
    ap = parser(__doc__)
    ap.parse_args()
    ratings = resolve_dataset("movielens-100k").interactions
    clicks = pe.binarised(ratings)
    limited = threads.numba_owns_the_cores
    for fit in fits(ratings, clicks).values():  # compiles numba's kernels
        fit()
    rows = []
    for name, fit in fits(ratings, clicks).items():
        row = {"model": name}
        for label, context in (("one_blas_thread", limited), ("blas_pool", contextlib.nullcontext)):
            for trainer_module in USERS:  # where the trainers took the context from
                trainer_module.numba_owns_the_cores = context
            try:
                t0 = time.perf_counter()
                m = fit()
                row[f"{label}_s"] = round(time.perf_counter() - t0, 2)
            finally:
                for trainer_module in USERS:
                    trainer_module.numba_owns_the_cores = limited
            row["sweeps"] = m.info["sweeps"]
        row["ratio"] = round(row["blas_pool_s"] / row["one_blas_thread_s"], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    pools = [{k: p.get(k) for k in ("internal_api", "num_threads")} for p in threadpool_info()]
    out = {"dataset": "movielens-100k", "tol": TOL, "blas": pools, "fits": rows}
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "blas_threads.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"median_ratio": float(np.median([r["ratio"] for r in rows]))}))


if __name__ == "__main__":
    main()
