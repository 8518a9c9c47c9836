"""ALS per sweep: dxplain's half-steps (the trainer's sweep; exact ones by the fused numba kernel and by the numpy
batches) vs implicit, in one run.

    python -m benchmarks.als.vs_implicit            # ml-100k and a synthetic ml-1m-sized set, k = 32, 64

One sweep is both half-steps (every user's solve, then every item's). The trainer's sweep (``ALSMF``'s default)
takes ``DEFAULT_CG_STEPS`` warm-started CG steps per user from the previous sweep's rows
(``kernels.als.ridge_cg_rows``) and solves every item exactly, with its rows of ∇f (``LocalHalfSteps``); its
first sweep, exact, is not timed. The exact columns solve each row's ridge system exactly on both sides
(``kernels.als.ridge_solve_rows``). None includes the trainer's stationarity measure. implicit 0.7
(``AlternatingLeastSquares``, its defaults: float32, 3 conjugate-gradient steps per row on its
confidence-weighted objective) is timed per iteration through its fit callback. The problems differ — a
user comparing libraries sees seconds per sweep. Both use 2 threads (numba's and implicit's, with BLAS at 1;
BLAS at 2 for the numpy batches). Each figure is the median of ``--sweeps`` sweeps. The synthetic set has
ml-1m's shape: 6,040 users × 3,449 items, ~1M ratings (``datasets.synthetic.generate``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from benchmarks.als.common import ALS, named_interactions
from benchmarks.als.tables import vs_implicit_table
from benchmarks.common import CACHE, parser
from dxplain.kernels import als
from dxplain.models.als.half_steps import LocalHalfSteps, csr_view
from dxplain.models.als.losses import SquaredRows
from dxplain.models.als.trainer import DEFAULT_CG_STEPS, DEFAULT_RIDGE


def dxplain_sweep_seconds(data, k: int, sweeps: int, fused: bool, threads: int) -> float:
    """Median seconds of one ALS sweep (users given V, then items given U) at the default ridge."""
    from numba import set_num_threads

    y = data.rating - data.rating.mean()
    users, items = csr_view(data, y, "user"), csr_view(data, y, "item")
    rng = np.random.default_rng(0)
    U, V = 0.1 * rng.standard_normal((data.n_users, k)), 0.1 * rng.standard_normal((data.n_items, k))
    set_num_threads(threads)
    times = []
    # The fused kernel's threads are numba's (its one BLAS call per row, the Cholesky, runs on one thread).
    with threadpool_limits(1 if fused else threads, user_api="blas"):
        for s in range(sweeps + 1):  # the first sweep warms caches (and numba's compiled code) up
            t0 = time.perf_counter()
            U = als.ridge_solve_rows(*users, V, DEFAULT_RIDGE, fused=fused)
            V = als.ridge_solve_rows(*items, U, DEFAULT_RIDGE, fused=fused)
            if s:
                times.append(time.perf_counter() - t0)
    return float(np.median(times))


def trainer_sweep_seconds(data, k: int, sweeps: int, threads: int) -> float:
    """Median seconds of one sweep as ``ALSMF`` takes it by default: the users' CG half-step from the previous
    sweep's U, then the items' exact one with its rows of ∇f (``LocalHalfSteps``, at the default ridge)."""
    from numba import set_num_threads

    half_steps = LocalHalfSteps(data, data.rating_mean(), DEFAULT_RIDGE, loss=SquaredRows(cg_steps=DEFAULT_CG_STEPS))
    rng = np.random.default_rng(0)
    V = 0.1 * rng.standard_normal((data.n_items, k))
    set_num_threads(threads)
    times = []
    with threadpool_limits(1, user_api="blas"):
        U = half_steps.users(V)  # the trainer's first sweep is exact: its start is random
        V = half_steps.items(U)
        for s in range(sweeps + 1):  # the first timed sweep warms caches up
            t0 = time.perf_counter()
            U = half_steps.users(V, U)
            V = half_steps.items(U)
            if s:
                times.append(time.perf_counter() - t0)
    return float(np.median(times))


def implicit_iteration_seconds(data, k: int, sweeps: int, threads: int) -> float:
    """Median seconds of one implicit ALS iteration (both half-steps), from its fit callback."""
    from implicit.cpu.als import AlternatingLeastSquares

    R = sp.csr_matrix((data.rating.astype(np.float32), (data.user, data.item)), shape=(data.n_users, data.n_items))
    times = []
    model = AlternatingLeastSquares(factors=k, iterations=sweeps + 1, num_threads=threads, random_state=0)
    with threadpool_limits(1, user_api="blas"):
        model.fit(R, show_progress=False, callback=lambda it, elapsed, loss: times.append(elapsed))
    return float(np.median(times[1:]))


def main():
    ap = parser(__doc__)
    ap.add_argument("--datasets", default="movielens-100k,synthetic-ml1m")
    ap.add_argument("--k", default="32,64")
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    rows = []
    for name in a.datasets.split(","):
        data = named_interactions(name, Path(a.cache))
        for k in map(int, a.k.split(",")):
            trainer = trainer_sweep_seconds(data, k, a.sweeps, a.threads)
            fused = dxplain_sweep_seconds(data, k, a.sweeps, True, a.threads)
            numpy_ = dxplain_sweep_seconds(data, k, a.sweeps, False, a.threads)
            implicit_ = implicit_iteration_seconds(data, k, a.sweeps, a.threads)
            rows.append(
                {
                    "dataset": name,
                    "users": data.n_users,
                    "items": data.n_items,
                    "ratings": len(data),
                    "k": k,
                    "threads": a.threads,
                    "sweeps": a.sweeps,
                    "cg_steps": DEFAULT_CG_STEPS,
                    "dxplain_trainer_s": round(trainer, 4),
                    "trainer_over_implicit": round(trainer / implicit_, 2),
                    "dxplain_fused_s": round(fused, 4),
                    "dxplain_numpy_s": round(numpy_, 4),
                    "implicit_s": round(implicit_, 4),
                    "fused_over_implicit": round(fused / implicit_, 2),
                    "numpy_over_implicit": round(numpy_ / implicit_, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    import implicit

    ALS.mkdir(parents=True, exist_ok=True)
    result = {"implicit": implicit.__version__, "rows": rows}
    (ALS / "vs_implicit.json").write_text(json.dumps(result, indent=2))
    print(vs_implicit_table(result))


if __name__ == "__main__":
    main()
