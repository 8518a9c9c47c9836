"""Prototypes: the few weighted training points that explain a whole set of predictions (docs/methods.md §2).

Embed training points and targets with the model's Fisher kernel (``kernels.fisher``), then select
by SBQ (``kernels.sbq``) the points whose weighted embeddings best match the targets' mean embedding.

    phi, phi_T = mf_fisher_embedding(model, data, targets)        # or logistic_embedding(...)
    sel = select(phi, mean_embedding(phi_T), m=20)                  # greedy SBQ, in memory
    prototype_table(sel, data)                                      # who, what, weight, objective
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa
from scipy.special import expit

from .. import progress
from ..errors import UnsupportedModelError
from ..interactions import Interactions, Targets
from ..kernels.fisher import (
    DEFAULT_DAMPING,
    inverse_cholesky,
    mf_fisher_grams,
    mf_halves,
    mf_scores,
    whiten_diagonal,
    whiten_full,
    whiten_lowrank,
)
from ..kernels.pair_halves import PairHalves
from ..kernels.sbq import (
    Selection,
    ShardState,
    as_matrix,
    as_rows,
    greedi,
    greedy,
    greedy_select,
    inner,
    matching_pursuit,
    n_rows,
    shard_state,
    split_rows,
    stochastic_greedy,
)
from ..mapper import LocalMapper, Mapper
from ..models.base import FactorModel
from ..models.biased_mf import KIND as BIASED_KIND
from .representer import check_explainable, negative_weight

log = logging.getLogger(__name__)

VARIANTS = ("greedy", "greedi", "stochastic", "mp")


class Progress:
    """Wraps candidate shards; logs every ~10% of the steps with the objective so far."""

    def __init__(self, shards, m: int, name: str):
        self.shards, self.m, self.name, self.t0, self.steps = shards, m, name, time.perf_counter(), 0

    def best(self):
        return self.shards.best()

    def add(self, cand, d, beta_t):
        self.shards.add(cand, d, beta_t)
        self.steps += 1
        progress.update(f"{self.name}: prototypes", self.steps, self.m)
        if self.steps % max(1, self.m // 10) == 0 or self.steps == self.m:
            el = time.perf_counter() - self.t0
            log.info(
                "%s: %d/%d prototypes chosen in %.1fs (%.3g s/step)", self.name, self.steps, self.m, el, el / self.steps
            )


def _best(state: ShardState):
    return state.best()


def _add(state: ShardState, cand, d: float, beta_t: float) -> ShardState:
    return state.add(cand, d, beta_t)


class MappedShards:
    """Candidate shards held where ``mapper`` runs its tasks, for ``kernels.sbq.greedy_select``.

    Every step each shard reports its best candidate, the caller picks the overall best, and each shard
    appends it to its rows of L⁻¹k_S·: one round trip and O(p + m) bytes per shard, while the O(n·m)
    state stays on the workers. States are chained task by task (state_t = add(state_{t-1}, …)), so a
    lost worker's shard is recomputed from its lineage, and a retried step rewrites identical values.
    """

    def __init__(self, mapper: Mapper, Phi, mu, m: int, n_shards: int):
        ranges = split_rows(n_rows(Phi), n_shards)
        self.mapper = mapper
        parts = mapper.put([Phi[a:b] for a, b in ranges])
        mu_h = mapper.put(mu, broadcast=True)
        self.states = mapper.persist(
            shard_state, [(part, mu_h, m, a) for part, (a, _) in zip(parts, ranges)], name="sbq-init"
        )

    def best(self):
        return self.mapper.map(_best, [(st,) for st in self.states], name="sbq-best")

    def add(self, cand, d, beta_t):
        self.states = self.mapper.persist(_add, [(st, cand, d, beta_t) for st in self.states], name="sbq-add")


def select(
    Phi,
    mu,
    m: int,
    variant: str = "greedy",
    n_shards: int = 1,
    seed: int = 0,
    eps: float = 0.01,
    mapper: Mapper | None = None,
) -> Selection:
    """m prototypes among the rows of Φ for the mean embedding μ, the candidates in ``n_shards`` shards
    on ``mapper`` (this process by default).

    ``greedy`` is the paper's Algorithm 1, exact, with its shards on the mapper; ``greedi`` its two-round
    approximation (GreeDi: greedy on ``n_shards`` random parts as mapper tasks, then over their union);
    ``stochastic`` scores a ⌈(n/m)·log(1/ε)⌉ sample per step; ``mp`` is matching pursuit (both in this
    process).
    """
    mapper = mapper or LocalMapper()
    if variant in ("stochastic", "mp"):  # they multiply Φ whole (a factor model's pairs: their CSR form)
        Phi, mu = as_matrix(Phi, mu)
    if variant == "greedy":
        Phi = as_rows(Phi)
        m = min(m, n_rows(Phi))
        shards = MappedShards(mapper, Phi, mu, m, n_shards)
        return greedy_select(Progress(shards, m, "SBQ greedy"), m, inner(mu, mu))
    if variant == "greedi":
        mu_h = mapper.put(mu, broadcast=True)
        return greedi(
            Phi,
            mu,
            m,
            max(2, n_shards),
            seed,
            lambda parts: mapper.map(greedy, [(p, mu_h, m) for p in mapper.put(parts)], name="greedi"),
        )
    if variant == "stochastic":
        return stochastic_greedy(Phi, mu, m, eps, seed)
    if variant == "mp":
        return matching_pursuit(Phi, mu, m)
    raise ValueError(f"unknown SBQ variant {variant!r}; choose one of {VARIANTS}")


def check_fisher(model: FactorModel, data) -> None:
    """Refuse a model whose Fisher kernel is not the one written here: the per-pair score r·∇s of the squared and
    BCE losses over the free factors (U_i, V_j). A biased-mf model's fixed κ columns are not parameters and its
    biases have their own ridge; iALS's loss sums over every entry, not the stored pairs. Then the representer's
    checks (``check_explainable``)."""
    if model.kind == BIASED_KIND:
        raise UnsupportedModelError(
            "prototypes' Fisher kernel is the plain factor model's; this model is biased-mf (fixed κ columns and "
            "biases with their own ridge): explain it with `dxplain refresh` and `dxplain explain` (exact, with its "
            "bias rows), or run prototypes without --model (it trains ALS-MF)"
        )
    if model.loss == "ials":
        raise UnsupportedModelError(
            "prototypes' Fisher kernel sums over the stored pairs of a squared or BCE loss; this model's loss is "
            "'ials', which sums over every entry, the unobserved ones included: explain it with `dxplain refresh "
            "--model-kind ials` (exact, with its unobserved row), or run prototypes without --model (it trains BCE "
            "on implicit data)"
        )
    check_explainable(model, data)


def sample_scores(
    model: FactorModel, data: Interactions, s: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per training pair, the score's scale r (g = r·∇s) and the expected Fisher weight under the loss.

    Squared loss (Gaussian likelihood): r = y − ŷ, expected weight σ̂² (None: ``mf_fisher_grams`` takes
    the mean r²). BCE: r = c(y − σ(s)), expected weight c²σ(s)(1 − σ(s)), the Bernoulli curvature.
    ``s``: the rows' ⟨U_i, V_j⟩ when computed elsewhere (default: from the model's factors)."""
    if s is None:
        s = model.predict(data.user, data.item) - model.mu
    return residual_terms(model, data.rating, s)


