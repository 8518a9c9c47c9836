"""Explanation throughput: the fused (numba) and the numpy representer vs a per-pair loop vs plain matmul, in one run.

    python -m benchmarks.scaling.explain_throughput --dataset movielens-100k
    python -m benchmarks.scaling.explain_throughput --dataset synthetic-5m --users 2000

Counts *scored training interactions*: every (target, training interaction) pair Definition 1 scores
(the user's history for the item side, the item's raters for the user side). All timings use one
BLAS thread, so the figures are per core and the numbers are comparable; each is the best of
``--repeats`` (the machine is shared). The numba kernel's one-time compile is timed in fresh
processes, with an empty and with a filled cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import CACHE, ROOT, parser
from benchmarks.scaling.common import SCALING, named_dataset
from dxplain.explain.representer import Preprocessed, RepresenterExplainer
from dxplain.explain.targets import recommend
from dxplain.models.als.trainer import ALSMF


def per_pair_loop(data, pre, t, budget_pairs: int) -> tuple[int, float]:
    """Definition 1 one pair at a time (numpy dot per pair), on the first targets until the budget."""
    Vt, Ut, alpha = pre.Vt, pre.Ut, pre.alpha
    done, t0 = 0, time.perf_counter()
    for n in range(len(t)):
        u, j = t.user[n], t.item[n]
        best = []
        for p in range(data.user_indptr[u], data.user_indptr[u + 1]):
            best.append(alpha[p] * np.dot(Vt[data.item[p]], Vt[j]))
        for q in data.item_order[data.item_indptr[j] : data.item_indptr[j + 1]]:
            best.append(alpha[q] * np.dot(Ut[data.user[q]], Ut[u]))
        np.argsort(best)  # the loop also has to rank what it scored
        done += len(best)
        if done >= budget_pairs:
            break
    return done, time.perf_counter() - t0


def explain_seconds(ex, t, top_k: int, fused: bool, repeats: int) -> float:
    """Best of ``repeats`` timings of both sides' top-k attributions, by the fused or the numpy path."""
    from dxplain.kernels import representer as K

    was, K.FUSED = K.FUSED, fused
    try:
        ex.item_side(t, top_k)  # warm: numba loads its cache, numpy its buffers
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            ex.item_side(t, top_k)
            ex.user_side(t, top_k)
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        K.FUSED = was


COMPILE_PROBE = """
import time, numpy as np
t0 = time.perf_counter()
from dxplain.kernels.representer import Groups, fused_attributions
g = Groups(np.array([0, 3]), np.arange(3), np.arange(3), np.array([0, 1]), np.arange(1), np.array([0]))
fused_attributions(g, np.ones(3), np.eye(3), np.eye(3), 1)
print(time.perf_counter() - t0)
"""


