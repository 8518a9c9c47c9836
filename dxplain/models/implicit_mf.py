"""Implicit-feedback MF with weighted binary cross-entropy, trained to a stationary point (paper App. C).

    min_{U,V} (1/|D|) [ −Σ_P log σ(s_ij) − w Σ_N log(1 − σ(s_ij)) ] + (λ/2)(‖U‖²_F + ‖V‖²_F)

The paper's base model: positives P, every other pair a negative with weight w = 0.05. Negatives are
either all unobserved pairs (``negatives="all"``, optionally minus an exclusion list — the cleaned
retrain) or ``negatives=m``: m uniform samples per positive, drawn once for a seed.

As for ALS-MF, the representer identity needs a stationary point, so training stops on ‖∇f‖:
L-BFGS gets close cheaply, a trust-region Newton polish with exact Hessian-vector products finishes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from ..interactions import Interactions, RowStats, TableSummary
from ..kernels.bce import DenseTerms, SparseTerms
from ..kernels.newton import newton_pcg
from ..progress import lbfgs_progress, newton_progress
from .als.losses import BCERows
from .als.trainer import ALSMF
from .base import FactorModel

log = logging.getLogger(__name__)

DEFAULT_NEG_WEIGHT = 0.05
# λ|D| is the ridge on the *summed* loss, the scale the paper's objective is written in. Chosen on a
# validation split of ml-100k for recall@20 (``python -m benchmarks.negatives.appc --select-ridge``, docs/negatives.md).
DEFAULT_RIDGE = 3.0


@dataclass(kw_only=True)
class ImplicitModel(FactorModel):
    """BCE factors: the score s_ij = ⟨U_i, V_j⟩ is a logit (no offset, μ = 0)."""

    neg_weight: float
    negatives: str  # "all" or "sampled"
    mu: float = 0.0
    kind: str = "implicit-mf"
    loss: str = "bce"
    objective_scaling = "(1/|D|) Σ c_ij (softplus(s_ij) − y_ij s_ij) + (λ/2)(‖U‖² + ‖V‖²), c = 1 on P, w on N"

    @classmethod
    def from_stored(cls, m) -> ImplicitModel:
        """From the model store's generic factor model (``FactorModel.load``)."""
        if m.kind != "implicit-mf":
            raise ValueError(f"the stored model is a {m.kind!r} model, not an implicit-feedback BCE model")
        return cls(
            U=m.U,
            V=m.V,
            lam=m.lam,
            n_train=m.n_train,
            neg_weight=m.info["neg_weight"],
            negatives=m.info["negatives"],
            grad_norm=m.grad_norm,
            info=m.info,
        )


def positive_pairs(data: Interactions, threshold: float | None) -> Interactions:
    """P: interactions rated ≥ ``threshold`` (all of them when None, for click/purchase data)."""
    return data if threshold is None else data.subset(data.rating >= threshold)


def dense_terms(P: Interactions, w: float, excluded: tuple[np.ndarray, np.ndarray] | None = None) -> DenseTerms:
    """All unobserved pairs as negatives, minus ``excluded`` (user, item) index pairs (not positives)."""
    ex_u, ex_i = (np.empty(0, np.int64), np.empty(0, np.int64)) if excluded is None else excluded
    key = np.unique(np.asarray(ex_u, np.int64) * P.n_items + np.asarray(ex_i, np.int64))
    pos_key = P.user.astype(np.int64) * P.n_items + P.item
    key = key[~np.isin(key, pos_key)]
    ex_u, ex_i = key // P.n_items, key % P.n_items
    ex_indptr = np.searchsorted(ex_u, np.arange(P.n_users + 1)).astype(np.int64)
    return DenseTerms(P.n_users, P.n_items, P.user_indptr, P.item.astype(np.intp), ex_indptr, ex_i.astype(np.intp), w)


def sparse_terms(P: Interactions, neg_u, neg_i, w: float, excluded=None) -> SparseTerms:
    """An explicit negatives list (minus ``excluded`` pairs) as training terms."""
    neg_u, neg_i = np.asarray(neg_u, np.int64), np.asarray(neg_i, np.int64)
    if excluded is not None:
        keep = ~np.isin(neg_u * P.n_items + neg_i, np.asarray(excluded[0], np.int64) * P.n_items + excluded[1])
        neg_u, neg_i = neg_u[keep], neg_i[keep]
    return SparseTerms.from_pairs(P.n_users, P.n_items, P.user, P.item, neg_u, neg_i, w)


