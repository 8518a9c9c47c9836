"""Explanation throughput: batched representer vs a per-pair loop vs plain matmul, in one run.

    python benchmarks/explain_throughput.py --dataset movielens-100k
    python benchmarks/explain_throughput.py --dataset synthetic-5m --users 20000

Counts *scored training interactions*: every (target, training interaction) pair Definition 1 scores
(the user's history for the item side, the item's raters for the user side). All timings use one
BLAS thread, so the figures are per core and the three numbers are comparable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxplain.datasets import resolve_dataset  # noqa: E402
from dxplain.datasets.synthetic import generate  # noqa: E402
from dxplain.explain.representer import Preprocessed, RepresenterExplainer  # noqa: E402
from dxplain.explain.targets import recommend  # noqa: E402
from dxplain.models.mf import ALSMF  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def load(name: str, cache: Path):
    if name.startswith("synthetic-"):
        n = int(float(name.split("-")[1].rstrip("m")) * 1e6)
        folder = cache / name
        if not (folder / "interactions.parquet").exists():
            generate(folder, n, seed=0)
        return resolve_dataset(str(folder))
    return resolve_dataset(name)


def per_pair_loop(data, pre, t, budget_pairs: int) -> tuple[int, float]:
    """Definition 1 one pair at a time (numpy dot per pair), on the first targets until the budget."""
    Vt, Ut, alpha = pre.Vt, pre.Ut, pre.alpha
    done, t0 = 0, time.perf_counter()
    for n in range(len(t)):
        u, j = t.user[n], t.item[n]
        best = []
        for p in range(data.user_indptr[u], data.user_indptr[u + 1]):
            best.append(alpha[p] * np.dot(Vt[data.item[p]], Vt[j]))
        for q in data.item_order[data.item_indptr[j]:data.item_indptr[j + 1]]:
            best.append(alpha[q] * np.dot(Ut[data.user[q]], Ut[u]))
        np.argsort(best)  # the loop also has to rank what it scored
        done += len(best)
        if done >= budget_pairs:
            break
    return done, time.perf_counter() - t0


def stacked_matmul_seconds(data, pre, t) -> float:
    """Plain np.matmul on the very (B, t, k) @ (B, k, d) stacks the explainer forms, data pre-made."""
    from dxplain.kernels import representer as K

    total = 0.0
    ex = RepresenterExplainer(data, pre)
    for side in ("item", "user"):
        g, F = ex.groups(t, side)
        g = K.split_heavy_groups(g)
        for members, d, tt in K.buckets(g, F.shape[1]):
            T, H = np.random.rand(len(members), tt, F.shape[1]), np.random.rand(len(members), F.shape[1], d)
            t0 = time.perf_counter()
            np.matmul(T, H)  # (B, t, k) @ (B, k, d), as in grouped_attributions
            total += time.perf_counter() - t0
    return total


def plain_gemm_gflops(k: int, n: int = 4096) -> float:
    A, B = np.random.rand(n, k), np.random.rand(k, n)
    np.matmul(A, B)
    reps, t0 = 5, time.perf_counter()
    for _ in range(reps):
        np.matmul(A, B)
    return 2 * n * n * k * reps / (time.perf_counter() - t0) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="movielens-100k")
    ap.add_argument("--users", type=int, default=0, help="explain a random sample of users (0 = all)")
    ap.add_argument("--top-n", type=int, default=10)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--loop-pairs", type=int, default=200_000, help="pairs the per-pair loop scores")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "dxplain" / "bench"))
    a = ap.parse_args()
    with threadpool_limits(limits=1, user_api="blas"):
        ds = load(a.dataset, Path(a.cache))
        d = ds.interactions
        # Throughput does not depend on convergence: a short ALS gives realistic factors quickly.
        t0 = time.perf_counter()
        m = ALSMF(k=a.k, max_sweeps=8, polish_iters=0).fit(d)  # default λ = 30/|D|
        train_s = time.perf_counter() - t0
        pre = Preprocessed.from_model(m, d)
        rng = np.random.default_rng(0)
        users = np.sort(rng.choice(d.n_users, a.users, replace=False)) if a.users else np.arange(d.n_users)
        t = recommend(pre.Ut, pre.Vt, d, users, a.top_n)
        ex = RepresenterExplainer(d, pre)
        pairs = int(d.user_degree()[t.user].sum() + d.item_degree()[t.item].sum())
        t0 = time.perf_counter()
        ex.item_side(t, a.top_k)
        ex.user_side(t, a.top_k)
        batched_s = time.perf_counter() - t0
        loop_pairs, loop_s = per_pair_loop(d, pre, t, a.loop_pairs)
        mm_s = stacked_matmul_seconds(d, pre, t)
        r = pre.Ut.shape[1]
        gemm = plain_gemm_gflops(r)
    res = {
        "dataset": a.dataset, "interactions": len(d), "users_explained": int(len(users)), "targets": len(t),
        "k": a.k, "balanced_rank": r, "top_k": a.top_k, "scored_pairs": pairs, "blas_threads": 1,
        "train_seconds_8_sweeps": round(train_s, 2),
        "batched_seconds": round(batched_s, 3),
        "batched_pairs_per_s": pairs / batched_s,
        "loop_pairs_per_s": loop_pairs / loop_s,
        "speedup_vs_loop": (pairs / batched_s) / (loop_pairs / loop_s),
        "batched_gflops": 2 * r * pairs / batched_s / 1e9,
        "stacked_matmul_gflops_same_shapes": 2 * r * pairs / mm_s / 1e9,
        "plain_gemm_gflops_4096": gemm,
    }
    res["fraction_of_same_shape_matmul"] = res["batched_gflops"] / res["stacked_matmul_gflops_same_shapes"]
    res["fraction_of_plain_gemm"] = res["batched_gflops"] / gemm
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"explain_throughput_{a.dataset}.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
