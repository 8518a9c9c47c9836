"""10⁴ Ionosphere pairs with RAIPair on a 2-worker LocalCluster (pairs per second), against shap's
KernelExplainer on a sample of the same pairs (one process).

The pairs are (positive, negative) pairs drawn from all 351 rows (the 20% test split has only ~1,100);
the reference is the seed's 80% training split and OPAUC is fitted on it.

    python -m benchmarks.pairwise.cluster [--pairs 10000] [--shap-sample 100]
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import shap_values, uci, write
from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.mapper import LocalMapper
from dxplain.pairwise.explain import explain_pairs
from dxplain.pairwise.models import OPAUC
from dxplain.pairwise.pairs import choose_pairs, split
from dxplain.pairwise.shapley import default_h, default_m, reference


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--shap-sample", type=int, default=100)
    ap.add_argument("--local-sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cluster", action="store_true", help="in-process throughput only (no LocalCluster)")
    a = ap.parse_args()
    X, y, _ = uci("ionosphere")
    train, _ = split(y, a.seed)
    zeta = OPAUC(seed=a.seed).fit(X[train], y[train])
    ref = reference(zeta, X[train])
    i, j = choose_pairs(y, a.pairs, "opauc", a.seed)
    Xi, Xj = X[i], X[j]
    n = a.local_sample
    t = time.perf_counter()
    with threadpool_limits(1):
        phi_local, z_local = explain_pairs(zeta, ref, Xi[:n], Xj[:n], "raipair", a.seed, mapper=LocalMapper(), shards=1)
    local_s = time.perf_counter() - t
    if a.no_cluster:
        phi, z, cluster_s, rss = phi_local, z_local, float("nan"), {}
    else:
        with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
            mapper = DaskMapper(client)
            t = time.perf_counter()
            phi, z = explain_pairs(zeta, ref, Xi, Xj, "raipair", a.seed, mapper=mapper, shards=40)
            cluster_s = time.perf_counter() - t
            rss = mapper.peak_rss_mib()
    s = a.shap_sample
    t = time.perf_counter()
    with threadpool_limits(1):
        shap_values("kernel", zeta, X[train], Xi[:s], Xj[:s], a.seed)
    shap_s = time.perf_counter() - t
    out = {
        "pairs": len(i) if not a.no_cluster else 0,
        "D": ref.D,
        "reference": len(train),
        "M": default_m(ref.D),
        "H": default_h(default_m(ref.D)),
        "cluster_workers": 0 if a.no_cluster else 2,
        "cluster_seconds": cluster_s,
        "cluster_pairs_per_s": len(i) / cluster_s,
        "local_sample": n,
        "local_pairs_per_s": n / local_s,
        "same_as_cluster_on_sample": bool(np.array_equal(phi_local, phi[:n])),
        "shap_kernel_sample": s,
        "shap_kernel_pairs_per_s": s / shap_s,
        "peak_rss_mib": rss,
        "max_efficiency_gap_raipair": float(np.max(np.abs(phi.sum(1) - (z - ref.base)))),
    }
    print(out)
    write("cluster" if not a.no_cluster else "cluster_local", out)


if __name__ == "__main__":
    main()
