"""High-dimensional representer explanations of factor models (Definition 1, Algorithm 1): the one explainer.

For every target (user i', item j') and each side:
  side ``item`` — the user's own history: importance = α_{i'j} ⟨V_hist_j, V_tgt_{j'}⟩ for (i', j) ∈ D
  side ``user`` — other users of the item:  importance = α_{ij'} ⟨U_hist_i, U_tgt_{i'}⟩ for (i, j') ∈ D
with α the *global importance* and the inner product the *local importance*, plus, for biased MF and iALS, one
extra row per target and side (``explain.extra_rows``: the other side's bias, or the unobserved entries' sum).
Each side sums to the score ⟨U_tgt_{i'}, V_tgt_{j'}⟩ at a stationary point; ``fidelity`` reports how close a
given model gets. The factors and the extra row come from the model (``explanation_factors``); the plain models'
are the balanced Ũ, Ṽ for both roles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
from . import extra_rows as X
from .run_rows import attribution_rows, extra_columns, fidelity, term_columns

# The losses the representer has a formula for: α = −c·ℓ′(y, s)/(λ|D|) needs ℓ′, iALS's α = c(p − s)/(λw)
# (docs/methods.md §1).
LOSSES = ("squared", "bce", "ials")
PREDICTION = {"squared": "rating μ + score", "bce": "probability σ(score)", "ials": "preference score ⟨U_u, V_i⟩"}


def check_explainable(model: FactorModel, data) -> None:
    """Refuse a model whose loss has no representer formula here, an iALS model without its settings or trained
    on other data, or a BCE model explained against data other than its training table (positives and the
    negatives it was trained with)."""
    if model.loss not in LOSSES:
        raise UnsupportedModelError(
            f"the model's loss {model.loss!r} has no representer formula in dxplain "
            f"(known: {', '.join(LOSSES)}); it is not explained with another loss's α"
        )
    if model.loss == "ials":
        X.check_ials(model, data)
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

    A biased-mf or iALS model's factors come back as they are: their stationary points do not have UᵀU = VᵀV,
    and the balancing would change the inner products their identities sum (``explain.extra_rows``)."""
    if model.kind == BIASED_KIND or model.loss == "ials":
        return np.asarray(model.U, np.float64), np.asarray(model.V, np.float64)
    T_U, T_V = balance_transforms(model.U, model.V)
    return model.U @ T_U, model.V @ T_V


def explanation_factors(model: FactorModel):
    """(U_tgt, V_tgt, U_hist, V_hist, extra) of the model (``explain.extra_rows``' table): the factors that score
    targets, those of the training rows, and its extra row per side (None for the plain models)."""
    if model.kind == BIASED_KIND:
        return X.biased_factors(model)
    if model.loss == "ials":
        return X.ials_factors(model)
    Ut, Vt = balanced_factors(model)
    return Ut, Vt, Ut, Vt, None


def global_importance_of(model: FactorModel, data: Interactions, n_train: int, side: str = "item") -> np.ndarray:
    """α of the rows of ``data`` (the whole training table, or one part of it holding whole rows of ``side``'s
    groups), |D| = ``n_train``: −c·ℓ′/(λ|D|), or iALS's c(p − s)/(λw) with w the ridge weight of the entry's
    user (``side`` "item": its history) or item ("user": its raters)."""
    # One compiled pass (``als.pattern_scores``): numpy's chunked gather loop is several times slower in a
    # Dask worker, its many short GIL releases contending with the worker's own threads.
    P = als.Pattern(data.user, data.item, None, data.n_users, data.n_items)
    s = als.pattern_scores(np.ascontiguousarray(model.U, np.float64), np.ascontiguousarray(model.V, np.float64), P)
    if model.loss == "ials":
        return X.ials_global_importance(model, data, s, side)
    return K.global_importance(loss_residual(model, data, s), model.lam, n_train)


def item_embedding_rows(alpha: np.ndarray, data: Interactions, lo: int, hi: int, Ut: np.ndarray) -> np.ndarray:
    """Rows lo:hi of B (B_j = Σ_{i:(i,j)∈D} α_ij U_hist_i) from ``data`` holding every rater of items lo:hi."""
    return sp.csr_array((alpha, (data.item - lo, data.user)), shape=(hi - lo, len(Ut))) @ Ut


