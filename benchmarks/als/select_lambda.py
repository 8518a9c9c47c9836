"""Pick the default λ of ALS-MF on a validation split of ml-100k; report test RMSE against baselines.

    python -m benchmarks.als.select_lambda            # writes benchmarks/results/als/select_lambda.json

Protocol: one seeded random 80/10/10 split of the ratings (train/validation/test). For each λ of the
grid (k = 32) the model is trained to the gradient-norm tolerance on train; λ with the lowest
validation RMSE is the default. Baselines: the global mean, and user + item biases
(μ + b_u + b_i, ridge-regularised, its regulariser also picked on validation).
"""

from __future__ import annotations

import json
import time

import numpy as np

from benchmarks.als.common import ALS, fit_biases, rmse
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.models.als.trainer import ALSMF


def main():
    ap = parser(__doc__)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--lams", default="1e-4,2e-4,3e-4,4e-4,6e-4,1e-3,2e-3")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    d = resolve_dataset("movielens-100k").interactions
    rng = np.random.default_rng(a.seed)
    part = rng.choice(3, size=len(d), p=[0.8, 0.1, 0.1])
    tr, va, te = d.subset(part == 0), d.subset(part == 1), d.subset(part == 2)
    out = {
        "split": "random 80/10/10",
        "seed": a.seed,
        "k": a.k,
        "train": len(tr),
        "validation": len(va),
        "test": len(te),
        "grid": [],
    }
    out["global_mean"] = {"val_rmse": rmse(tr.rating.mean(), va.rating), "test_rmse": rmse(tr.rating.mean(), te.rating)}
    best_b = min((rmse(fit_biases(tr, r)(va.user, va.item), va.rating), r) for r in (1, 3, 5, 10, 20, 40))
    fb = fit_biases(tr, best_b[1])
    out["user_item_biases"] = {
        "reg": best_b[1],
        "val_rmse": best_b[0],
        "test_rmse": rmse(fb(te.user, te.item), te.rating),
    }
    for lam in map(float, a.lams.split(",")):
        t0 = time.perf_counter()
        m = ALSMF(k=a.k, lam=lam, seed=a.seed).fit(tr)
        sv = np.linalg.svd(m.U, compute_uv=False)  # effective rank: factor columns that did not collapse to 0
        row = {
            "lam": lam,
            "val_rmse": rmse(m.predict(va.user, va.item), va.rating),
            "test_rmse": rmse(m.predict(te.user, te.item), te.rating),
            "grad_norm": m.grad_norm,
            "effective_rank": int(np.sum(sv > 1e-6)),
            "sweeps": m.info["sweeps"],
            "newton_iters": m.info["newton_iters"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        out["grid"].append(row)
        print(json.dumps(row), flush=True)
    best = min(out["grid"], key=lambda r: r["val_rmse"])
    out["chosen"] = best
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "select_lambda.json").write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in out.items() if k != "grid"}, indent=2))


if __name__ == "__main__":
    main()
