"""Peers for the GAMMLI benchmarks, each fitted on the same split: XGBoost and EBM on the features, SVD
(scikit-surprise) on the ids, a factorisation machine (myFM, Bayesian FM by Gibbs sampling) on ids +
features, the user+item bias baseline and the global mean. Every peer returns predictions on the test
rows (a probability for classification); an unseen user/item falls back to what the peer can do with
it (features for XGBoost/EBM/FM, the global mean plus the known side's bias for SVD and the biases)."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp


def feature_matrix(Xu, Xi, u, i):
    return np.hstack([Xu[u], Xi[i]])


def xgboost_peer(task, Xtr, ytr, Xte, seed=0):
    import xgboost as xgb

    kw = dict(
        n_estimators=400,
        max_depth=6,
        learning_rate=0.05,
        subsample=0.8,
        colsample_bytree=0.8,
        random_state=seed,
        n_jobs=1,
        tree_method="hist",
    )
    if task == "regression":
        return xgb.XGBRegressor(**kw).fit(Xtr, ytr).predict(Xte)
    return xgb.XGBClassifier(**kw).fit(Xtr, ytr).predict_proba(Xte)[:, 1]


def ebm_peer(task, Xtr, ytr, Xte, seed=0):
    from interpret.glassbox import ExplainableBoostingClassifier, ExplainableBoostingRegressor

    cls = ExplainableBoostingRegressor if task == "regression" else ExplainableBoostingClassifier
    m = cls(random_state=seed, n_jobs=1, outer_bags=1)  # 14 by default; 4 took 13 min on ml-100k
    m.fit(Xtr, ytr)
    return m.predict(Xte) if task == "regression" else m.predict_proba(Xte)[:, 1]


def svd_peer(task, u, i, y, ut, it, seed=0):
    import pandas as pd
    from surprise import SVD, Dataset, Reader

    lo, hi = float(y.min()), float(y.max())
    data = Dataset.load_from_df(pd.DataFrame({"u": u, "i": i, "r": y}), Reader(rating_scale=(lo, hi)))
    algo = SVD(random_state=seed).fit(data.build_full_trainset())
    p = np.array([algo.predict(a, b).est for a, b in zip(ut, it)])
    return p if task == "regression" else np.clip(p, 1e-4, 1 - 1e-4)


def fm_peer(task, Xu, Xi, u, i, y, ut, it, n_users, n_items, seed=0, rank=8, iters=300):
    import myfm

    def design(a, b):
        n = len(a)
        ids = sp.csr_matrix(
            (np.ones(2 * n), (np.repeat(np.arange(n), 2), np.ravel(np.column_stack([a, n_users + b])))),
            shape=(n, n_users + n_items),
        )
        return sp.hstack([ids, sp.csr_matrix(feature_matrix(Xu, Xi, a, b))]).tocsr()

    if task == "regression":
        m = myfm.MyFMRegressor(rank=rank, random_seed=seed).fit(
            design(u, i), y, n_iter=iters, n_kept_samples=iters // 2
        )
        return m.predict(design(ut, it))
    m = myfm.MyFMClassifier(rank=rank, random_seed=seed).fit(design(u, i), y, n_iter=iters, n_kept_samples=iters // 2)
    return m.predict_proba(design(ut, it))


def bias_peer(task, u, i, y, ut, it, n_users, n_items, reg=5.0, sweeps=20):
    """μ + b_u + b_i by alternating ridge (λ = reg per bias); unseen ids get bias 0."""
    mu = y.mean()
    bu, bi = np.zeros(n_users), np.zeros(n_items)
    for _ in range(sweeps):
        bu = np.bincount(u, y - mu - bi[i], n_users) / (np.bincount(u, minlength=n_users) + reg)
        bi = np.bincount(i, y - mu - bu[u], n_items) / (np.bincount(i, minlength=n_items) + reg)
    p = mu + bu[ut] + bi[it]
    return p if task == "regression" else np.clip(p, 1e-4, 1 - 1e-4)


def timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, round(time.perf_counter() - t, 2)


def scores(task, y, p):
    """RMSE/MAE, or AUC/log loss of probabilities."""
    from dxplain.kernels import gammli as G

    if task == "regression":
        return {"rmse": float(np.sqrt(np.mean((y - p) ** 2))), "mae": float(np.mean(np.abs(y - p)))}
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return {"auc": G.auc(y, p), "log_loss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))}