def residual_terms(model: FactorModel, rating: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``sample_scores`` of rows with these ratings (labels) and scores ⟨U_i, V_j⟩."""
    if model.loss != "bce":
        return rating - model.mu - s, None
    c = np.where(rating > 0, 1.0, negative_weight(model))
    p = expit(s)
    return c * (rating - p), c**2 * p * (1 - p)


def mf_fisher_embedding(
    model: FactorModel, data: Interactions, targets: Targets, kind: str = "empirical", damping: float = DEFAULT_DAMPING
):
    """``mf_fisher_rows`` as CSR rows in the (users + items)·k space (for the generic SBQ variants)."""
    Phi, Phi_T = mf_fisher_rows(model, data, targets, kind, damping)
    return Phi.to_csr(data.n_users, data.n_items), Phi_T.to_csr(data.n_users, data.n_items)


def mf_fisher_rows(
    model: FactorModel, data: Interactions, targets: Targets, kind: str = "empirical", damping: float = DEFAULT_DAMPING
) -> tuple[PairHalves, PairHalves]:
    """Fisher embeddings of every training interaction and of the target pairs, for an MF model, as user
    and item halves (``kernels.pair_halves.PairHalves``).

    Training pairs carry their residual (g = r·∇ŷ); targets are predictions without a label, so their
    embedding is F^{-1/2}∇ŷ. F keeps one k×k matrix per user and per item (``kernels.fisher``)."""
    t0 = time.perf_counter()
    check_fisher(model, data)
    residual, curvature = sample_scores(model, data)
    gU, gV = mf_scores(model.U, model.V, data.user, data.item, residual)
    if kind == "identity":
        WU = np.broadcast_to(np.eye(model.k), (data.n_users, model.k, model.k))
        WV = np.broadcast_to(np.eye(model.k), (data.n_items, model.k, model.k))
    else:
        FU, FV = mf_fisher_grams(model.U, model.V, data.user, data.item, residual, kind, curvature)
        WU, WV = inverse_cholesky(FU, damping), inverse_cholesky(FV, damping)
    Phi = PairHalves(
        data.user.astype(np.int64), data.item.astype(np.int64), *mf_halves(WU, WV, data.user, data.item, gU, gV)
    )
    tU, tV = mf_scores(model.U, model.V, targets.user, targets.item)
    Phi_T = PairHalves(
        targets.user.astype(np.int64),
        targets.item.astype(np.int64),
        *mf_halves(WU, WV, targets.user, targets.item, tU, tV),
    )
    log.info(
        "Fisher embeddings (%s F): %d training pairs, %d targets, (%d users + %d items)·k=%d in %.1fs",
        kind,
        len(Phi),
        len(Phi_T),
        data.n_users,
        data.n_items,
        model.k,
        time.perf_counter() - t0,
    )
    return Phi, Phi_T


GRADIENT_FISHER = ("empirical", "diagonal", "lowrank", "identity")


def gradient_embedding(G, G_T, fisher: str = "empirical", rank: int | None = None, damping: float = DEFAULT_DAMPING):
    """Fisher embeddings from per-sample gradients computed elsewhere (any model): G (n, p) for the
    training points, G_T for the targets. F is estimated from G: full empirical (p×p Cholesky), its
    diagonal, a rank-``rank`` approximation plus δI (for large p), or the identity."""
    G, G_T = np.asarray(G, dtype=np.float64), np.asarray(G_T, dtype=np.float64)
    if fisher == "empirical":
        phi = whiten_full(G.T @ G / len(G), damping)
    elif fisher == "diagonal":
        phi = whiten_diagonal(G, damping)
    elif fisher == "lowrank":
        phi = whiten_lowrank(G, rank or min(G.shape), damping)
    elif fisher == "identity":
        return G, G_T
    else:
        raise ValueError(f"unknown Fisher approximation {fisher!r}; choose one of {GRADIENT_FISHER}")
    return phi(G), phi(G_T)


def prototype_table(sel: Selection, data) -> pa.Table:
    """One row per prototype in selection order: the training interaction, its quadrature weight, and the
    objective ‖μ_T − Σwφ‖² (relative to its start) after it was added. ``data``: the training table, or
    its ``io.partitions.Partitions`` (only the chosen rows are read)."""
    idx = sel.index
    user, item, rating = (
        data.read_rows(idx) if hasattr(data, "read_rows") else (data.user[idx], data.item[idx], data.rating[idx])
    )
    start = sel.objective[0] if sel.objective[0] > 0 else 1.0
    return pa.table(
        {
            "rank": np.arange(1, len(idx) + 1, dtype=np.int32),
            "user": data.user_ids.take(pa.array(user)),
            "item": data.item_ids.take(pa.array(item)),
            "rating": rating,
            "weight": sel.weights,
            "objective": sel.objective[1 : len(idx) + 1] / start,
        }
    )
