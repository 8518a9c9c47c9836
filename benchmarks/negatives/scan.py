"""Scale: the all-unobserved negative scan of a 40k users × 40k items implicit set (1.6·10⁹ pairs, k = 64).

    python -m benchmarks.negatives.scan                        # 40k × 40k, 1M positives, k = 64, p = 1%
    python -m benchmarks.negatives.scan --users 4000 --items 4000 --positives 100000   # a quick look

The model is BCE MF trained on sampled negatives (4 per positive, a short L-BFGS run: throughput does
not depend on convergence); the scan then scores *every* unobserved pair with the representer's
aggregated importance and keeps the lowest p% on a 2-worker LocalCluster (1 BLAS thread each).
In the same run it times plain float32 matmuls of the scan's block shapes on one core — the rate
the three products of a block (scores, ⟨R_i, Q_j⟩) would reach with nothing else to do — and reads
each worker's peak RSS. Writes benchmarks/results/negatives/scan.json.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import CACHE, RESULTS, parser, peak_rss_gib
from dxplain.config import Settings
from dxplain.datasets import resolve_dataset
from dxplain.datasets.synthetic import generate
from dxplain.distributed.cluster import connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.explain import negatives as N
from dxplain.kernels.negatives import scan_rows
from dxplain.models.implicit_mf import ImplicitMF, dense_terms, positive_pairs, sample_negatives, sparse_terms


def matmul_pairs_per_second(n_items: int, k: int, reps: int = 20) -> tuple[float, float]:
    """(pairs/s, GFLOP/s) of bare float32 block products S = U_b Vᵀ and L = R_b Qᵀ on one core."""
    rows = scan_rows(n_items)
    rng = np.random.default_rng(0)
    Ub, V = rng.random((rows, k), np.float32), rng.random((n_items, k), np.float32)
    Rb, Q = rng.random((rows, 2 * k), np.float32), rng.random((n_items, 2 * k), np.float32)
    with threadpool_limits(1, "blas"):
        Ub @ V.T, Rb @ Q.T
        t0 = time.perf_counter()
        for _ in range(reps):
            Ub @ V.T
            Rb @ Q.T
        dt = (time.perf_counter() - t0) / reps
    return rows * n_items / dt, 2 * rows * n_items * 3 * k / dt / 1e9


def main():
    ap = parser(__doc__)
    ap.add_argument("--users", type=int, default=40_000, help="users of the generated implicit set")
    ap.add_argument("--items", type=int, default=40_000, help="items of the generated implicit set")
    ap.add_argument("--positives", type=int, default=1_000_000, help="its interactions, every one a positive")
    ap.add_argument("--k", type=int, default=64, help="factors of the BCE MF model")
    ap.add_argument("--percent", type=float, default=1.0, help="share of the unobserved pairs flagged (p)")
    ap.add_argument("--workers", type=int, default=2, help="workers of the LocalCluster")
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    folder = Path(a.cache) / f"implicit-{a.users}x{a.items}-{a.positives}"
    if not (folder / "interactions.parquet").exists():
        generate(folder, a.positives, n_users=a.users, n_items=a.items, seed=0)
    P = positive_pairs(resolve_dataset(str(folder)).interactions, None)  # every interaction is a positive
    t0 = time.perf_counter()
    with threadpool_limits(2, "blas"):
        nu, ni = sample_negatives(P, 4, seed=0)
        m = ImplicitMF(k=a.k, lbfgs_steps=30, newton_steps=0).fit(sparse_terms(P, nu, ni, 0.05))
    train_s = time.perf_counter() - t0
    terms = dense_terms(P, 0.05)  # the scan: every unobserved pair
    score = N.negative_score("representer", m, terms, P)
    pairs = terms.n_users * terms.n_items
    with connect(Settings.from_env(workers=a.workers, blas_threads=1)) as client:
        t0 = time.perf_counter()
        v, u, i = N.select_lowest(score, terms, a.percent, DaskMapper(client), n_shards=8 * a.workers)
        scan_s = time.perf_counter() - t0
        worker_rss = client.run(peak_rss_gib)
    mm_pairs, mm_gflops = matmul_pairs_per_second(terms.n_items, m.k)
    res = {
        "users": terms.n_users,
        "items": terms.n_items,
        "pairs": pairs,
        "positives": terms.n_pos,
        "k": m.k,
        "percent": a.percent,
        "flagged": len(v),
        "workers": a.workers,
        "blas_threads_per_worker": 1,
        "train_seconds_sampled_30_lbfgs": round(train_s, 1),
        "scan_seconds": round(scan_s, 1),
        "pairs_per_second": pairs / scan_s,
        "pairs_per_second_per_worker": pairs / scan_s / a.workers,
        "bare_matmul_pairs_per_second_one_core": mm_pairs,
        "bare_matmul_gflops_one_core": mm_gflops,
        "scan_gflops_per_worker": 2 * 3 * m.k * pairs / scan_s / a.workers / 1e9,
        "fraction_of_matmul_rate": (pairs / scan_s / a.workers) / mm_pairs,
        "peak_rss_gib_per_worker": {str(w): round(x, 2) for w, x in worker_rss.items()},
        "peak_rss_gib_client": round(peak_rss_gib(), 2),
        "lowest_score": float(v[0]) if len(v) else None,
    }
    (RESULTS / "negatives").mkdir(parents=True, exist_ok=True)
    (RESULTS / "negatives" / "scan.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
