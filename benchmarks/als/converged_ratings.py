"""Real ratings: the refresh's models trained as a refresh trains them, against implicit's 15-iteration fit, one run.

    python -m benchmarks.als.converged_ratings      # ml-100k, k = 32, --tol 1e-4; biased MF (the default) and ALS-MF

Each model is trained in this process on all of ml-100k with its defaults and the stopping rule a refresh with
``--tol`` gives it: biased MF to the absolute miss tol × its score floor (``models.biased_mf.score_floor``), ALS-MF
to the identity bound tol·MIN_TARGET_COS. Its identity is then measured as a refresh measures it
(``RepresenterExplainer.fidelity``: every training row of each side, relative to max(|score|, the floor)) over
``--sample`` users' top-10 unseen items. implicit's ``AlternatingLeastSquares`` (its defaults: 15 iterations) fits the
same ratings at the same k, ``--repeats`` times before the models and after (median). Each model is also fitted
from seeds 1 … ``--seeds`` − 1 (not measured for identity): the seed decides how long the sweeps take. Threads as
``benchmarks.als.converged_fit``: 2 for numba and implicit, BLAS at 1; numba's kernels are compiled by a warm-up fit
first.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.als.common import ALS
from benchmarks.als.converged_fit import implicit_fit_seconds
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.explain.representer import RepresenterExplainer
from dxplain.explain.targets import recommend
from dxplain.models.als.trainer import ALSMF, MIN_TARGET_COS
from dxplain.models.biased_mf import BiasedMF, score_floor


def trainers(data, k: int, tol: float) -> dict:
    return {
        "biased": BiasedMF(k=k, miss_tol=tol * score_floor(data)),
        "mf": ALSMF(k=k, identity_tol=tol * MIN_TARGET_COS),
    }


def measured(model, data, users: np.ndarray) -> dict:
    e = RepresenterExplainer.of(model, data)
    fid = e.fidelity(recommend(e.pre.Ut, e.pre.Vt, data, users, 10))
    return {side: {"max": f["max_rel_error"], "median": f["median_rel_error"]} for side, f in fid.items()}


def main():
    ap = parser(__doc__)
    ap.add_argument("--dataset", default="movielens-100k")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--tol", type=float, default=1e-4, help="the refresh's --tol the models train for")
    ap.add_argument("--models", default="biased,mf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample", type=int, default=943)
    ap.add_argument("--seeds", type=int, default=10, help="each model also fitted from seeds 1 … N − 1 (its spread)")
    a = ap.parse_args()
    import implicit
    from numba import set_num_threads

    data = resolve_dataset(a.dataset).interactions
    users = np.sort(np.random.default_rng(0).choice(data.n_users, min(a.sample, data.n_users), replace=False))
    set_num_threads(a.threads)
    fits = []
    with threadpool_limits(1, user_api="blas"):
        for t in trainers(data, a.k, a.tol).values():  # compiles numba's kernels (cached afterwards)
            type(t)(k=a.k, max_sweeps=2, newton_steps=0).fit(data)
        implicit_s = [implicit_fit_seconds(data, a.k, a.threads) for _ in range(a.repeats)]
        for name, trainer in trainers(data, a.k, a.tol).items():
            if name not in a.models.split(","):
                continue
            t0 = time.perf_counter()
            m = trainer.fit(data)
            seconds = time.perf_counter() - t0
            fits.append(
                {
                    "model": name,
                    "seconds": round(seconds, 2),
                    "sweeps": m.info["sweeps"],
                    "newton_steps": m.info["newton_iters"],
                    "converged": bool(trainer.converged(m)),
                    "grad_norm": m.grad_norm,
                    "identity": measured(m, data, users),
                }
            )
            others = []
            for seed in range(1, a.seeds):
                t0 = time.perf_counter()
                m = replace(trainer, seed=seed).fit(data)
                others.append(
                    {
                        "seed": seed,
                        "seconds": round(time.perf_counter() - t0, 2),
                        "sweeps": m.info["sweeps"],
                        "newton_steps": m.info["newton_iters"],
                        "converged": bool(trainer.converged(m)),
                    }
                )
            fits[-1]["seeds"] = others
            fits[-1]["mean_seconds_over_seeds"] = round(float(np.mean([seconds] + [o["seconds"] for o in others])), 2)
            print(json.dumps(fits[-1]), flush=True)
        implicit_s += [implicit_fit_seconds(data, a.k, a.threads) for _ in range(a.repeats)]
    implicit_median = float(np.median(implicit_s))
    for f in fits:
        f["over_implicit"] = round(f["seconds"] / implicit_median, 1)
        f["mean_over_implicit"] = round(f["mean_seconds_over_seeds"] / implicit_median, 1)
    out = {
        "dataset": a.dataset,
        "ratings": len(data),
        "k": a.k,
        "tol": a.tol,
        "threads": a.threads,
        "targets": 10 * len(users),
        "implicit": implicit.__version__,
        "implicit_fit_seconds": [round(s, 3) for s in implicit_s],
        "implicit_fit_median_s": round(implicit_median, 3),
        "target_ratio": 10.0,
        "fits": fits,
    }
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "converged_ratings.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({key: v for key, v in out.items() if key != "fits"}))


if __name__ == "__main__":
    main()