def compile_seconds() -> tuple[float, float]:
    """Import + first call of the fused kernel in a fresh process: with an empty numba cache, then cached."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        run = [sys.executable, "-c", COMPILE_PROBE]
        cold, warm = (
            float(subprocess.run(run, env=env, check=True, capture_output=True, text=True).stdout) for _ in range(2)
        )
    return cold, warm


def stacked_matmul_seconds(data, pre, t, repeats: int) -> float:
    """Plain np.matmul on the very (B, t, k) @ (B, k, d) stacks the explainer forms, data pre-made."""
    from dxplain.kernels import representer as K

    total = 0.0
    ex = RepresenterExplainer(data, pre)
    for side in ("item", "user"):
        g, F = ex.groups(t, side)
        g = K.split_heavy_groups(g)
        for members, d, tt in K.buckets(g, F.shape[1]):
            T, H = np.random.rand(len(members), tt, F.shape[1]), np.random.rand(len(members), F.shape[1], d)
            best = np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                np.matmul(T, H)  # (B, t, k) @ (B, k, d), as in grouped_attributions
                best = min(best, time.perf_counter() - t0)
            total += best
    return total


def plain_gemm_gflops(k: int, n: int = 4096) -> float:
    A, B = np.random.rand(n, k), np.random.rand(k, n)
    np.matmul(A, B)
    reps, t0 = 5, time.perf_counter()
    for _ in range(reps):
        np.matmul(A, B)
    return 2 * n * n * k * reps / (time.perf_counter() - t0) / 1e9


def main():
    ap = parser(__doc__)
    ap.add_argument("--dataset", default="movielens-100k")
    ap.add_argument("--users", type=int, default=0, help="explain a random sample of users (0 = all)")
    ap.add_argument("--top-n", type=int, default=10)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--loop-pairs", type=int, default=200_000, help="pairs the per-pair loop scores")
    ap.add_argument("--repeats", type=int, default=3, help="timings per path; the best is kept")
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    with threadpool_limits(limits=1, user_api="blas"):
        ds = named_dataset(a.dataset, Path(a.cache))
        d = ds.interactions
        # Throughput does not depend on convergence: a short ALS gives realistic factors quickly.
        t0 = time.perf_counter()
        m = ALSMF(k=a.k, max_sweeps=8, newton_steps=0).fit(d)  # default λ = 30/|D|
        train_s = time.perf_counter() - t0
        pre = Preprocessed.from_model(m, d)
        rng = np.random.default_rng(0)
        users = np.sort(rng.choice(d.n_users, a.users, replace=False)) if a.users else np.arange(d.n_users)
        t = recommend(pre.Ut, pre.Vt, d, users, a.top_n)
        ex = RepresenterExplainer(d, pre)
        pairs = int(d.user_degree()[t.user].sum() + d.item_degree()[t.item].sum())
        batched_s = explain_seconds(ex, t, a.top_k, False, a.repeats)
        fused_s = explain_seconds(ex, t, a.top_k, True, a.repeats)
        loop_pairs, loop_s = per_pair_loop(d, pre, t, a.loop_pairs)
        mm_s = stacked_matmul_seconds(d, pre, t, a.repeats)
        r = pre.Ut.shape[1]
        gemm = plain_gemm_gflops(r)
    cold_s, cached_s = compile_seconds()
    res = {
        "dataset": a.dataset,
        "interactions": len(d),
        "users_explained": int(len(users)),
        "targets": len(t),
        "k": a.k,
        "balanced_rank": r,
        "top_k": a.top_k,
        "scored_pairs": pairs,
        "blas_threads": 1,
        "train_seconds_8_sweeps": round(train_s, 2),
        "repeats": a.repeats,
        "batched_seconds": round(batched_s, 4),
        "batched_pairs_per_s": pairs / batched_s,
        "loop_pairs_per_s": loop_pairs / loop_s,
        "speedup_vs_loop": (pairs / batched_s) / (loop_pairs / loop_s),
        "batched_gflops": 2 * r * pairs / batched_s / 1e9,
        "stacked_matmul_gflops_same_shapes": 2 * r * pairs / mm_s / 1e9,
        "plain_gemm_gflops_4096": gemm,
    }
    res["fraction_of_same_shape_matmul"] = res["batched_gflops"] / res["stacked_matmul_gflops_same_shapes"]
    res["fraction_of_plain_gemm"] = res["batched_gflops"] / gemm
    res.update(
        {
            "fused_seconds": round(fused_s, 4),
            "fused_pairs_per_s": pairs / fused_s,
            "fused_gflops": 2 * r * pairs / fused_s / 1e9,
            "fused_speedup_vs_numpy": batched_s / fused_s,
            "fused_fraction_of_same_shape_matmul": 2
            * r
            * pairs
            / fused_s
            / 1e9
            / res["stacked_matmul_gflops_same_shapes"],
            "fused_fraction_of_plain_gemm": 2 * r * pairs / fused_s / 1e9 / gemm,
            "numba_first_call_seconds_cold_cache": round(cold_s, 2),
            "numba_first_call_seconds_cached": round(cached_s, 2),
        }
    )
    SCALING.mkdir(parents=True, exist_ok=True)
    (SCALING / f"explain_throughput_{a.dataset}.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
