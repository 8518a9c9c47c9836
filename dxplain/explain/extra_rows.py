"""What a model's explanation is made of, per model, for the one explainer (``explain.representer``).

Every explanation is one formula (docs/methods.md §1): a side's training rows, each with importance
α · ⟨F_hist[training row], F_tgt[target]⟩, and for some models ONE extra row per target and side that completes
the side's sum to the score:

============  ===============================  =======================================  ======================
model         F_tgt (scores, own top-N)        F_hist (training rows)                   extra row
============  ===============================  =======================================  ======================
squared, BCE  balanced Ũ, Ṽ                    the same                                 none
biased MF     Ũ = [U, b/κ, κ], Ṽ = [V, κ, c/κ]  Ṽ with c/κ zeroed (item side), Ũ with    ``bias``: c_j on the
                                               b/κ zeroed (user side): ⟨·,·⟩ + κ²       item side, b_u on the
                                                                                        user side
iALS          raw U, V                         the same                                 ``unobserved``: every
                                                                                        unstored entry's term
============  ===============================  =======================================  ======================

An extra row's importance is ⟨X_g, F_tgt[target]⟩, X_g an embedding of the target's group (its user on the item
side, its item on the user side): the constant κ·e of the bias column (biased MF), or the unobserved entries'
N_g (``kernels.ials.unobserved_embeddings``, the Gram trick). So a side's whole sum is one dot product per target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import UnsupportedModelError
from ..interactions import Interactions, Targets
from ..kernels import ials
from ..kernels.representer import SCORE_FLOOR
from ..models.base import FactorModel
from ..models.biased_mf import KIND as BIASED_KIND
from ..models.biased_mf import score_floor as biased_score_floor
from ..models.ials import check_settings

# What a run's row is: a training row, or one of the extra rows (``unobserved_term``: one of the largest terms
# of the ``unobserved`` row, shown beside it on request and already counted in it).
KINDS = ["interaction", "bias", "unobserved", "unobserved_term"]


def _other(side: str) -> str:
    return "user" if side == "item" else "item"


@dataclass(frozen=True)
class BiasRows:
    """Biased MF's extra row: the other side's bias, c_j = ⟨κ e_c, Ṽ_j⟩ on the item side and b_u = ⟨κ e_b, Ũ_u⟩
    on the user side. It is itself a representer sum with the bias kernel κ²: c_j = κ² Σ_{u'∋j} α_u'j, so its
    global importance is c_j/κ² and its local importance κ². It names the target's item (item side) or user."""

    kappa: float
    item_vector: np.ndarray  # κ·e at Ṽ's c/κ column
    user_vector: np.ndarray  # κ·e at Ũ's b/κ column
    kind: ClassVar[str] = "bias"

    def owner(self, side: str) -> str:
        """Which of the target's ids the row names: the bias's own (the item's on the item side)."""
        return side

    def embeddings(self, pre, data: Interactions, side: str, rows: np.ndarray) -> np.ndarray:
        vector = self.item_vector if side == "item" else self.user_vector
        return np.tile(vector, (len(rows), 1))

    def alpha_local(self, importance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k2 = self.kappa**2
        return importance / k2, np.full(len(importance), k2)


@dataclass(frozen=True)
class UnobservedRows:
    """iALS's extra row: the sum over the entries nothing is stored for, −(1/(λw)) X_gᵀ(G − Σ_{e∈O_g} F_eF_eᵀ)F_t,
    without visiting them. It has no single α or local importance (null in a run); it names the target's user on
    the item side (all the items the user has not stored) and its item on the user side."""

    lam: float
    alpha: float  # the confidence scale
    convention: str
    G_U: np.ndarray  # UᵀU
    G_V: np.ndarray  # VᵀV
    kind: ClassVar[str] = "unobserved"

    def owner(self, side: str) -> str:
        return _other(side)

    def views(self, pre, data: Interactions, side: str):
        """(indptr, cols, r, X, F, G) of the side's groups: users' histories (item side), items' raters."""
        if side == "item":
            return data.user_indptr, data.item, data.rating, pre.Ut, pre.Vt, self.G_V
        order = data.item_order
        return data.item_indptr, data.user[order], data.rating[order], pre.Vt, pre.Ut, self.G_U

    def embeddings(self, pre, data: Interactions, side: str, rows: np.ndarray) -> np.ndarray:
        indptr, cols, r, X, F, G = self.views(pre, data, side)
        lam_w = self.lam * ials.ridge_weights(indptr, r, self.convention)
        return ials.unobserved_embeddings(indptr, cols, X, F, G, lam_w, rows)

    def alpha_local(self, importance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nothing = np.full(len(importance), np.nan)
        return nothing, nothing

    def top_terms(self, pre, data: Interactions, side: str, t: Targets, top_k: int):
        """The ``top_k`` unobserved entries with the largest |term| per target (``kernels.ials.top_unobserved``):
        (target, other index, α, local importance), flat."""
        indptr, cols, r, X, F, _ = self.views(pre, data, side)
        lam_w = self.lam * ials.ridge_weights(indptr, r, self.convention)
        rows, tcols = (t.user, t.item) if side == "item" else (t.item, t.user)
        out = [], [], [], []
        for g in np.unique(rows):
            mine = np.flatnonzero(rows == g)
            a, b = indptr[g], indptr[g + 1]
            idx, alpha, local = ials.top_unobserved(X[g], cols[a:b], F, lam_w[g], tcols[mine], top_k)
            for x, v in zip(out, (np.repeat(mine, idx.shape[1]), idx.ravel(), alpha.ravel(), local.ravel())):
                x.append(v)
        return tuple(np.concatenate(x) if x else np.zeros(0) for x in out)


def check_ials(model: FactorModel, data) -> None:
    """Refuse an iALS model without its convention, α or λ, or trained on other data than ``data`` (an
    ``Interactions`` or the flow's ``TableSummary``)."""
    settings = model.settings or {}
    if "convention" not in settings or "alpha" not in settings:
        raise UnsupportedModelError(
            f"the iALS model stores settings {settings!r}, without its convention and alpha: the confidences "
            "cannot be recomputed; store them with the model (IALS.fit does)"
        )
    if model.lam is None:
        raise UnsupportedModelError("the iALS model has no λ: the representer divides by it")
    check_settings(settings["convention"], settings["alpha"], model.lam)
    shapes = (model.U.shape[0], model.V.shape[0])
    if shapes != (data.n_users, data.n_items) or (model.n_train and model.n_train != len(data)):
        raise UnsupportedModelError(
            f"the model has {shapes[0]} users × {shapes[1]} items and {model.n_train} stored entries, the data "
            f"{data.n_users} × {data.n_items} and {len(data)}: explain it against the table it was trained on"
        )


def ials_global_importance(model: FactorModel, data: Interactions, s: np.ndarray, side: str) -> np.ndarray:
    """α = c(p − s)/(λ w) of ``data``'s rows for one side: w is the row weight of the entry's user (item side:
    the user's history) or of its item (user side: the item's raters); ``data`` holds those rows whole."""
    convention, scale = model.settings["convention"], float(model.settings["alpha"])
    if side == "item":
        w = ials.ridge_weights(data.user_indptr, data.rating, convention)[data.user]
    else:
        w = ials.ridge_weights(data.item_indptr, data.rating[data.item_order], convention)[data.item]
    return ials.global_importance(data.rating, s, model.lam * w, scale, convention)


def biased_factors(model: FactorModel):
    """(Ũ, Ṽ, Ũ_hist, Ṽ_hist, BiasRows) of a biased-mf model: the raw augmented factors score, and the training
    rows' factors have their own bias column zeroed, so ⟨Ṽ_hist_j', Ṽ_j⟩ = ⟨V_j', V_j⟩ + κ² (and likewise Ũ)."""
    s = model.settings
    U, V = np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
    bu, bi = s["bias_columns"]["user"], s["bias_columns"]["item"]
    Uh, Vh = U.copy(), V.copy()
    Uh[:, bu], Vh[:, bi] = 0.0, 0.0
    kappa = float(s["kappa"])
    item_vector, user_vector = np.zeros(V.shape[1]), np.zeros(U.shape[1])
    item_vector[bi], user_vector[bu] = kappa, kappa
    return U, V, Uh, Vh, BiasRows(kappa, item_vector, user_vector)


def ials_factors(model: FactorModel):
    """(U, V, U, V, UnobservedRows): the raw factors (Spark's weighting leaves UᵀU ≠ VᵀV) and their Grams."""
    U, V = np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
    s = model.settings
    return U, V, U, V, UnobservedRows(float(model.lam), float(s["alpha"]), s["convention"], U.T @ U, V.T @ V)


def score_floor(model: FactorModel, data) -> float:
    """What a relative error divides by at least: ``SCORE_FLOOR``, or for a biased model a share of the ratings'
    range (``models.biased_mf.score_floor``: its trainer's bound is in rating units)."""
    return biased_score_floor(data) if model.kind == BIASED_KIND else SCORE_FLOOR
