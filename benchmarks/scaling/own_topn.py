"""dxplain's own top-10 on a trained model: dense reference, norm-ordered scan, and an HNSW index.

    python -m benchmarks.scaling.own_topn --size 20m          # the scaling benchmark's 20M set and its stored model

Reads the set and the model a ``benchmarks/scaling/refresh.py`` run stored (``--cache``, as there). On a random
sample of users, with one BLAS thread and one faiss thread, it times:

- ``dense``: ``kernels.topn.top_n_unseen``, every user block against every item (the path before);
- ``scan``: ``top_n_unseen_pruned`` (exact: the same items, checked here on the sample), and the shares
  of the user × item scores it computed exactly in blocks, bounded, and computed as the bound's candidates;
- ``hnsw``: faiss's HNSW graph with the inner product (``explain.ann``'s index), asked for
  10 + |seen| items per user (seen ones dropped), the candidates re-scored exactly; recall is against the
  exact top-10 on the first 1,000 sampled users. Its build time is reported apart from the queries.

Per-user seconds × users gives the whole set's single-core cost. Results go to
``benchmarks/results/scaling/own_topn.json`` (one entry per size), rendered into docs/scaling.md by
``benchmarks.render``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import CACHE, parser
from benchmarks.scaling.common import SCALING, SIZES
from dxplain.datasets import resolve_dataset
from dxplain.explain.representer import Preprocessed
from dxplain.kernels import topn
from dxplain.kernels.representer import ELEMENT_BUDGET
from dxplain.models.base import FactorModel

OWN_TOPN = SCALING / "own_topn.json"
N = 10


def seen_of(d, users):
    pos, ptr = d.user_positions(users)
    return ptr, d.item[pos].astype(np.intp)


def dense(Ut, Vt, d, users):
    block = max(1, ELEMENT_BUDGET // d.n_items)
    return np.concatenate(
        [topn.top_n_unseen(Ut[b], Vt, *seen_of(d, b), N)[0] for b in np.array_split(users, -(-len(users) // block))]
    )


def scan(Ut, Vt, d, users):
    """The scan's items, and the shares of the user × item scores it computed exactly in blocks, bounded,
    and computed exactly as the bound's candidates."""
    stats = {}
    order = topn.NormOrder.of(Vt)
    block = max(1, ELEMENT_BUDGET // topn.FIRST_ITEM_SLICE)
    items = np.concatenate(
        [
            topn.top_n_unseen_pruned(Ut[b], order, *seen_of(d, b), N, ELEMENT_BUDGET, stats)[0]
            for b in np.array_split(users, -(-len(users) // block))
        ]
    )
    return items, {k: round(v / (len(users) * d.n_items), 4) for k, v in stats.items()}


def hnsw(Ut, Vt, d, users, ef_search: int, index=None):
    """Top-10 unseen from an HNSW inner-product graph: 10 + |seen| neighbours per user (users grouped by
    that count in powers of two), seen ones dropped, ranked by the inner products faiss returns (exact
    for the items found), ties by index as the exact paths."""
    import faiss

    if index is None:
        index = faiss.IndexHNSWFlat(Vt.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.add(np.ascontiguousarray(Vt, np.float32))
    ptr, seen = seen_of(d, users)
    seen_key = np.sort(np.repeat(np.arange(len(users)), np.diff(ptr)) * d.n_items + seen)
    want = np.minimum(2 ** np.ceil(np.log2(N + np.diff(ptr))).astype(int), d.n_items)
    out = np.full((len(users), N), -1)
    for m in np.unique(want):
        rows = np.flatnonzero(want == m)
        index.hnsw.efSearch = max(ef_search, int(m))
        score, found = index.search(np.ascontiguousarray(Ut[users[rows]], np.float32), int(m))
        key = rows[:, None] * d.n_items + found
        at = np.minimum(np.searchsorted(seen_key, key), max(len(seen_key) - 1, 0))
        score[(found < 0) | (seen_key[at] == key if len(seen_key) else False)] = -np.inf
        out[rows] = topn._top_n_rows(score, found, N)[0]
    return out, index


def recall(got, exact):
    hits = [len(np.intersect1d(g[g >= 0], e[e >= 0])) for g, e in zip(got, exact)]
    return float(np.sum(hits) / max(1, np.sum(exact >= 0)))


def timed(f, *args):
    t0 = time.perf_counter()
    r = f(*args)
    return r, time.perf_counter() - t0


def main():
    ap = parser(__doc__)
    ap.add_argument("--size", default="20m", choices=list(SIZES))
    ap.add_argument("--users", type=int, default=20_000, help="sampled users timed by each method")
    ap.add_argument("--recall-users", type=int, default=1_000)
    ap.add_argument("--ef", default="64,256", help="HNSW efSearch values")
    ap.add_argument("--cache", default=str(CACHE))
    a = ap.parse_args()
    folder = Path(a.cache) / f"scaling-{SIZES[a.size]}"
    d = resolve_dataset(str(folder)).interactions
    (model,) = sorted((Path(a.cache) / "scaling-runs" / a.size / "models").glob("*"))[-1:]
    pre = Preprocessed.from_model(FactorModel.load(str(model), d), d)
    users = np.sort(np.random.default_rng(0).choice(d.n_users, min(a.users, d.n_users), replace=False))
    with threadpool_limits(1):
        import faiss

        faiss.omp_set_num_threads(1)
        exact, t_dense = timed(dense, pre.Ut, pre.Vt, d, users)
        (found, shares), t_scan = timed(scan, pre.Ut, pre.Vt, d, users)
        sample = users[: a.recall_users]
        ann, index = [], None
        for ef in map(int, a.ef.split(",")):
            if index is None:
                (_, index), t_build = timed(hnsw, pre.Ut, pre.Vt, d, sample[:1], ef)
            (got, _), t_query = timed(hnsw, pre.Ut, pre.Vt, d, sample, ef, index)
            ann.append(
                {
                    "ef_search": ef,
                    "recall": recall(got, exact[: len(sample)]),
                    "us_per_user": round(t_query * 1e6 / len(sample), 1),
                }
            )
    norms = np.linalg.norm(pre.Vt, axis=1)
    row = {
        "size": a.size,
        "interactions": len(d),
        "users": d.n_users,
        "items": d.n_items,
        "k": pre.Vt.shape[1],
        "sampled_users": len(users),
        "scan_equals_dense": bool(np.array_equal(found, exact)),
        "users_differing": int((found != exact).any(axis=1).sum()),
        "dense_us_per_user": round(t_dense * 1e6 / len(users), 1),
        "scan_us_per_user": round(t_scan * 1e6 / len(users), 1),
        "scan_shares": shares,
        "item_norm_quantiles": [round(float(q), 3) for q in np.quantile(norms, [0, 0.5, 0.9, 0.99, 1])],
        "hnsw_build_s": round(t_build, 1),
        "hnsw": ann,
    }
    print(json.dumps(row), flush=True)
    rows = json.loads(OWN_TOPN.read_text()) if OWN_TOPN.exists() else []
    rows = sorted([r for r in rows if r["size"] != a.size] + [row], key=lambda r: r["interactions"])
    OWN_TOPN.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
