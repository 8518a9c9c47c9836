"""Exact representer explanations of iALS models (``models.ials``; docs/methods.md §1), by the one explainer.

For a target (u, j) with score s_uj = ⟨U_u, V_j⟩, at a stationary point:

  side ``item`` — u's own stored entries, importance α_ui ⟨V_i, V_j⟩ with α_ui = c_ui (p_ui − s_ui)/(λ w_u),
      plus one row of kind ``unobserved``: the sum over every item u has not stored,
      −(1/(λ w_u)) U_uᵀ (VᵀV − Σ_{i∈O_u} V_i V_iᵀ) V_j (``kernels.ials.unobserved_embeddings``);
  side ``user`` — j's stored entries, importance α_vj ⟨U_v, U_u⟩ with α_vj = c_vj (p_vj − s_vj)/(λ w_j),
      plus the ``unobserved`` row over every user who has not stored j.

``explain.representer.RepresenterExplainer`` computes both (``explain.extra_rows.UnobservedRows``). With small λ
the two parts are large and cancel (the observed entries pull the score up, the unobserved ones down), which the
aggregate row shows. On request (``top_unobserved`` = K) the K unobserved entries with the largest |term| follow
as rows of kind ``unobserved_term``: terms of the ``unobserved`` row, already counted in it, not added to the sum.
This module keeps the explainer's per-side columns in index form (``IALSExplainer.side``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import UnsupportedModelError
from ..interactions import Interactions, Targets
from ..models.base import FactorModel
from .extra_rows import check_ials
from .representer import RepresenterExplainer
from .run_rows import relative_error


def check_ials_model(model: FactorModel, data: Interactions) -> None:
    """Refuse a model that is not iALS, has no valid settings, or was not trained on ``data``'s ids and size."""
    if model.loss != "ials":
        raise UnsupportedModelError(f"the model's loss is {model.loss!r}: this explainer is iALS's (loss 'ials')")
    check_ials(model, data)


# The kinds of ``IALSExplainer.side``'s index columns (a run's rows name them by ``extra_rows.KINDS``).
SIDE_KINDS = ["interaction", "unobserved", "unobserved_term"]


class IALSExplainer:
    """The explainer of an iALS model (``check_ials_model``) on its training table: every stored entry of each side
    (no top-k), with each side's attributions also as flat index columns (``side``)."""

    def __init__(self, model: FactorModel, data: Interactions):
        check_ials_model(model, data)
        self.model, self.inner = model, RepresenterExplainer.of(model, data)

    def scores(self, t: Targets) -> np.ndarray:
        return self.inner.scores(t)

    def side_sums(self, t: Targets) -> tuple[np.ndarray, np.ndarray]:
        """Σ of the ``interaction`` and ``unobserved`` importances per target, item side and user side."""
        return self.inner.side_sums(t)

    def explain(self, t: Targets, top_unobserved: int = 0) -> pa.Table:
        """Rows (``run_rows.SCHEMA_FIELDS``) of both sides: every stored entry, the ``unobserved`` row and on
        request the ``top_unobserved`` largest unobserved terms (``RepresenterExplainer.explain``)."""
        return self.inner.explain(t, top_k=0, top_unobserved=top_unobserved)

    def side(self, t: Targets, side: str, top_unobserved: int = 0) -> dict[str, np.ndarray]:
        """One side's attributions of every target, as flat columns (indices, not ids): ``target`` (into t),
        ``kind`` (into SIDE_KINDS), ``entry`` (the stored entry's
        position in the data, −1 for the other kinds), ``other`` (the column of an ``unobserved_term``, −1
        otherwise), ``global_importance``, ``local_importance`` and ``importance`` (NaN α and local importance on
        the aggregate row)."""
        ex = self.inner
        a = ex.item_side(t, 0) if side == "item" else ex.user_side(t, 0)
        n = len(t)
        agg = ex.extra(t, side)
        cols = {
            "target": [a.target, np.arange(n)],
            "kind": [np.zeros(len(a.target), np.int8), np.full(n, SIDE_KINDS.index("unobserved"), np.int8)],
            "entry": [a.train, np.full(n, -1)],
            "other": [np.full(len(a.target), -1), np.full(n, -1)],
            "global_importance": [a.global_importance, np.full(n, np.nan)],
            "local_importance": [a.local_importance, np.full(n, np.nan)],
            "importance": [a.importance, agg],
        }
        if top_unobserved > 0:
            target, other, alpha, local = ex.pre.extra.top_terms(ex.pre, ex.data, side, t, top_unobserved)
            for name, v in (
                ("target", target),
                ("kind", np.full(len(target), SIDE_KINDS.index("unobserved_term"), np.int8)),
                ("entry", np.full(len(target), -1)),
                ("other", other),
                ("global_importance", alpha),
                ("local_importance", local),
                ("importance", alpha * local),
            ):
                cols[name].append(v)
        return {name: np.concatenate(v) for name, v in cols.items()}


def explain_ials(model: FactorModel, data: Interactions, targets: Targets, top_unobserved: int = 0) -> pa.Table:
    """Both sides' attribution rows of every target (``RepresenterExplainer.explain``): per side the stored entries,
    one ``unobserved`` aggregate row, and on request the ``top_unobserved`` largest unobserved terms."""
    return IALSExplainer(model, data).explain(targets, top_unobserved)


def fidelity_errors(model: FactorModel, data: Interactions, targets: Targets) -> tuple[np.ndarray, np.ndarray]:
    """|Σ side − s|/|s| per target (``run_rows.relative_error``), item side and user side."""
    ex = IALSExplainer(model, data)
    s = ex.scores(targets)
    item_sum, user_sum = ex.side_sums(targets)
    return relative_error(item_sum, s), relative_error(user_sum, s)
