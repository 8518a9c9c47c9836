"""Time to a converged ALS-MF fit against implicit's default 15-iteration fit of the same data, in one run.

    python -m benchmarks.als.converged_fit        # synthetic ml-1m-sized set, k = 32, identity tolerances 1e-4 and 1e-6

dxplain trains ``ALSMF(k, identity_tol=tol)``: Anderson-accelerated exact ALS sweeps until the bound the
gradient gives on the representer identity's relative error is ≤ tol (``kernels.als.identity_bound``),
the rule the refresh's ``--tol`` asks for. The identity is then measured as a refresh measures it: every
sampled user's top-10 unseen items explained on both sides (Σ attributions against the score,
``explain.representer.fidelity``). implicit 0.7 (``AlternatingLeastSquares``, its defaults: 15
iterations, float32, 3 CG steps per row on its confidence-weighted objective) is timed on the whole
``fit``, ``--repeats`` times (median), before and after dxplain's fits so that both see the same load.
Both use 2 threads (numba's and implicit's) with BLAS at 1. numba's compiled kernels are loaded by a
two-sweep warm-up first: their one-time cost is stated in docs/scaling.md, not counted here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from benchmarks.als.common import ALS, named_interactions
from benchmarks.common import CACHE, parser
from dxplain.explain.representer import Preprocessed
from dxplain.explain.run_rows import fidelity
from dxplain.explain.targets import recommend
from dxplain.kernels.als import pair_scores
from dxplain.models.als.trainer import ALSMF


def implicit_fit_seconds(data, k: int, threads: int) -> float:
    """Seconds of one implicit ``fit`` at its defaults (15 iterations)."""
    from implicit.cpu.als import AlternatingLeastSquares

    R = sp.csr_matrix((data.rating.astype(np.float32), (data.user, data.item)), shape=(data.n_users, data.n_items))
    model = AlternatingLeastSquares(factors=k, num_threads=threads, random_state=0)
    t0 = time.perf_counter()
    model.fit(R, show_progress=False)
    return time.perf_counter() - t0


def identity_errors(model, data, users: np.ndarray, top_n: int) -> dict:
    """Relative identity error per side over the sampled users' top-N unseen items, as a refresh measures it."""
    pre = Preprocessed.from_model(model, data)
    t = recommend(pre.Ut, pre.Vt, data, users, top_n)
    u, i = t.user.astype(np.intp), t.item.astype(np.intp)
    fid = fidelity(
        pair_scores(pre.A, pre.Vt, u, i), pair_scores(pre.Ut, pre.B, u, i), pair_scores(pre.Ut, pre.Vt, u, i)
    )
    return {
        "targets": int(len(u)),
        **{side: {"max": f["max_rel_error"], "median": f["median_rel_error"]} for side, f in fid.items()},
    }


def main():
    ap = parser(__doc__)
    ap.add_argument("--dataset", default="synthetic-ml1m")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--tols", default="1e-4,1e-6", help="identity tolerances to train to; the last is the headline")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="implicit fits before and after dxplain's (median of all)")
    ap.add_argument("--sample", type=int, default=1000, help="users whose top-10 targets measure the identity")
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    import implicit
    from numba import set_num_threads

    data = named_interactions(a.dataset, Path(a.cache))
    users = np.sort(np.random.default_rng(0).choice(data.n_users, min(a.sample, data.n_users), replace=False))
    set_num_threads(a.threads)
    with threadpool_limits(1, user_api="blas"):
        ALSMF(k=a.k, max_sweeps=2, newton_steps=0).fit(data)  # loads numba's cached kernels
        implicit_s = [implicit_fit_seconds(data, a.k, a.threads) for _ in range(a.repeats)]
        fits = []
        for tol in map(float, a.tols.split(",")):
            t0 = time.perf_counter()
            m = ALSMF(k=a.k, identity_tol=tol).fit(data)
            seconds = time.perf_counter() - t0
            fits.append(
                {
                    "identity_tol": tol,
                    "seconds": round(seconds, 2),
                    "sweeps": m.info["sweeps"],
                    "newton_steps": m.info["newton_iters"],
                    "grad_norm": m.grad_norm,
                    "identity_bound": m.info["identity_bound"],
                    "identity": identity_errors(m, data, users, 10),
                }
            )
            print(json.dumps(fits[-1]), flush=True)
        implicit_s += [implicit_fit_seconds(data, a.k, a.threads) for _ in range(a.repeats)]
    implicit_median = float(np.median(implicit_s))
    for f in fits:
        f["over_implicit"] = round(f["seconds"] / implicit_median, 2)
    out = {
        "dataset": a.dataset,
        "users": data.n_users,
        "items": data.n_items,
        "ratings": len(data),
        "k": a.k,
        "threads": a.threads,
        "implicit": implicit.__version__,
        "implicit_iterations": 15,
        "implicit_fit_seconds": [round(s, 3) for s in implicit_s],
        "implicit_fit_median_s": round(implicit_median, 3),
        "fits": fits,
    }
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "converged_fit.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "fits"}))


if __name__ == "__main__":
    main()
