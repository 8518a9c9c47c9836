"""Representer explanations of biased MF (docs/methods.md §1, "Biased MF"): both sides sum to the score exactly.

The score of a target (u, j) is s_uj = ⟨Ũ_u, Ṽ_j⟩ = b_u + c_j + ⟨U_u, V_j⟩ (the prediction minus μ;
``models.biased_mf``). With α_ui = 2 r_ui/(λ|D|) (r the residual), at a stationary point

  side ``item`` — u's own rows:   s_uj = Σ_{j'∈D_u} α_uj' (⟨V_j', V_j⟩ + κ²) + c_j
  side ``user`` — j's raters:     s_uj = Σ_{u'∋j} α_u'j (⟨U_u', U_u⟩ + κ²) + b_u

so each side is the training rows it shares with the target, with local importance the inner product plus the
bias kernel κ² = λ/λ_b, and one row of kind ``bias``: the other side's bias (c_j on the item side, b_u on the
user side), itself the representer sum κ² Σ α over that item's raters (that user's rows). A bias row has no
training pair (``train_user``/``train_item`` hold the bias's own user or item, the other null; ``rating`` NaN),
global importance c_j/κ² (or b_u/κ²) and local importance κ².

The factors are explained raw: UᵀU = VᵀV does not hold for this model, and the SVD balancing of the plain
model (``kernels.balance``) would change the inner products.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..interactions import Interactions, Targets
from ..kernels import representer as K
from ..kernels.als import pair_scores
from ..models.base import FactorModel
from ..models.biased_mf import biases, check_biased
from .representer import (
    SCHEMA_FIELDS as REPRESENTER_FIELDS,
)
from .representer import (
    SIDES,
    Preprocessed,
    RepresenterExplainer,
    fidelity,
    global_importance_of,
    item_embedding_rows,
    predictions,
    row_order,
)

KINDS = ["interaction", "bias"]
SCHEMA_FIELDS = [*REPRESENTER_FIELDS, "kind"]


def kernel_factors(model: FactorModel) -> tuple[np.ndarray, np.ndarray]:
    """([U, κ], [V, κ]): the rows whose inner products are the local importances, ⟨U_u', U_u⟩ + κ² on the
    user side and ⟨V_j', V_j⟩ + κ² on the item side (each side's free coordinates but the bias, whose
    share is the bias row)."""
    check_biased(model)
    s = model.settings
    U, V = np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
    keep_u = np.delete(np.arange(U.shape[1]), s["bias_columns"]["user"])
    keep_v = np.delete(np.arange(V.shape[1]), s["bias_columns"]["item"])
    return np.ascontiguousarray(U[:, keep_u]), np.ascontiguousarray(V[:, keep_v])


class BiasedExplainer:
    """Explain (user, item) scores of a biased MF model by its training interactions and the biases.

    Parameters
    ----------
    model : a ``biased-mf`` model (``models.biased_mf.BiasedMF``)
    data : the training interactions it was fitted on
    """

    def __init__(self, model: FactorModel, data: Interactions):
        check_biased(model)
        self.data, self.kappa_sq = data, model.settings["kappa"] ** 2
        self.U, self.V = np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
        self.b, self.c = biases(model)
        Fu, Fv = kernel_factors(model)
        alpha = global_importance_of(model, data, len(data))  # α = 2(y − μ − s)/(λ|D|)
        A = data.by_user(alpha) @ Fv  # A_u = Σ_{j∈D_u} α_uj [V_j, κ]
        B = item_embedding_rows(alpha, data, 0, data.n_items, Fu)  # B_j = Σ_{u∋j} α_uj [U_u, κ]
        # The plain explainer's groups, selection and side sums, over the kernel rows.
        self.inner = RepresenterExplainer(data, Preprocessed(Fu, Fv, alpha, model.mu, A, B, model.loss))

    def scores(self, t: Targets) -> np.ndarray:
        """s = ⟨Ũ_u, Ṽ_j⟩ = b_u + c_j + ⟨U_u, V_j⟩."""
        return pair_scores(self.U, self.V, t.user.astype(np.intp), t.item.astype(np.intp))

    def bias_of(self, t: Targets, side: str) -> np.ndarray:
        """The bias row's importance: c_j on the item side, b_u on the user side."""
        return self.c[t.item] if side == "item" else self.b[t.user]

    def side_sums(self, t: Targets) -> tuple[np.ndarray, np.ndarray]:
        """Σ importance per target over every row of each side (bias row included), in O(k) per target."""
        return tuple(self.inner.side_sum(t, side) + self.bias_of(t, side) for side in SIDES)

    def fidelity(self, t: Targets) -> dict:
        """``explain.representer.fidelity`` of the targets: each side's relative miss of the score."""
        return fidelity(*self.side_sums(t), self.scores(t))

    def explain(self, t: Targets, top_k: int = 10) -> pa.Table:
        """One row per attribution (schema ``SCHEMA_FIELDS``): each side's ``top_k`` training rows by |importance|
        (0: all of them) and its bias row, by target, side, then decreasing importance."""
        s = self.scores(t)
        attributions = {"item": self.inner.item_side(t, top_k), "user": self.inner.user_side(t, top_k)}
        return pa.concat_tables([self.rows(t, s, side, attributions[side]) for side in SIDES])

    def rows(self, t: Targets, s: np.ndarray, side: str, a: K.Attributions) -> pa.Table:
        """One side's rows: its selected training rows and one bias row per target, ordered by ``row_order``."""
        d, n = self.data, len(t)
        bias = self.bias_of(t, side)
        target = np.concatenate([a.target, np.arange(n)])
        kind = np.repeat(np.array([0, 1], np.int8), [len(a.target), n])
        # A bias row names its own user (b_u, user side) or item (c_j, item side); the other id is null.
        train_user = np.concatenate([d.user[a.train], t.user])
        train_item = np.concatenate([d.item[a.train], t.item])
        none = np.zeros(len(kind), bool)
        no_user, no_item = (kind == 1, none) if side == "item" else (none, kind == 1)
        rating = np.concatenate([d.rating[a.train], np.full(n, np.nan)])
        global_importance = np.concatenate([a.global_importance, bias / self.kappa_sq])
        local_importance = np.concatenate([a.local_importance, np.full(n, self.kappa_sq)])
        importance = global_importance * local_importance
        order = row_order(target, importance)
        tgt = target[order]
        return pa.table(
            {
                "user": d.user_ids.take(pa.array(t.user[tgt])),
                "item": d.item_ids.take(pa.array(t.item[tgt])),
                "prediction": predictions(self.inner.pre.loss, self.inner.pre.mu, s[tgt]),
                "score": s[tgt],
                "rec_rank": t.rec_rank[tgt],
                "side": pa.DictionaryArray.from_arrays(np.full(len(tgt), SIDES.index(side), np.int8), pa.array(SIDES)),
                "train_user": d.user_ids.take(pa.array(train_user[order], mask=no_user[order])),
                "train_item": d.item_ids.take(pa.array(train_item[order], mask=no_item[order])),
                "rating": rating[order],
                "global_importance": global_importance[order],
                "local_importance": local_importance[order],
                "importance": importance[order],
                "kind": pa.DictionaryArray.from_arrays(kind[order], pa.array(KINDS)),
            }
        )
