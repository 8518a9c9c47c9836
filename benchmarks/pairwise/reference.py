"""RAIPair at D = 57 with ~3,700 reference rows (issue 57): seconds per pair on 2 cores with the flow's
512-row reference sample, and the sample's error against the full reference.

Data: the spam-shaped set of ``benchmarks.pairwise.quality`` (4,601 × 57, the flow's 80/20 split: 3,681
training rows), OPAUC fitted on the training rows, (positive, negative) test pairs.

1. ``--pairs`` pairs on a 2-worker LocalCluster (one thread each), reference sample of 512 rows: wall
   seconds per pair; the same pairs in one process (one thread) for the per-core cost.
2. On ``--error-pairs`` of them, in one process, φ with reference samples of 256, 512 and 1,024 rows and
   with every row, the same RAIPair draws (seed) each time: the relative ℓ2 error ‖φ_n − φ_all‖/‖φ_all‖
   and the overlap of the top-5 features, against RAIPair's own spread on the full reference (the same
   pairs with other draws), and seconds per pair at each size.

    python -m benchmarks.pairwise.reference [--pairs 200] [--error-pairs 10]
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import write
from benchmarks.pairwise.quality import spam_shaped
from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.flows.pairwise import REFERENCE_ROWS
from dxplain.mapper import LocalMapper
from dxplain.pairwise.explain import explain_pairs, relative_efficiency_gap
from dxplain.pairwise.models import OPAUC
from dxplain.pairwise.pairs import choose_pairs, split
from dxplain.pairwise.shapley import default_h, default_m, reference


def relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


def top_overlap(a: np.ndarray, b: np.ndarray, k: int = 5) -> float:
    ta, tb = np.argsort(-a, axis=1)[:, :k], np.argsort(-b, axis=1)[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(ta, tb)]))


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--error-pairs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    X, y = spam_shaped(a.seed)
    train, test = split(y, a.seed)
    zeta = OPAUC(seed=a.seed).fit(X[train], y[train])
    i, j = choose_pairs(y[test], a.pairs, "opauc", a.seed)
    Xi, Xj = X[test][i], X[test][j]
    ref = reference(zeta, X[train], rows=REFERENCE_ROWS, seed=a.seed)
    with threadpool_limits(1):
        explain_pairs(zeta, ref, Xi[:2], Xj[:2], "raipair", a.seed, mapper=LocalMapper(), shards=1)  # compile
        t = time.perf_counter()
        phi_local, z_local = explain_pairs(zeta, ref, Xi, Xj, "raipair", a.seed, mapper=LocalMapper(), shards=1)
        local_s = (time.perf_counter() - t) / len(Xi)
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
        mapper = DaskMapper(client)
        explain_pairs(zeta, ref, Xi[:4], Xj[:4], "raipair", a.seed, mapper=mapper, shards=2)  # warm the workers
        t = time.perf_counter()
        phi, z = explain_pairs(zeta, ref, Xi, Xj, "raipair", a.seed, mapper=mapper)
        cluster_s = (time.perf_counter() - t) / len(Xi)
    n = a.error_pairs
    sizes, phis, seconds = (256, 512, 1024, None), {}, {}
    with threadpool_limits(1):
        for rows in sizes:
            r = reference(zeta, X[train], rows=rows, seed=a.seed)
            t = time.perf_counter()
            phis[rows] = explain_pairs(zeta, r, Xi[:n], Xj[:n], "raipair", a.seed, mapper=LocalMapper(), shards=1)[0]
            seconds[rows] = (time.perf_counter() - t) / n
        full = reference(zeta, X[train])
        other = explain_pairs(zeta, full, Xi[:n], Xj[:n], "raipair", a.seed + 1, mapper=LocalMapper(), shards=1)[0]
    exact = phis[None]
    out = {
        "D": ref.D,
        "reference_full": len(train),
        "reference_rows": REFERENCE_ROWS,
        "M": default_m(ref.D),
        "H": default_h(default_m(ref.D)),
        "pairs": len(Xi),
        "cluster_workers": 2,
        "cluster_s_per_pair": cluster_s,
        "local_s_per_pair": local_s,
        "same_as_cluster": bool(np.array_equal(phi, phi_local)),
        "max_relative_efficiency_error": relative_efficiency_gap(phi, z, ref.base),
        "error_pairs": n,
        "sizes": [
            {
                "rows": rows or len(train),
                "s_per_pair": seconds[rows],
                "median_rel_error": float(np.median(relative(phis[rows], exact))) if rows else 0.0,
                "p90_rel_error": float(np.quantile(relative(phis[rows], exact), 0.9)) if rows else 0.0,
                "top5_overlap": top_overlap(phis[rows], exact),
            }
            for rows in sizes
        ],
        "full_other_draws": {
            "median_rel_error": float(np.median(relative(other, exact))),
            "p90_rel_error": float(np.quantile(relative(other, exact), 0.9)),
            "top5_overlap": top_overlap(other, exact),
        },
    }
    print(out)
    write("reference", out)


if __name__ == "__main__":
    main()
