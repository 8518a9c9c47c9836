"""The heartbeat: on ml-100k with ALS-MF at convergence, each side's attributions sum to the score (biased MF, which
extends it and is the refresh's default for ratings: ``test_biased_mf.py``)."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dxplain.explain.representer import Preprocessed, RepresenterExplainer
from dxplain.explain.targets import recommend
from dxplain.models.als.trainer import ALSMF


def test_representer_identity_on_movielens_100k(ml100k):
    d = ml100k.interactions
    m = ALSMF().fit(d)  # its defaults: k = 32, λ = 30/|D| = 3e-4 on ml-100k
    assert m.k == 32 and m.lam == 3e-4
    assert m.grad_norm <= 1e-9
    pre = Preprocessed.from_model(m, d)
    t = recommend(pre.Ut, pre.Vt, d, np.arange(d.n_users), 10)
    assert len(t) == 10 * d.n_users
    tab = RepresenterExplainer(d, pre).explain(t, top_k=0)
    # Σ importance per (target, side) from the written rows, against the score.
    g = tab.group_by(["user", "item", "side"]).aggregate([("importance", "sum"), ("score", "max")])
    assert g.num_rows == 2 * len(t)
    total, score = g.column("importance_sum").to_numpy(), g.column("score_max").to_numpy()
    rel = np.abs(total - score) / np.abs(score)
    assert rel.max() < 1e-4, f"worst relative error {rel.max():.2e}"
    # top_k=0 returns every training interaction sharing the user or the item.
    sides = tab.column("side").cast(pa.string())
    n_item_rows = pc.sum(pc.equal(sides, "item")).as_py()
    assert n_item_rows == int(d.user_degree()[t.user].sum())