def looks_implicit(data: Interactions) -> bool:
    """Implicit feedback: every interaction has the same rating value (clicks, purchases, reviews as 1.0).

    Centring such ratings makes every target zero, so squared-loss factors are exactly zero: these data
    are explained through a BCE model with sampled negatives instead."""
    lo, hi = data.rating_range()
    return len(data) > 0 and lo == hi


def training_table(P: Interactions, neg_u: np.ndarray, neg_i: np.ndarray) -> Interactions:
    """D = P ∪ N as one table, the label y in ``rating`` (1 on positives, 0 on sampled negatives): what a
    BCE model is fitted on and what its representer attributes over (``terms_of`` goes back)."""
    u = np.concatenate([P.user, np.asarray(neg_u)])
    i = np.concatenate([P.item, np.asarray(neg_i)])
    y = np.concatenate([np.ones(len(P)), np.zeros(len(neg_u))])
    return Interactions.from_indices(u, i, y, P.user_ids, P.item_ids)


def terms_of(table: Interactions, w: float) -> SparseTerms:
    """The BCE terms of a ``training_table``: c = 1 on positives (y = 1), w on negatives (y = 0)."""
    pos = table.rating > 0
    return SparseTerms.from_pairs(
        table.n_users, table.n_items, table.user[pos], table.item[pos], table.user[~pos], table.item[~pos], w
    )