@dataclass
class Preprocessed:
    """What every shard needs, computed once: the factors, α, and the representer embeddings."""

    Ut: np.ndarray  # U_tgt (n_users, r): scores the targets (balanced Ũ for the plain models)
    Vt: np.ndarray  # V_tgt (n_items, r)
    alpha: np.ndarray | None  # α per training interaction for the item side, in data order (None: read with parts)
    mu: float
    A: np.ndarray | None  # representer embedding of users: A_i = Σ_{j:(i,j)∈D} α_ij V_hist_j
    B: np.ndarray | None  # representer embedding of items: B_j = Σ_{i:(i,j)∈D} α'_ij U_hist_i
    loss: str = "squared"  # the model's loss: α and what a prediction means follow it
    Uh: np.ndarray | None = None  # U_hist: the user side's training rows (None: Ut)
    Vh: np.ndarray | None = None  # V_hist: the item side's training rows (None: Vt)
    alpha_user: np.ndarray | None = None  # α' for the user side when it differs (iALS, Spark's weights)
    extra: object = None  # the extra row per side (``extra_rows.BiasRows``, ``UnobservedRows``) or None
    Ax: np.ndarray | None = None  # the item side's extra-row embedding per user (whole table only)
    Bx: np.ndarray | None = None  # the user side's extra-row embedding per item
    score_floor: float = K.SCORE_FLOOR  # what relative errors divide by at least (``extra_rows.score_floor``)

    def __post_init__(self):
        self.Uh = self.Ut if self.Uh is None else self.Uh
        self.Vh = self.Vt if self.Vh is None else self.Vh

    @classmethod
    def from_model(cls, model: FactorModel, data: Interactions) -> Preprocessed:
        """The model's factors (``explanation_factors``) and α from its own loss (refused if unknown)."""
        check_explainable(model, data)
        Ut, Vt, Uh, Vh, extra = explanation_factors(model)
        alpha = global_importance_of(model, data, len(data), "item")
        alpha_user = None
        if model.loss == "ials":  # w of an entry's item, not of its user: the same α unless Spark's weights
            alpha_user = global_importance_of(model, data, len(data), "user")
            alpha_user = None if np.array_equal(alpha_user, alpha) else alpha_user
        pre = cls(Ut, Vt, alpha, model.mu, None, None, model.loss, Uh, Vh, alpha_user, extra)
        pre.score_floor = X.score_floor(model, data)
        pre.A = data.by_user(alpha) @ Vh  # one sparse pass each; at the optimum of the plain model A = Ũ, B = Ṽ
        pre.B = item_embedding_rows(pre.user_alpha, data, 0, data.n_items, Uh)  # as the refresh's tasks form it
        if extra is not None:
            pre.Ax = extra.embeddings(pre, data, "item", np.arange(data.n_users))
            pre.Bx = extra.embeddings(pre, data, "user", np.arange(data.n_items))
        return pre

    @property
    def user_alpha(self) -> np.ndarray | None:
        """α of the training rows on the user side (the item side's unless they differ)."""
        return self.alpha if self.alpha_user is None else self.alpha_user

    def factors(self) -> Preprocessed:
        """What a worker needs besides the part of the data it reads: the factors, B and Bx, O(users + items).

        B stays because a target item's raters are read by every shard that has a target on it: with B the
        user side's fidelity sum is one dot product per target instead of a pass over the raters in each
        shard (a real share of a shard's time at scale). A goes: the item side sums over the shard's own
        users' histories, which it reads once anyway.
        """
        return replace(self, alpha=None, A=None, alpha_user=None, Ax=None)

    def with_alpha(self, alpha: np.ndarray) -> Preprocessed:
        """These factors with the α of one part of the data (in that part's row order), for either side."""
        return replace(self, alpha=alpha, alpha_user=None)


