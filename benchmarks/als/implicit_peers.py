"""What ``ials_vs_implicit`` compares, each fitted on the same table: the ``implicit`` library's ALS and BPR,
dxplain's iALS (``models.ials.IALS``) and its BCE model with sampled negatives (``models.implicit_mf``, as the
refresh trains it), and the ranking metrics of LightGCN's protocol (recall@N and NDCG@N over a user's held-out
positives, the items the model was fitted on never ranked).

Every fit returns a ``Fit``: user and item factors (a score is ⟨U_u, V_i⟩), its seconds and what the trainer
reports. Each runs on one thread: ``implicit``'s ``num_threads=1``, numba's ``set_num_threads(1)`` and BLAS at
1 (``threadpool_limits``), set by the caller for the whole run.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.sparse as sp

from dxplain.interactions import Interactions
from dxplain.io.partitions import write_partitions
from dxplain.mapper import LocalMapper
from dxplain.models.als.part_half_steps import PartHalfSteps
from dxplain.models.ials import IALS
from dxplain.models.implicit_mf import DEFAULT_RIDGE, ImplicitMF, sample_negatives, training_table
from dxplain.models.policy import IDENTITY_RTOL

# The refresh's implicit-feedback defaults (``flows.refresh``): 4 sampled negatives per positive of weight 1.
NEG_SAMPLES, NEG_WEIGHT = 4, 1.0


@dataclass
class Fit:
    U: np.ndarray
    V: np.ndarray
    seconds: float
    info: dict = field(default_factory=dict)


def binarised(data: Interactions, threshold: float = 4.0) -> Interactions:
    """The ratings ≥ ``threshold`` as positives of value 1, over the same users and items."""
    keep = data.rating >= threshold
    return Interactions.from_indices(
        data.user[keep], data.item[keep], np.ones(int(keep.sum())), data.user_ids, data.item_ids
    )


def split_per_user(P: Interactions, seed: int, held: float = 0.1) -> tuple[Interactions, Interactions, Interactions]:
    """(train, validation, test): of each user's positives, in a seeded random order, round(held·n) to test, the
    next round(held·n) to validation, the rest to train (a user with few positives keeps them all in train)."""
    rng = np.random.default_rng(seed)
    key = rng.random(len(P))
    order = np.lexsort((key, P.user))  # by user, then the random key
    rank = np.empty(len(P), np.int64)
    start = P.user_indptr[P.user[order]]
    rank[order] = np.arange(len(P)) - start
    n_held = np.rint(held * P.user_degree()).astype(np.int64)[P.user]
    test = rank < n_held
    val = ~test & (rank < 2 * n_held)
    return P.subset(~test & ~val), P.subset(val), P.subset(test)


def union(a: Interactions, b: Interactions) -> Interactions:
    """Two disjoint tables over the same ids as one."""
    return Interactions.from_indices(
        np.concatenate([a.user, b.user]),
        np.concatenate([a.item, b.item]),
        np.concatenate([a.rating, b.rating]),
        a.user_ids,
        a.item_ids,
    )


def ranking_metrics(U: np.ndarray, V: np.ndarray, seen: Interactions, held: Interactions, n: int = 20) -> dict:
    """Mean recall@n and NDCG@n over the users with a held-out positive (LightGCN: recall's denominator is the
    user's held-out count, NDCG's ideal has min(count, n) hits; the ``seen`` items are never ranked)."""
    users = np.flatnonzero(held.user_degree() > 0)
    S = np.asarray(U, np.float64)[users] @ np.asarray(V, np.float64).T
    S[seen.by_user()[users].nonzero()] = -np.inf
    top = np.argpartition(-S, n, axis=1)[:, :n]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(S, top, axis=1), axis=1, kind="stable"), axis=1)
    hit = held.by_user()[users].toarray()[np.arange(len(users))[:, None], top] > 0
    count = held.user_degree()[users]
    discount = 1.0 / np.log2(np.arange(2, n + 2))
    ideal = np.cumsum(discount)[np.minimum(count, n) - 1]
    return {
        "recall": float(np.mean(hit.sum(1) / count)),
        "ndcg": float(np.mean((hit * discount).sum(1) / ideal)),
        "users": int(len(users)),
    }


def user_items(data: Interactions) -> sp.csr_matrix:
    """The users × items matrix ``implicit`` fits (float32, its default dtype)."""
    return sp.csr_matrix((data.rating.astype(np.float32), (data.user, data.item)), shape=(data.n_users, data.n_items))


def implicit_als(data: Interactions, k: int, lam: float = 0.01, alpha: float = 1.0, seed: int = 0, **kw) -> Fit:
    """``implicit.cpu.als.AlternatingLeastSquares`` (its defaults: 15 iterations, 3 CG steps, float32)."""
    from implicit.cpu.als import AlternatingLeastSquares

    R = user_items(data)
    model = AlternatingLeastSquares(factors=k, regularization=lam, alpha=alpha, num_threads=1, random_state=seed, **kw)
    t0 = time.perf_counter()
    model.fit(R, show_progress=False)
    return Fit(model.user_factors, model.item_factors, time.perf_counter() - t0, {"iterations": model.iterations})


def implicit_bpr(data: Interactions, k: int, lr: float = 0.01, reg: float = 0.01, seed: int = 0) -> Fit:
    """``implicit.cpu.bpr.BayesianPersonalizedRanking`` (100 epochs by default; its factors carry one more
    column, the item bias against a user column of ones)."""
    from implicit.cpu.bpr import BayesianPersonalizedRanking

    model = BayesianPersonalizedRanking(
        factors=k, learning_rate=lr, regularization=reg, num_threads=1, random_state=seed
    )
    R = user_items(data)
    t0 = time.perf_counter()
    model.fit(R, show_progress=False)
    return Fit(model.user_factors, model.item_factors, time.perf_counter() - t0, {"iterations": model.iterations})


def dxplain_ials(data: Interactions, k: int, lam: float, alpha: float, seed: int = 0, **kw) -> Fit:
    """``IALS`` (implicit convention) trained to its identity bound (``IDENTITY_TOL`` unless ``identity_tol``)."""
    m = IALS(k=k, lam=lam, alpha=alpha, convention="implicit", seed=seed, **kw).fit(data)
    info = {key: m.info[key] for key in ("sweeps", "converged", "identity_bound", "start")}
    return Fit(m.U, m.V, m.info["seconds"], {**info, "identity_tol": m.info["identity_tol"], "grad_norm": m.grad_norm})


def dxplain_bce(data: Interactions, k: int, ridge: float = DEFAULT_RIDGE, seed: int = 0) -> Fit:
    """BCE MF as the refresh trains it (``models.policy``): ``NEG_SAMPLES`` uniform negatives per positive
    (``sample_negatives``, seeded), weight ``NEG_WEIGHT``, λ = ridge/|D|, alternating half-steps over the training
    table's parts on a ``LocalMapper`` to ‖∇f‖ ≤ ``IDENTITY_RTOL``·λ. The sampling and the parts are not timed."""
    table = training_table(data, *sample_negatives(data, NEG_SAMPLES, seed))
    trainer = ImplicitMF(k=k, lam=ridge / len(table), neg_weight=NEG_WEIGHT, rtol=IDENTITY_RTOL, seed=seed)
    with tempfile.TemporaryDirectory(prefix="dxplain-bench-") as tmp:
        parts = write_partitions(tmp, table)
        t0 = time.perf_counter()
        m = trainer.fit_alternating(table, partial(PartHalfSteps, LocalMapper(), parts))
        seconds = time.perf_counter() - t0
    info = {"sweeps": m.info["sweeps"], "newton_steps": m.info["newton_iters"], "grad_norm": m.grad_norm}
    return Fit(m.U, m.V, seconds, {**info, "stationary": bool(m.grad_norm <= IDENTITY_RTOL * m.lam), "lam": m.lam})
