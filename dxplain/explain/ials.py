"""Exact representer explanations of iALS models (``models.ials``; docs/methods.md §1), both sides of a target.

For a target (u, j) with score s_uj = ⟨U_u, V_j⟩, at a stationary point:

  side ``item`` — u's own stored entries, importance α_ui ⟨V_i, V_j⟩ with α_ui = c_ui (p_ui − s_ui)/(λ w_u),
      plus one row of kind ``unobserved``: the sum over every item u has not stored,
      −(1/(λ w_u)) U_uᵀ (VᵀV − Σ_{i∈O_u} V_i V_iᵀ) V_j (``kernels.ials.attributions``);
  side ``user`` — j's stored entries, importance α_vj ⟨U_v, U_u⟩ with α_vj = c_vj (p_vj − s_vj)/(λ w_j),
      plus the ``unobserved`` row over every user who has not stored j.

Each side's ``interaction`` rows and its ``unobserved`` row sum to the score. With small λ the two parts are large
and cancel (the observed entries pull the score up, the unobserved ones down), which the aggregate row shows.
On request (``top_unobserved`` = K) the K unobserved entries with the largest |term| follow as rows of kind
``unobserved_term``: they are terms of the ``unobserved`` row, already counted in it, not added to the sum.

The factors are the raw ones: Spark's weighting leaves UᵀU ≠ VᵀV, and each side's identity needs its own factors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import UnsupportedModelError
from ..interactions import Interactions, Targets
from ..kernels import ials
from ..models.base import FactorModel
from ..models.ials import check_settings
from .representer import SCHEMA_FIELDS, SIDES, predictions, relative_error

KINDS = ["interaction", "unobserved", "unobserved_term"]
FIELDS = [*SCHEMA_FIELDS, "kind"]


def check_ials_model(model: FactorModel, data: Interactions) -> None:
    """Refuse a model that is not iALS, has no valid settings, or was not trained on ``data``'s ids and size."""
    if model.loss != "ials":
        raise UnsupportedModelError(f"the model's loss is {model.loss!r}: this explainer is iALS's (loss 'ials')")
    settings = model.settings or {}
    if "convention" not in settings or "alpha" not in settings:
        raise UnsupportedModelError(
            f"the iALS model stores settings {settings!r}, without its convention and alpha: the confidences "
            "cannot be recomputed; store them with the model (IALS.fit does)"
        )
    check_settings(settings["convention"], settings["alpha"], model.lam)
    if model.lam is None:
        raise UnsupportedModelError("the iALS model has no λ: the representer divides by it")
    shapes = (model.U.shape[0], model.V.shape[0])
    if shapes != (data.n_users, data.n_items) or (model.n_train and model.n_train != len(data)):
        raise UnsupportedModelError(
            f"the model has {shapes[0]} users × {shapes[1]} items and {model.n_train} stored entries, the data "
            f"{data.n_users} × {data.n_items} and {len(data)}: explain it against the table it was trained on"
        )