class RepresenterExplainer:
    """Explain (user, item) scores of a factor model by its training interactions, batched.

    Parameters
    ----------
    data : the training interactions the model was fitted on
    pre : the preprocessed model (``Preprocessed.from_model``)
    """

    def __init__(self, data: Interactions, pre: Preprocessed):
        self.data, self.pre = data, pre

    @classmethod
    def of(cls, model: FactorModel, data: Interactions) -> RepresenterExplainer:
        """The explainer of ``model`` on its training table ``data`` (``Preprocessed.from_model``)."""
        return cls(data, Preprocessed.from_model(model, data))

    def scores(self, t: Targets) -> np.ndarray:
        return pair_scores(self.pre.Ut, self.pre.Vt, t.user.astype(np.intp), t.item.astype(np.intp))

    def side_factors(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(F_hist, F_tgt) of a side: the training rows' factors and the targets'."""
        return (self.pre.Vh, self.pre.Vt) if side == "item" else (self.pre.Uh, self.pre.Ut)

    def groups(self, t: Targets, side: str) -> tuple[K.Groups, np.ndarray]:
        """The groups of one side and the factor matrix their targets are scored with (``side_factors``).

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
        g, _ = self.groups(t, "item")
        return K.grouped_attributions(g, self.pre.alpha, *self.side_factors("item"), top_k)

    def user_side(self, t: Targets, top_k: int, search=None) -> K.Attributions:
        """``search``: an approximate top-k for heavy items (``explain.ann.hnsw_search()``); exact by default."""
        g, _ = self.groups(t, "user")
        return K.grouped_attributions(g, self.pre.user_alpha, *self.side_factors("user"), top_k, search)

    def extra(self, t: Targets, side: str) -> np.ndarray | None:
        """The importance of each target's extra row on one side (``explain.extra_rows``), None without one.

        From the embedding computed in preprocessing (Ax, Bx) when there is one, else from this explainer's data,
        which holds the groups' whole rows (a shard's own users' histories)."""
        x = self.pre.extra
        if x is None:
            return None
        u, i = t.user.astype(np.intp), t.item.astype(np.intp)
        E = self.pre.Ax if side == "item" else self.pre.Bx
        if E is not None:
            return pair_scores(E, self.pre.Vt, u, i) if side == "item" else pair_scores(E, self.pre.Ut, i, u)
        rows, tgt = (u, i) if side == "item" else (i, u)
        keys, at = np.unique(rows, return_inverse=True)
        E = x.embeddings(self.pre, self.data, side, keys)
        return pair_scores(E, self.pre.Vt if side == "item" else self.pre.Ut, at.astype(np.intp), tgt)

    def side_sums(self, t: Targets) -> tuple[np.ndarray, np.ndarray]:
        """Exact Σ importance per target, item side and user side (``side_sum``)."""
        return self.side_sum(t, "item"), self.side_sum(t, "user")

    def side_sum(self, t: Targets, side: str, extra: np.ndarray | None = None) -> np.ndarray:
        """Σ importance per target on one side, over every training row of that side (not only the top-k) and
        its extra row (``extra``: its importances if already computed by ``extra``).

        With the side's representer embedding (A = (α⊙R) V_hist for the item side, B = (α⊙R)ᵀ U_hist for the
        user side, computed in preprocessing) it is ⟨A_{i'}, V_tgt_{j'}⟩ or ⟨B_{j'}, U_tgt_{i'}⟩: O(k) per target.
        Without it, one sparse product over the rows this explainer's data holds gives the embedding row
        of every group, then one dot product per target: O(history · k), no per-target pass over history.
        """
        u, i = t.user.astype(np.intp), t.item.astype(np.intp)
        E = self.pre.A if side == "item" else self.pre.B
        extra = self.extra(t, side) if extra is None else extra
        if E is not None:
            out = pair_scores(E, self.pre.Vt, u, i) if side == "item" else pair_scores(E, self.pre.Ut, i, u)
            return out if extra is None else out + extra
        g, _ = self.groups(t, side)
        F_hist, F_tgt = self.side_factors(side)
        alpha = self.pre.alpha if side == "item" else self.pre.user_alpha
        G = len(g.tgt_ptr) - 1
        E = sp.csr_array((alpha[g.hist], g.hist_row, g.hist_ptr), shape=(G, len(F_hist))) @ F_hist
        out = np.empty(len(t))
        out[g.tgt] = pair_scores(E, F_tgt, np.repeat(np.arange(G), np.diff(g.tgt_ptr)), g.tgt_row.astype(np.intp))
        return out if extra is None else out + extra

    def fidelity(self, t: Targets) -> dict:
        """``run_rows.fidelity`` of the targets: each side's miss of the score, relative and absolute."""
        return fidelity(*self.side_sums(t), self.scores(t), self.pre.score_floor)

    def explain(self, t: Targets, top_k: int = 10, top_unobserved: int = 0) -> pa.Table:
        """One row per attribution (schema: ``SCHEMA_FIELDS``), sorted by target, side, importance: each side's
        ``top_k`` most positive and most negative training rows (0: all of them), its extra row, and for iALS on
        request the ``top_unobserved`` largest terms of the unobserved row (kind ``unobserved_term``)."""
        s = self.scores(t)
        tables = []
        for side, attr in (("item", self.item_side(t, top_k)), ("user", self.user_side(t, top_k))):
            terms = None
            if top_unobserved > 0 and isinstance(self.pre.extra, X.UnobservedRows):
                terms = self.pre.extra.top_terms(self.pre, self.data, side, t, top_unobserved)
            tables.append(self.rows(t, s, side, attr, self.extra(t, side), terms))
        return pa.concat_tables(tables)

    def rows(
        self, t: Targets, s: np.ndarray, side: str, a: K.Attributions, extra: np.ndarray | None = None, terms=None
    ) -> pa.Table:
        """The output rows of one side's attributions, its extra rows (``extra``: their importance) and ``terms``
        (``UnobservedRows.top_terms``), by target then decreasing importance (``row_order``)."""
        d = self.data
        more = [] if extra is None else [extra_columns(self.pre.extra, t, side, extra)]
        if terms is not None:
            more.append(term_columns(t, side, *terms))
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
            more,
        )
