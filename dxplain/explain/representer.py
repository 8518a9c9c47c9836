"""High-dimensional representer explanations for matrix-factorisation models (Definition 1, Algorithm 1).

For every target (user i', item j') and each side:
  side ``item`` — the user's own history: importance = α_{i'j} ⟨Ṽ_j, Ṽ_{j'}⟩ for (i', j) ∈ D
  side ``user`` — other users of the item:  importance = α_{ij'} ⟨Ũ_i, Ũ_{i'}⟩ for (i, j') ∈ D
with α the *global importance* and the inner product the *local importance*. Each side sums to the
score ⟨Ũ_{i'}, Ṽ_{j'}⟩ at the optimum; ``fidelity`` reports how close a given model gets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from scipy.special import expit

from ..errors import UnsupportedModelError
from ..interactions import Interactions, Targets, stable_id_order
from ..kernels import als
from ..kernels import representer as K
from ..kernels.als import pair_scores
from ..kernels.balance import balance_transforms
from ..models.base import FactorModel
from ..models.biased_mf import KIND as BIASED_KIND

SIDES = ["item", "user"]
SCHEMA_FIELDS = [
    "user",
    "item",
    "prediction",
    "score",
    "rec_rank",
    "side",
    "train_user",
    "train_item",
    "rating",
    "global_importance",
    "local_importance",
    "importance",
]


# The losses the representer has a formula for: α = −c·ℓ′(y, s)/(λ|D|) needs ℓ′ (docs/methods.md §1).
LOSSES = ("squared", "bce")
PREDICTION = {"squared": "rating μ + score", "bce": "probability σ(score)"}


def check_explainable(model: FactorModel, data: Interactions) -> None:
    """Refuse a model whose loss has no representer formula here, or a BCE model explained against data
    other than its training table (positives and the negatives it was trained with)."""
    if model.loss not in LOSSES:
        raise UnsupportedModelError(
            f"the model's loss {model.loss!r} has no representer formula in dxplain "
            f"(known: {', '.join(LOSSES)}); it is not explained with another loss's α"
        )
    if model.kind == BIASED_KIND:
        raise UnsupportedModelError(
            "a biased-mf model is explained by dxplain.explain.biased (its bias rows and the bias kernel κ² in "
            "every local importance); the plain representer's sums would miss its score"
        )
    if model.loss == "bce":
        # A streamed table (``interactions.TableSummary``) has its range only: 0/1 at both ends is then the test.
        binary = set(data.rating_range()) <= {0.0, 1.0} and (
            not hasattr(data, "rating") or bool(np.all((data.rating == 0) | (data.rating == 1)))
        )
        if not binary or (model.n_train and model.n_train != len(data)):
            raise UnsupportedModelError(
                f"this BCE model was trained on {model.n_train} terms (positives and negatives), but the data to "
                f"explain has {len(data)} rows{'' if binary else ' with ratings other than 0/1'}"
                ": α sums over the model's own training table. Let `dxplain refresh --implicit` train and "
                "explain the BCE model on its sampled negatives"
            )


def negative_weight(model: FactorModel) -> float:
    """w, the weight c of a negative term in a BCE model (1 for a positive)."""
    w = getattr(model, "neg_weight", None)
    return float(w if w is not None else model.info.get("neg_weight", 1.0))


def loss_residual(model: FactorModel, data: Interactions, s: np.ndarray) -> np.ndarray:
    """r = −c·ℓ′(y, s) per training row: the per-sample gradient's scale, the numerator of α.

    squared: ℓ = (y − μ − s)², r = 2(y − μ − s); bce: ℓ = softplus(s) − y·s, r = c(y − σ(s)),
    c = 1 on positives and w on negatives."""
    if model.loss == "squared":
        return 2.0 * ((data.rating - model.mu) - s)
    y = data.rating
    return np.where(y > 0, 1.0, negative_weight(model)) * (y - expit(s))


def predictions(loss: str, mu: float, s: np.ndarray) -> np.ndarray:
    """What a score means to a user: a rating μ + s (squared loss), a probability σ(s) (BCE)."""
    return expit(s + mu) if loss == "bce" else s + mu


def _group_targets(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys, target indices ordered by key, and the pointer into them."""
    order = stable_id_order(keys)
    ordered = keys[order]
    first = np.ones(len(ordered), bool)  # where each key's run starts: np.unique would sort them again
    first[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(first)
    return ordered[starts], order, np.append(starts, len(ordered))


def balanced_factors(model: FactorModel) -> tuple[np.ndarray, np.ndarray]:
    """(Ũ, Ṽ) = (U T_U, V T_V) with ŨᵀŨ = ṼᵀṼ and ŨṼᵀ = UVᵀ (``kernels.balance.balance_transforms``).

    A biased-mf model's factors come back as they are: its stationary points do not have UᵀU = VᵀV, and the
    balancing would change the inner products its identity sums (``explain.biased``)."""
    if model.kind == BIASED_KIND:
        return np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
    T_U, T_V = balance_transforms(model.U, model.V)
    return model.U @ T_U, model.V @ T_V


def global_importance_of(model: FactorModel, data: Interactions, n_train: int) -> np.ndarray:
    """α = −c·ℓ′/(λ|D|) of the rows of ``data`` (the whole training table, or one part of it: α of a row
    depends on that row only), |D| = ``n_train``."""
    # One compiled pass (``als.pattern_scores``): numpy's chunked gather loop is several times slower in a
    # Dask worker, its many short GIL releases contending with the worker's own threads.
    P = als.Pattern(data.user, data.item, None, data.n_users, data.n_items)
    s = als.pattern_scores(np.ascontiguousarray(model.U, np.float64), np.ascontiguousarray(model.V, np.float64), P)
    return K.global_importance(loss_residual(model, data, s), model.lam, n_train)


def item_embedding_rows(alpha: np.ndarray, data: Interactions, lo: int, hi: int, Ut: np.ndarray) -> np.ndarray:
    """Rows lo:hi of B (B_j = Σ_{i:(i,j)∈D} α_ij Ũ_i) from ``data`` holding every rater of items lo:hi."""
    return sp.csr_array((alpha, (data.item - lo, data.user)), shape=(hi - lo, len(Ut))) @ Ut


@dataclass
class Preprocessed:
    """What every shard needs, computed once: balanced factors, α, and the representer embeddings."""

    Ut: np.ndarray  # Ũ (n_users, r)
    Vt: np.ndarray  # Ṽ (n_items, r)
    alpha: np.ndarray | None  # α per training interaction, in data order (None: read with each part)
    mu: float
    A: np.ndarray | None  # representer embedding of users: A_i = Σ_{j:(i,j)∈D} α_ij Ṽ_j
    B: np.ndarray | None  # representer embedding of items: B_j = Σ_{i:(i,j)∈D} α_ij Ũ_i
    loss: str = "squared"  # the model's loss: α and what a prediction means follow it

    @classmethod
    def from_model(cls, model: FactorModel, data: Interactions) -> Preprocessed:
        """Balanced factors and α = −c·ℓ′/(λ|D|) from the model's own loss (refused if unknown)."""
        check_explainable(model, data)
        Ut, Vt = balanced_factors(model)
        alpha = global_importance_of(model, data, len(data))
        A = data.by_user(alpha) @ Vt  # one sparse pass each; at the optimum A = Ũ and B = Ṽ
        B = item_embedding_rows(alpha, data, 0, data.n_items, Ut)  # as the refresh's tasks form it per part
        return cls(Ut, Vt, alpha, model.mu, A, B, model.loss)

    def factors(self) -> Preprocessed:
        """What a worker needs besides the part of the data it reads: Ũ, Ṽ and B, O(users + items).

        B stays because a target item's raters are read by every shard that has a target on it: with B the
        user side's fidelity sum is one dot product per target instead of a pass over the raters in each
        shard (a real share of a shard's time at scale). A goes: the item side sums over the shard's own
        users' histories, which it reads once anyway.
        """
        return Preprocessed(self.Ut, self.Vt, None, self.mu, None, self.B, self.loss)

    def with_alpha(self, alpha: np.ndarray) -> Preprocessed:
        """These factors with the α of one part of the data (in that part's row order)."""
        return Preprocessed(self.Ut, self.Vt, alpha, self.mu, self.A, self.B, self.loss)


class RepresenterExplainer:
    """Explain (user, item) scores of an MF model by its training interactions, batched.

    Parameters
    ----------
    data : the training interactions the model was fitted on
    pre : the preprocessed model (``Preprocessed.from_model``)
    """

    def __init__(self, data: Interactions, pre: Preprocessed):
        self.data, self.pre = data, pre

    def scores(self, t: Targets) -> np.ndarray:
        return pair_scores(self.pre.Ut, self.pre.Vt, t.user.astype(np.intp), t.item.astype(np.intp))

    def groups(self, t: Targets, side: str) -> tuple[K.Groups, np.ndarray]:
        """The groups of one side and the factor matrix they are scored with.

        ``item``: one group per target user — the user's history against the user's target items (Ṽ).
        ``user``: one group per target item — the item's raters against its target users (Ũ).
        """
        d = self.data
        if side == "item":
            keys, order, tptr = _group_targets(t.user)
            hist, hptr = d.user_positions(keys)
            return K.Groups(hptr, hist, d.item[hist], tptr, order, t.item[order]), self.pre.Vt
        keys, order, tptr = _group_targets(t.item)
        hist, hptr = d.item_positions(keys)
        return K.Groups(hptr, hist, d.user[hist], tptr, order, t.user[order]), self.pre.Ut

    def item_side(self, t: Targets, top_k: int) -> K.Attributions:
        g, F = self.groups(t, "item")
        return K.grouped_attributions(g, self.pre.alpha, F, F, top_k)

    def user_side(self, t: Targets, top_k: int, search=None) -> K.Attributions:
        """``search``: an approximate top-k for heavy items (``explain.ann.hnsw_search()``); exact by default."""
        g, F = self.groups(t, "user")
        return K.grouped_attributions(g, self.pre.alpha, F, F, top_k, search)

    def side_sums(self, t: Targets) -> tuple[np.ndarray, np.ndarray]:
        """Exact Σ importance per target, item side and user side (``side_sum``)."""
        return self.side_sum(t, "item"), self.side_sum(t, "user")

    def side_sum(self, t: Targets, side: str) -> np.ndarray:
        """Σ importance per target on one side, over every training row of that side (not only the top-k).

        With the side's representer embedding (A = (α⊙R) Ṽ for the item side, B = (α⊙R)ᵀ Ũ for the user
        side, computed in preprocessing) it is ⟨A_{i'}, Ṽ_{j'}⟩ or ⟨B_{j'}, Ũ_{i'}⟩: O(k) per target.
        Without it, one sparse product over the rows this explainer's data holds gives the embedding row
        of every group, then one dot product per target: O(history · k), no per-target pass over history.
        """
        u, i = t.user.astype(np.intp), t.item.astype(np.intp)
        E = self.pre.A if side == "item" else self.pre.B
        if E is not None:
            return pair_scores(E, self.pre.Vt, u, i) if side == "item" else pair_scores(E, self.pre.Ut, i, u)
        g, F = self.groups(t, side)
        G = len(g.tgt_ptr) - 1
        E = sp.csr_array((self.pre.alpha[g.hist], g.hist_row, g.hist_ptr), shape=(G, len(F))) @ F
        out = np.empty(len(t))
        out[g.tgt] = pair_scores(E, F, np.repeat(np.arange(G), np.diff(g.tgt_ptr)), g.tgt_row.astype(np.intp))
        return out

    def explain(self, t: Targets, top_k: int = 10) -> pa.Table:
        """One row per attribution (schema: ``SCHEMA_FIELDS``), sorted by target, side, importance."""
        s = self.scores(t)
        tables = []
        for side, attr in (("item", self.item_side(t, top_k)), ("user", self.user_side(t, top_k))):
            tables.append(self.rows(t, s, side, attr))
        return pa.concat_tables(tables)

    def rows(self, t: Targets, s: np.ndarray, side: str, a: K.Attributions) -> pa.Table:
        """The output rows of one side's attributions, by target then decreasing importance (``row_order``)."""
        d = self.data
        return attribution_rows(
            t,
            s,
            self.pre.mu,
            side,
            d.user_ids,
            d.item_ids,
            a.target,
            d.user[a.train],
            d.item[a.train],
            d.rating[a.train],
            a.global_importance,
            a.local_importance,
            self.pre.loss,
        )


def attribution_rows(
    t: Targets,
    s: np.ndarray,
    mu: float,
    side: str,
    user_ids: pa.Array,
    item_ids: pa.Array,
    target: np.ndarray,
    train_user: np.ndarray,
    train_item: np.ndarray,
    rating: np.ndarray,
    global_importance: np.ndarray,
    local_importance: np.ndarray,
    loss: str = "squared",
) -> pa.Table:
    """One output row per attribution (schema ``SCHEMA_FIELDS``), ordered by ``row_order``; ``prediction``
    is what the score means under the model's ``loss`` (``predictions``).

    Attributions come as indices: ``target`` into ``t`` (and ``s``, its scores), the training row as its
    user and item indices and rating. So the rows of one side can be gathered from several parts of the
    data and ordered once.
    """
    importance = global_importance * local_importance
    order = row_order(target, importance)
    tgt, tu, ti = target[order], train_user[order], train_item[order]
    return pa.table(
        {
            "user": user_ids.take(pa.array(t.user[tgt])),
            "item": item_ids.take(pa.array(t.item[tgt])),
            "prediction": predictions(loss, mu, s[tgt]),
            "score": s[tgt],
            "rec_rank": t.rec_rank[tgt],
            # One shared dictionary for both sides, so tables of either side concatenate and group.
            "side": pa.DictionaryArray.from_arrays(np.full(len(tgt), SIDES.index(side), np.int8), pa.array(SIDES)),
            "train_user": user_ids.take(pa.array(tu)),
            "train_item": item_ids.take(pa.array(ti)),
            "rating": rating[order],
            "global_importance": global_importance[order],
            "local_importance": local_importance[order],
            "importance": importance[order],
        }
    )


def row_order(target: np.ndarray, importance: np.ndarray) -> np.ndarray:
    """The order of output rows: by target, then by decreasing importance, ties in input order.

    The same order as ``np.lexsort((-importance, target))``, and faster: the stable rank by importance and
    the target make one unique int64 key, so one sort of it suffices.
    """
    n = len(target)
    rank = np.empty(n, np.int64)
    rank[np.argsort(-importance, kind="stable")] = np.arange(n)
    return np.argsort(target.astype(np.int64) * max(n, 1) + rank)


# Decades of the relative fidelity error that a run counts its targets in: "e" holds the targets with
# 10^e ≤ error < 10^(e+1); the first also holds exact ones (error 0), the last everything from 10^e up.
ERROR_DECADES = range(-16, 3)


def relative_error(total: np.ndarray, score: np.ndarray) -> np.ndarray:
    """|Σ importance − score| / |score| per target (the score floored at ``SCORE_FLOOR``: a zero score has no
    scale)."""
    return np.abs(total - score) / np.maximum(np.abs(score), K.SCORE_FLOOR)


def decade_counts(rel: np.ndarray) -> dict[str, int]:
    """Targets per decade of their relative error (``ERROR_DECADES``), keyed by the decade's exponent,
    only the decades that hold some: counts of shards add up, and the report draws them as a histogram."""
    with np.errstate(divide="ignore"):  # an exact explanation (error 0) goes to the first decade
        e = np.clip(np.floor(np.log10(rel)), ERROR_DECADES[0], ERROR_DECADES[-1]).astype(int)
    values, counts = np.unique(e, return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts)}


def fidelity(item_sum: np.ndarray, user_sum: np.ndarray, score: np.ndarray) -> dict:
    """Spread of |Σ importance − score| / |score| per side: 0 means the explanation is exact; None when
    there is no target to measure (never a 0 for nothing); the targets per decade of it (``decade_counts``)."""
    out = {}
    for side, total in (("item", item_sum), ("user", user_sum)):
        rel = relative_error(total, score)
        out[side] = {
            "median_rel_error": float(np.median(rel)) if len(rel) else None,
            "max_rel_error": float(rel.max()) if len(rel) else None,
            "rel_error_decades": decade_counts(rel),
        }
    return out