class IALSExplainer:
    """Both sides of iALS targets from one model and its training table (``check_ials_model``).

    Each side is one view of the stored entries: rows (users for the item side, items for the user side) in CSR,
    their confidences, preferences and λ w, and the other side's factors with their Gram.
    """

    def __init__(self, model: FactorModel, data: Interactions):
        check_ials_model(model, data)
        self.model, self.data = model, data
        convention, alpha = model.settings["convention"], float(model.settings["alpha"])
        U, V = np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
        order = data.item_order
        self.views = {}
        for side, indptr, cols, entries, X, F in (
            ("item", data.user_indptr, data.item, np.arange(len(data)), U, V),
            ("user", data.item_indptr, data.user[order], order, V, U),
        ):
            r = data.rating[entries]
            c, p = ials.confidence(r, alpha, convention)
            lam_w = model.lam * ials.ridge_weights(indptr, r, convention)
            self.views[side] = (
                np.asarray(indptr, np.int64),
                cols.astype(np.int64),
                entries,
                c,
                p,
                lam_w,
                X,
                F,
                F.T @ F,
            )

    def scores(self, t: Targets) -> np.ndarray:
        U, V = self.views["item"][6], self.views["item"][7]
        return np.einsum("tk,tk->t", U[t.user], V[t.item])

    def side(self, t: Targets, side: str, top_unobserved: int = 0) -> dict[str, np.ndarray]:
        """One side's attributions of every target, as flat columns (indices, not ids): ``target`` (into t),
        ``kind`` (into KINDS), ``entry`` (the stored entry's position in the data, −1 for the other kinds),
        ``other`` (the column of an ``unobserved_term``, −1 otherwise), ``global_importance``, ``local_importance``
        and ``importance`` (NaN α and local importance on the aggregate row)."""
        indptr, cols, entries, c, p, lam_w, X, F, G = self.views[side]
        rows, tcols = (t.user, t.item) if side == "item" else (t.item, t.user)
        out = {name: [] for name in ("target", "kind", "entry", "other", "global_importance", "local_importance")}
        out["importance"] = []
        order = np.argsort(rows, kind="stable")
        bounds = np.flatnonzero(np.diff(rows[order])) + 1
        for group in np.split(order, bounds) if len(order) else []:
            r = int(rows[group[0]])
            a, b = indptr[r], indptr[r + 1]
            alpha, local, aggregate = ials.attributions(X[r], cols[a:b], c[a:b], p[a:b], F, G, lam_w[r], tcols[group])
            terms = None
            if top_unobserved > 0:
                terms = ials.top_unobserved(X[r], cols[a:b], F, lam_w[r], tcols[group], top_unobserved)
            for n, tgt in enumerate(group):
                imp = alpha * local[:, n]
                rank = np.argsort(-imp, kind="stable")
                _extend(out, tgt, 0, entries[a:b][rank], -1, alpha[rank], local[rank, n], imp[rank])
                _extend(out, tgt, 1, [-1], -1, [np.nan], [np.nan], [aggregate[n]])
                if terms is not None and terms[0].shape[1]:
                    idx, ta, tl = terms[0][n], terms[1][n], terms[2][n]
                    _extend(out, tgt, 2, np.full(len(idx), -1), idx, ta, tl, ta * tl)
        return {name: np.concatenate(vals) if vals else np.zeros(0) for name, vals in out.items()}

    def explain(self, t: Targets, top_unobserved: int = 0) -> pa.Table:
        """Rows (``FIELDS``) of both sides: the item side first, then the user side, each by target, then kind
        (interactions by decreasing importance, the aggregate, the largest unobserved terms by decreasing |term|)."""
        s = self.scores(t)
        tables = [self.rows(t, s, side, self.side(t, side, top_unobserved)) for side in SIDES]
        return pa.concat_tables(tables)

    def side_sums(self, t: Targets) -> tuple[np.ndarray, np.ndarray]:
        """Σ of the ``interaction`` and ``unobserved`` importances per target, item side and user side."""
        sums = []
        for side in SIDES:
            a = self.side(t, side)
            counted = a["kind"] < 2
            sums.append(np.bincount(a["target"][counted].astype(np.int64), a["importance"][counted], len(t)))
        return sums[0], sums[1]

    def rows(self, t: Targets, s: np.ndarray, side: str, a: dict) -> pa.Table:
        """The output rows of one side's attributions (``side``), ids in place of indices, nulls where a kind has
        no such value (the aggregate's α, local importance and other id; an unobserved entry's rating)."""
        d = self.data
        tgt = a["target"].astype(np.int64)
        kind = a["kind"].astype(np.int8)
        entry = a["entry"].astype(np.int64)
        stored = entry >= 0
        safe = np.where(stored, entry, 0)
        other = a["other"].astype(np.int64)
        own_user, own_item = t.user[tgt].astype(np.int64), t.item[tgt].astype(np.int64)
        if side == "item":  # u's items: the train user is u, the train item the stored or unobserved item
            tu, tu_null = own_user, np.zeros(len(tgt), bool)
            ti = np.where(stored, d.item[safe], other)
            ti_null = ~stored & (other < 0)
        else:
            ti, ti_null = own_item, np.zeros(len(tgt), bool)
            tu = np.where(stored, d.user[safe], other)
            tu_null = ~stored & (other < 0)
        g, loc = a["global_importance"], a["local_importance"]
        return pa.table(
            {
                "user": d.user_ids.take(pa.array(own_user)),
                "item": d.item_ids.take(pa.array(own_item)),
                "prediction": predictions(self.model.loss, self.model.mu, s[tgt]),
                "score": s[tgt],
                "rec_rank": t.rec_rank[tgt],
                "side": pa.DictionaryArray.from_arrays(np.full(len(tgt), SIDES.index(side), np.int8), pa.array(SIDES)),
                "train_user": d.user_ids.take(pa.array(np.where(tu_null, 0, tu), mask=tu_null)),
                "train_item": d.item_ids.take(pa.array(np.where(ti_null, 0, ti), mask=ti_null)),
                "rating": pa.array(np.where(stored, d.rating[safe], 0.0), mask=~stored),
                "global_importance": pa.array(g, mask=np.isnan(g)),
                "local_importance": pa.array(loc, mask=np.isnan(loc)),
                "importance": a["importance"],
                "kind": pa.DictionaryArray.from_arrays(kind, pa.array(KINDS)),
            }
        )


def _extend(out: dict, tgt, kind: int, entry, other, g, loc, imp) -> None:
    n = len(imp)
    out["target"].append(np.full(n, tgt, np.int64))
    out["kind"].append(np.full(n, kind, np.int8))
    out["entry"].append(np.asarray(entry, np.int64))
    out["other"].append(np.broadcast_to(np.asarray(other, np.int64), (n,)))
    out["global_importance"].append(np.asarray(g, np.float64))
    out["local_importance"].append(np.asarray(loc, np.float64))
    out["importance"].append(np.asarray(imp, np.float64))


def explain_ials(model: FactorModel, data: Interactions, targets: Targets, top_unobserved: int = 0) -> pa.Table:
    """Both sides' attribution rows of every target (``IALSExplainer.explain``): per side the stored entries, one
    ``unobserved`` aggregate row, and on request the ``top_unobserved`` largest unobserved terms."""
    return IALSExplainer(model, data).explain(targets, top_unobserved)


def fidelity_errors(model: FactorModel, data: Interactions, targets: Targets) -> tuple[np.ndarray, np.ndarray]:
    """|Σ side − s|/|s| per target (``representer.relative_error``), item side and user side."""
    ex = IALSExplainer(model, data)
    s = ex.scores(targets)
    item_sum, user_sum = ex.side_sums(targets)
    return relative_error(item_sum, s), relative_error(user_sum, s)
