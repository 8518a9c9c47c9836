"""Biased MF against its peers on ml-100k: test RMSE and fit seconds, settings chosen on validation only.

    python -m benchmarks.als.biased_vs_peers          # writes benchmarks/results/als/biased_vs_peers.json

Protocol: one seeded random 80/10/10 split of the ratings (train/validation/test; ``--seed``, the split of
``benchmarks.als.select_lambda``). A setting is chosen by fitting on train and scoring RMSE on validation; the
final model of every row is then fitted on train + validation and scored on test, so every row sees the same
rows and none sees test before it is scored:

- user + item biases: μ + b_u + b_i by ridge (``common.fit_biases``), its ``reg`` chosen on validation;
- dxplain plain MF: ``ALSMF()``, the default (k = 32, ridge λ|D|/2 = 15), nothing chosen;
- dxplain biased MF: ``models.biased_select.select`` over ``--ks`` × ``--ridges`` × ``--bias-ridges`` (ridges
  λ|D|/2 and λ_b|D|/2 of the final fit), the validation rows given as its holdout, refitted on train + validation;
- surprise SVD with its defaults (100 factors, 20 epochs of SGD, lr 0.005, reg 0.02; predictions clipped to
  the rating scale, as surprise does).

Test RMSE is reported as each model predicts and clipped to the rating scale (1–5), which is what surprise
returns. Fit seconds are the final fit's (the selection's total is beside it). At the selected biased model
the identity is measured on every user's top-10 (both sides, bias rows included). Threads: whatever
OMP_NUM_THREADS/NUMBA_NUM_THREADS say (recorded); surprise is single-threaded.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from benchmarks.als.common import ALS, fit_biases, rmse
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.explain.biased import BiasedExplainer
from dxplain.explain.targets import recommend
from dxplain.models.als.trainer import ALSMF
from dxplain.models.biased_select import select

BIAS_REGS = (1, 3, 5, 10, 20, 40)


def scored(pred, te, seconds, **extra) -> dict:
    lo, hi = te.rating.min(), te.rating.max()
    return {
        "test_rmse": rmse(pred, te.rating),
        "test_rmse_clipped": rmse(np.clip(pred, lo, hi), te.rating),
        "fit_seconds": round(seconds, 2),
        **extra,
    }


def surprise_svd(tv, te, seed: int):
    """surprise's SVD with its defaults, fitted on ``tv`` (its ids as they are), predicting ``te``."""
    import pandas as pd
    import surprise
    from surprise import SVD, Dataset, Reader

    frame = pd.DataFrame({"u": tv.user, "i": tv.item, "r": tv.rating})
    lo, hi = float(tv.rating.min()), float(tv.rating.max())
    trainset = Dataset.load_from_df(frame, Reader(rating_scale=(lo, hi))).build_full_trainset()
    t0 = time.perf_counter()
    algo = SVD(random_state=seed).fit(trainset)
    seconds = time.perf_counter() - t0
    pred = np.array([algo.predict(int(u), int(i)).est for u, i in zip(te.user, te.item)])
    return pred, seconds, surprise.__version__


def main():
    ap = parser(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ks", default="16,32,64")
    ap.add_argument("--ridges", default="10,15,20")
    ap.add_argument("--bias-ridges", default="1,3,10")
    a = ap.parse_args()
    d = resolve_dataset("movielens-100k").interactions
    part = np.random.default_rng(a.seed).choice(3, size=len(d), p=[0.8, 0.1, 0.1])
    tr, va, te = d.subset(part == 0), d.subset(part == 1), d.subset(part == 2)
    tv = d.subset(part != 2)
    holdout = part[part != 2] == 1  # the validation rows inside train + validation
    n = len(tv)
    out = {
        "dataset": "movielens-100k",
        "split": "random 80/10/10",
        "seed": a.seed,
        "train": len(tr),
        "validation": len(va),
        "test": len(te),
        "threads": {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
        "rows": {},
    }

    val = {reg: rmse(fit_biases(tr, reg)(va.user, va.item), va.rating) for reg in BIAS_REGS}
    reg = min(val, key=val.get)
    t0 = time.perf_counter()
    fb = fit_biases(tv, reg)
    out["rows"]["biases"] = scored(fb(te.user, te.item), te, time.perf_counter() - t0, reg=reg, val_rmse=val[reg])
    print("biases", out["rows"]["biases"], flush=True)

    m = ALSMF().fit(tv)
    out["rows"]["plain_mf"] = scored(
        m.predict(te.user, te.item), te, m.info["seconds"], k=m.k, lam=m.lam, grad_norm=m.grad_norm
    )
    print("plain MF", out["rows"]["plain_mf"], flush=True)

    ks = [int(x) for x in a.ks.split(",")]
    lams = [2 * float(r) / n for r in a.ridges.split(",")]
    lam_biases = [2 * float(r) / n for r in a.bias_ridges.split(",")]
    t0 = time.perf_counter()
    m = select(tv, ks=ks, lams=lams, lam_biases=lam_biases, seed=a.seed, holdout=holdout)
    selection_seconds = time.perf_counter() - t0
    sel = m.settings["selected"]
    e = BiasedExplainer(m, tv)
    t = recommend(m.U, m.V, tv, np.arange(tv.n_users), 10)
    fidelity = {side: v["max_rel_error"] for side, v in e.fidelity(t).items()}
    out["rows"]["biased_mf"] = scored(
        m.predict(te.user, te.item),
        te,
        m.info["seconds"],
        k=sel["k"],
        lam=sel["lam"],
        ridge=sel["lam"] * n / 2,
        lam_bias=sel["lam_bias"],
        bias_ridge=sel["lam_bias"] * n / 2,
        val_rmse=sel["val_rmse"],
        selection_seconds=round(selection_seconds, 1),
        sweeps=m.info["sweeps"],
        newton_iters=m.info["newton_iters"],
        miss_bound=m.info["miss_bound"],
        identity_top10_max_rel_error=fidelity,
        grid=[row | {"ridge": row["lam"] * n / 2, "bias_ridge": row["lam_bias"] * n / 2} for row in sel["grid"]],
    )
    print("biased MF", {k: v for k, v in out["rows"]["biased_mf"].items() if k != "grid"}, flush=True)

    pred, seconds, version = surprise_svd(tv, te, a.seed)
    out["rows"]["surprise_svd"] = scored(pred, te, seconds, version=version)
    print("surprise SVD", out["rows"]["surprise_svd"], flush=True)

    r = out["rows"]
    out["acceptance"] = {
        "biased_le_biases": r["biased_mf"]["test_rmse"] <= r["biases"]["test_rmse"],
        "biased_le_surprise_svd": r["biased_mf"]["test_rmse"] <= r["surprise_svd"]["test_rmse"],
    }
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "biased_vs_peers.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out["acceptance"]))


if __name__ == "__main__":
    main()