def sample_negatives(P: Interactions, per_positive: int, seed: int | list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``per_positive`` uniform unobserved items per positive (distinct per user, at most every unobserved
    item), deterministic for a seed (an int, or ints as ``numpy.random.default_rng`` takes them); returned
    sorted by (user, item)."""
    rng = np.random.default_rng(seed)
    n_items = P.n_items
    pos_key = P.user.astype(np.int64) * n_items + P.item
    target = np.minimum(per_positive * P.user_degree(), n_items - P.user_degree())
    # Users who need more than half of their unobserved items: draw from the complement directly
    # (rejection sampling would take a coupon collector's number of rounds for them).
    heavy = np.flatnonzero(2 * target > n_items - P.user_degree())
    chosen = [
        u * n_items
        + rng.choice(
            np.setdiff1d(np.arange(n_items), P.item[P.user_indptr[u] : P.user_indptr[u + 1]]), target[u], replace=False
        )
        for u in heavy
    ]
    draws = np.empty(0, np.int64)
    need = target.copy()
    need[heavy] = 0
    light_target = need.copy()
    while need.sum() > 0:
        # Rejection sampling in draw order: drop positives and repeats, redraw each user's shortfall.
        u = np.repeat(np.arange(P.n_users, dtype=np.int64), need + need // 4 + 1)
        draws = np.concatenate([draws, u * n_items + rng.integers(0, n_items, len(u))])
        draws = draws[~np.isin(draws, pos_key)]
        _, first = np.unique(draws, return_index=True)
        draws = draws[np.sort(first)]
        owner = draws // n_items
        order = np.argsort(owner, kind="stable")
        start = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=P.n_users))])
        rank = np.empty(len(draws), np.int64)
        rank[order] = np.arange(len(draws)) - start[owner[order]]
        draws = draws[rank < light_target[owner]]
        need = light_target - np.bincount(draws // n_items, minlength=P.n_users)
    draws = np.concatenate([draws, *chosen])
    keys = np.sort(draws)
    return keys // n_items, keys % n_items


def sample_part(parts, p: int, per_positive: int, seed: int, folder) -> RowStats:
    """By-user part p of the positives' parts with ``per_positive`` sampled negatives per positive
    (``sample_negatives`` over the part's users, seeded by (seed, p): the same for the same partitioning),
    written to ``folder`` as one file of a Parquet dataset in original ids, rating 1 on positives and 0
    on negatives: the rows of the training table D this part's users have. Returns their ``RowStats``."""
    from ..io.tables import write_pairs_file

    a, b = int(parts.user_cuts[p]), int(parts.user_cuts[p + 1])
    d = parts.read_part("user", p).data
    # The part's users as 0..b−a: the sampler's per-user arrays are the part's size, not the catalogue's.
    local = Interactions.from_indices(d.user - a, d.item, d.rating, d.user_ids.slice(a, b - a), d.item_ids)
    nu, ni = sample_negatives(local, per_positive, [seed, p])
    u = np.concatenate([d.user.astype(np.int64), nu + a])
    i = np.concatenate([d.item.astype(np.int64), ni])
    y = np.concatenate([np.ones(len(d)), np.zeros(len(nu))])
    write_pairs_file(folder, p, d.user_ids, d.item_ids, u, i, rating=y)
    return RowStats.of(u, i, y, d.n_users, d.n_items, compact=True)  # a part's users are a range: sent as one


def sample_in_parts(mapper, parts, per_positive: int, seed: int, folder) -> TableSummary:
    """The training table D = P ∪ N written by tasks, one file per by-user part of the positives' ``parts``
    (``sample_part``), to the Parquet dataset ``folder``; its summary, summed as the tasks finish. The
    flow's process holds O(users + items): the negatives are never here."""
    from ..io.tables import remove_folder

    remove_folder(folder)
    tasks = [(parts, p, per_positive, seed, folder) for p in range(len(parts.user_cuts) - 1)]
    stats = RowStats.total(s for _, s in mapper.imap(sample_part, tasks, name="sample-negatives"))
    return TableSummary(parts.user_ids, parts.item_ids, stats)


@dataclass
class ImplicitMF:
    """BCE matrix factorisation.

    Parameters
    ----------
    k : rank
    lam : λ; None = DEFAULT_RIDGE/|D|
    neg_weight : w, the weight of negative terms (paper: 0.05)
    rtol : stop when ‖∇f‖ ≤ rtol·λ. At a stationary point U_i = Σ_j α_ij V_j exactly; off it the
        residual is ∇_{U_i} f/λ, so rtol bounds the representer identity's error in the factors' units.
    max_sweeps : alternating sweeps at most (``fit_alternating``)
    lbfgs_steps : L-BFGS iterations at most (``fit``): not sweeps, each is one evaluation of f and ∇f over
        every term and a line search
    newton_steps : damped Newton steps of the polish at most (either solver)
    seed : initialisation seed
    """

    k: int = 32
    lam: float | None = None
    neg_weight: float = DEFAULT_NEG_WEIGHT
    rtol: float = 1e-4
    max_sweeps: int = 500
    lbfgs_steps: int = 500
    newton_steps: int = 100
    seed: int = 0

    def fit(self, terms: DenseTerms | SparseTerms) -> ImplicitModel:
        t0 = time.perf_counter()
        n = terms.n_terms
        lam = self.lam if self.lam is not None else DEFAULT_RIDGE / n
        tol = self.rtol * lam
        rng = np.random.default_rng(self.seed)
        U = rng.normal(scale=0.1, size=(terms.n_users, self.k))
        V = rng.normal(scale=0.1, size=(terms.n_items, self.k))
        nU, shapeU, shapeV = U.size, U.shape, V.shape

        def split(x):
            return x[:nU].reshape(shapeU), x[nU:].reshape(shapeV)

        def fun_grad(x):
            f, gU, gV = terms.fun_grad(*split(x), lam)
            return f, np.concatenate([gU.ravel(), gV.ravel()])

        def hessp(x, p):
            hU, hV = terms.hessp(*split(x), *split(p), lam)
            return np.concatenate([hU.ravel(), hV.ravel()])

        x = np.concatenate([U.ravel(), V.ravel()])
        res = minimize(
            fun_grad,
            x,
            jac=True,
            method="L-BFGS-B",
            callback=lbfgs_progress(self.lbfgs_steps),
            options={"maxiter": self.lbfgs_steps, "gtol": tol / np.sqrt(len(x)), "ftol": 0.0, "maxcor": 20},
        )
        lbfgs_iters = int(res.nit)
        gnorm = float(np.linalg.norm(res.jac))  # the gradient at res.x, already evaluated
        log.debug("implicit MF: L-BFGS %d iterations, ‖∇f‖=%.2e (%.1fs)", lbfgs_iters, gnorm, time.perf_counter() - t0)
        x, newton, products = res.x, 0, 0
        if gnorm > tol and self.newton_steps > 0:

            def blocks_at(x):
                A, B = terms.curvature_grams(*split(x))
                diagonal = np.arange(self.k)
                A[:, diagonal, diagonal] += lam  # in place: no stacked copy (``trainer.ALSMF._polish``'s)
                B[:, diagonal, diagonal] += lam
                return A, B

            x, gnorm, newton, products = newton_pcg(
                fun_grad, hessp, blocks_at, x, tol, lam, self.newton_steps, callback=newton_progress(self.newton_steps)
            )
        U, V = (a.copy() for a in split(x))
        f = float(fun_grad(x)[0])
        secs = time.perf_counter() - t0
        log.info(
            "implicit MF k=%d λ=%g w=%g |P|=%d |N|=%d: %d L-BFGS + %d Newton steps, ‖∇f‖=%.2e, %.1fs",
            self.k,
            lam,
            terms.w,
            terms.n_pos,
            terms.n_neg,
            lbfgs_iters,
            newton,
            gnorm,
            secs,
        )
        mode = "all" if isinstance(terms, DenseTerms) else "sampled"
        return ImplicitModel(
            U=U,
            V=V,
            lam=lam,
            n_train=n,
            neg_weight=terms.w,
            negatives=mode,
            grad_norm=gnorm,
            info={
                "lbfgs_iters": lbfgs_iters,
                "newton_iters": newton,
                "hessian_products": products,
                "objective": f,
                "seed": self.seed,
                "seconds": secs,
                "n_pos": terms.n_pos,
                "n_neg": terms.n_neg,
                "neg_weight": terms.w,
                "negatives": mode,
            },
        )

    def fit_alternating(self, table: Interactions, half_steps, anderson_store=list) -> ImplicitModel:
        """Train on a ``training_table`` (sampled negatives, y in ``rating``) by alternating exact half-steps
        where its parts are: ``half_steps`` is ``functools.partial(PartHalfSteps, mapper, parts)``
        (``models.als.part_half_steps``).

        Each half-step takes a damped Newton step on every user's (every item's) BCE row problem from the
        previous sweep's rows (to rounding from a cold start: ``models.als.losses.BCERows``); Anderson acceleration
        and the Newton polish of ``ALSMF`` take the pair to ‖∇f‖ ≤ rtol·λ, the same stop as ``fit``, or
        to ``max_sweeps`` sweeps and ``newton_steps`` Newton steps. The passes over D are tasks over the parts.
        With ``PartHalfSteps`` the flow's process holds the factors and V's Anderson history (or
        ``anderson_store``'s files: ``io.spill.SpillList``); with ``models.als.block_half_steps.BlockHalfSteps``
        neither: they are row-block files, and the model's U and V are ``models.blocks.Blocks`` (no Newton polish).
        """
        n = len(table)  # an Interactions or a TableSummary: y is 1 on positives, so Σ y = |P|
        lam = self.lam if self.lam is not None else DEFAULT_RIDGE / n
        trainer = ALSMF(
            k=self.k,
            lam=lam,
            tol=self.rtol * lam,
            max_sweeps=self.max_sweeps,
            newton_steps=self.newton_steps,
            seed=self.seed,
            loss=BCERows(self.neg_weight),
            anderson_store=anderson_store,
        )
        m = trainer.fit(table, half_steps=half_steps)
        n_pos = int(round(table.rating_mean() * n))
        info = {
            **m.info,
            "solver": "alternating",
            "n_pos": n_pos,
            "n_neg": n - n_pos,
            "neg_weight": self.neg_weight,
            "negatives": "sampled",
        }
        log.info(
            "implicit MF (alternating) k=%d λ=%g w=%g |D|=%d: %d sweeps + %d Newton steps, ‖∇f‖=%.2e, %.1fs",
            self.k,
            lam,
            self.neg_weight,
            n,
            info["sweeps"],
            info["newton_iters"],
            m.grad_norm,
            info["seconds"],
        )
        return ImplicitModel(
            U=m.U,
            V=m.V,
            lam=lam,
            n_train=n,
            neg_weight=self.neg_weight,
            negatives="sampled",
            grad_norm=m.grad_norm,
            info=info,
        )
