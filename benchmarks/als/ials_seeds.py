"""iALS against implicit's ALS over several seeded splits of ml-100k binarised: test recall@20 per split, one run.

    python -m benchmarks.als.ials_seeds               # seeds 0-4, ~15 min on one core

``benchmarks.als.ials_vs_implicit``'s quality part (the same split rule, grid, protocol and selection on validation)
for the two models it compares for the acceptance, implicit's ALS and dxplain's iALS, on each of ``--seeds``: the
ratio moves from split to split with the split's test users, so it is reported per split and as the mean over them.
One thread everywhere, as there. Writes benchmarks/results/als/ials_seeds.json.
"""

from __future__ import annotations

import json

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.als import implicit_peers as pe
from benchmarks.als.common import ALS
from benchmarks.als.ials_vs_implicit import ALPHAS, LAMS, select
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.models.ials import IALS

TARGET = 0.98


def main():
    ap = parser(__doc__)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    a = ap.parse_args()
    import implicit
    from numba import set_num_threads

    set_num_threads(1)
    P = pe.binarised(resolve_dataset("movielens-100k").interactions)
    grid = [{"lam": lam, "alpha": al} for lam in LAMS for al in ALPHAS]
    splits = []
    with threadpool_limits(1):
        IALS(k=8, max_sweeps=2).fit(P)  # loads numba's compiled kernels
        for seed in (int(s) for s in a.seeds.split(",")):
            train, val, test = pe.split_per_user(P, seed)
            fitset = pe.union(train, val)
            row = {"seed": seed}
            for key, name, fit in (
                ("implicit", "implicit ALS", pe.implicit_als),
                ("dxplain", "dxplain iALS", pe.dxplain_ials),
            ):
                m, _ = select(name, fit, grid, train, val, fitset, test)
                row[key] = {f: m[f] for f in ("chosen", "val_recall", "test_recall", "test_ndcg", "test_users")}
            row["ratio"] = row["dxplain"]["test_recall"] / row["implicit"]["test_recall"]
            splits.append(row)
            print(json.dumps(row), flush=True)
    ratios = [s["ratio"] for s in splits]
    out = {
        "implicit": implicit.__version__,
        "k": 32,
        "n": 20,
        "threads": 1,
        "target": TARGET,
        "splits": splits,
        "mean_ratio": float(np.mean(ratios)),
        "min_ratio": float(np.min(ratios)),
        "splits_at_target": int(sum(r >= TARGET for r in ratios)),
    }
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "ials_seeds.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "splits"}))


if __name__ == "__main__":
    main()
