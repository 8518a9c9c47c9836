"""MovieLens-100k with its features: GAMMLI against the project's plain MF, the bias baseline and the peers.

    python -m benchmarks.gammli.data                       # the split (bench-data/ml100k)
    flock /tmp/dxplain-heavy.lock nice -n 5 python -m benchmarks.gammli.ml100k

Same files as the CLI contract run: ``train.parquet`` (80% of the ratings of 90% of the users) and
``test.parquet`` (the other 20% = warm, plus every rating of the held-out 10% of users = cold). No tuning
on the test file: GAMMLI chooses s₁, s₂, K, L, λ on a validation share of the training rows; the plain MF
is ``ALSMF`` with its defaults (k = 32, λ = 2·15/|D|). Writes ``benchmarks/results/gammli/ml100k.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

import benchmarks.gammli.peers as P
from benchmarks.common import RESULTS, ROOT, parser
from dxplain.gammli.fit import Config, fit_gammli
from dxplain.gammli.model import index_pairs
from dxplain.interactions import Interactions
from dxplain.io.features import read_features
from dxplain.models.als.trainer import ALSMF

PAPER_ML1M = {"GAMMLI": 0.9187, "FM": 0.8584, "XGBoost": 1.0622, "SVD": 1.1373}


def onehot_matrix(ft):
    """Numeric columns scaled to [0, 1] and categorical ones one-hot: what the feature-based peers see."""
    cols = [(x - x.min()) / max(x.max() - x.min(), 1e-12) for x in ft.numeric.values()]
    for x in ft.categorical.values():
        levels = sorted(set(x.tolist()))
        cols += [(x == lv).astype(float) for lv in levels]
    return np.column_stack(cols)


def plain_mf(u, i, y, ut, it, n_users, n_items, seed):
    d = Interactions.from_indices(u, i, y, pa.array(np.arange(n_users)), pa.array(np.arange(n_items)))
    m = ALSMF(seed=seed).fit(d)
    return m.mu + np.einsum("nk,nk->n", m.U[ut], m.V[it])  # an unseen user/item has a zero row: μ


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--data", default=str(ROOT / "bench-data" / "ml100k"))
    p.add_argument("--rank", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", nargs="*", default=[])
    p.add_argument("--out", default=str(RESULTS / "gammli" / "ml100k.json"))
    a = p.parse_args(argv)
    data = Path(a.data)
    users, items = (
        read_features(str(data / "users.parquet"), "user"),
        read_features(str(data / "items.parquet"), "item"),
    )
    tr, te = pq.read_table(data / "train.parquet"), pq.read_table(data / "test.parquet")
    u, i = index_pairs(users, items, tr.column("user").combine_chunks(), tr.column("item").combine_chunks())
    ut, it = index_pairs(users, items, te.column("user").combine_chunks(), te.column("item").combine_chunks())
    y, yt = tr.column("rating").to_numpy(), te.column("rating").to_numpy()
    nu, ni = len(users), len(items)
    cold = ~np.isin(ut, u) | ~np.isin(it, i)
    Xu, Xi = onehot_matrix(users), onehot_matrix(items)
    Xtr, Xte = P.feature_matrix(Xu, Xi, u, i), P.feature_matrix(Xu, Xi, ut, it)
    preds, seconds = {}, {}

    def write():  # after every model: a run cut short keeps what it finished
        res = {
            name: {
                "warm": P.scores("regression", yt[~cold], p[~cold]),
                "cold": P.scores("regression", yt[cold], p[cold]),
                "all": P.scores("regression", yt, p),
                "seconds": seconds[name],
            }
            for name, p in preds.items()
        }
        out = {
            "n_train": int(len(y)),
            "n_test": int(len(yt)),
            "n_cold": int(cold.sum()),
            "results": res,
            "gammli": {
                k: m.info.get(k) for k in ("K", "L", "lam", "rank", "ir", "seconds", "sweeps", "relative_change")
            }
            | {"kept_main": m.info["stage1"]["kept"], "kept_pairs": m.info["stage2"]["kept"]},
            "paper_ml1m_rmse": PAPER_ML1M,
        }
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1, default=float))
        name = list(preds)[-1]
        r = res[name]
        print(
            f"{name:18s} warm RMSE {r['warm']['rmse']:.4f} MAE {r['warm']['mae']:.4f}  cold RMSE "
            f"{r['cold']['rmse']:.4f}  ({r['seconds']}s)",
            flush=True,
        )

    with threadpool_limits(1, user_api="blas"):
        m, seconds["GAMMLI"] = P.timed(fit_gammli, users, items, u, i, y, Config(rank=a.rank, seed=a.seed))
        preds["GAMMLI"] = m.predict(ut, it)
        write()
        runs = {
            "plain MF (ALSMF)": lambda: plain_mf(u, i, y, ut, it, nu, ni, a.seed),
            "bias": lambda: P.bias_peer("regression", u, i, y, ut, it, nu, ni),
            "mean": lambda: np.full(len(yt), y.mean()),
            "SVD": lambda: P.svd_peer("regression", u, i, y, ut, it, a.seed),
            "XGBoost": lambda: P.xgboost_peer("regression", Xtr, y, Xte, a.seed),
            "FM": lambda: P.fm_peer("regression", Xu, Xi, u, i, y, ut, it, nu, ni, a.seed),
            "EBM": lambda: P.ebm_peer("regression", Xtr, y, Xte, a.seed),
        }
        for name, fn in runs.items():
            if name in a.skip:
                continue
            preds[name], seconds[name] = P.timed(fn)
            write()


if __name__ == "__main__":
    main()
