"""Negative-sample aggregation: which negatives are likely false negatives (paper App. C).

Four ways to score a negative (i, j), lower = flag first:

``representer``  I_neg(i,j) = α_ij ⟨[Ũ_i, S^V_i], [S^U_j, Ṽ_j]⟩, α_ij = −w σ(s_ij)/(λ|D|) — Definition 1
                 summed over every positive sharing the user or the item (kernels/negatives.py).
``fia``          the same sum with Fast Influence Analysis (Cheng et al. 2019) in place of Definition 1:
                 the influence of (i,j) on a positive z' = (i',j') through z''s own parameters θ = (U_i', V_j')
                 only, I = −(c ℓ'_ij/|D|) ∇_θ s_ij · H_θ⁻¹ ∇_θ s_z', H_θ the objective's 2k×2k Hessian in θ.
                 With x_z' = H_θ⁻¹ [V_j'; U_i'], the sum is also O(k) per negative:
                 −(w σ(s_ij)/|D|) ⟨[U_i, X^U_i], [X^V_j, V_j]⟩, X^U_i = Σ_{j'} x_U(i,j'), X^V_j = Σ_{i'} x_V(i',j).
``loss``         −(loss of the negative): the highest-loss negatives first.
``random``       seeded uniform noise.

The scan over *all* unobserved pairs keeps the lowest K = p%·|N| in tiles of users × the catalogue,
mapped over user shards by any ``Mapper`` (``select_lowest``): each shard returns its K lowest, merged
here in O(K) memory. Shard boundaries are multiples of the tile's rows, so every pair is scored by the
same tile computation however many shards there are, and the result is identical. The negatives of a
training table kept in parts are scored where the parts are, by ``explain.negatives_parts``.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from scipy.special import expit

from .. import progress
from ..interactions import Interactions
from ..kernels.balance import balance_transforms
from ..kernels.bce import DenseTerms, SparseTerms, csr_rows
from ..kernels.negatives import LowestK, NegativeScore, scan_rows
from ..mapper import LocalMapper, Mapper
from ..models.implicit_mf import ImplicitModel

log = logging.getLogger(__name__)

METHODS = ("representer", "fia", "loss", "random")
# Above this many user×item pairs, "every unobserved pair is a negative" is refused: each BCE gradient
# and the scan cost |U|·|I|·k, hours per gradient at Amazon scale (43M × 15M), where the paper samples.
ALL_UNOBSERVED_MAX_PAIRS = 2_000_000_000


def check_all_unobserved(n_users: int, n_items: int, limit: int | None = None) -> None:
    """Refuse an all-unobserved negative set that is too big to train on and scan, naming the fix
    (``limit``: default ``ALL_UNOBSERVED_MAX_PAIRS``)."""
    limit = ALL_UNOBSERVED_MAX_PAIRS if limit is None else limit
    if n_users * n_items > limit:
        from ..errors import InputError

        raise InputError(
            f"--negatives all: {n_users:,} users × {n_items:,} items = {n_users * n_items:.3g} "
            f"pairs, above the {limit:.0e} that training on every unobserved pair allows (each "
            "gradient costs users × items × k); use sampled negatives, e.g. --negatives 4 (4 per "
            "positive, the paper's setting)"
        )


def check_bce(model) -> None:
    """Refuse a model that is not BCE MF on sampled negatives: every score here (App. C's aggregation, FIA, the
    loss) is that loss's maths, and its α = −wσ(s)/(λ|D|) on the negatives the model was trained with."""
    if getattr(model, "loss", "bce") == "bce":
        return
    from ..errors import UnsupportedModelError

    if model.loss == "ials":
        why = (
            "its loss already sums over every unobserved entry, so the aggregate over them is the unobserved row of "
            "its explanation (`dxplain refresh --model-kind ials`)"
        )
    else:
        why = f"a {model.kind} model of ratings has no negatives (a ratings model's explanation is `dxplain refresh`)"
    raise UnsupportedModelError(
        f"negative-sample aggregation scores a BCE model's sampled negatives; this model's loss is {model.loss!r}: "
        f"{why}. `dxplain negatives` trains its own BCE model: run it without a model"
    )


FIA_CHUNK = 1024  # positives per batched 2k×2k solve: (1024, 64, 64) float64 = 32 MB


def negative_score(
    method: str, model: ImplicitModel, terms: DenseTerms | SparseTerms | None, P: Interactions | None, seed: int = 0
) -> NegativeScore:
    """The scoring rule of ``method`` for this model; positives P are the model's training positives
    (FIA needs the terms too). A model in row-block files on the workers is scored by
    ``negatives_parts.part_scores``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    check_bce(model)
    U, V, w, n = model.U, model.V, model.neg_weight, model.n_train
    if method == "random":
        return NegativeScore("random", U, V, seed=seed)
    if method == "loss":
        return NegativeScore("loss", U, V, w=w)
    if method == "representer":
        T_U, T_V = balance_transforms(U, V)
        Ut, Vt = U @ T_U, V @ T_V
        ones = np.ones(len(P))
        SV = P.by_user(ones) @ Vt  # S^V_i = Σ_{j':(i,j')∈P} Ṽ_j'
        SU = P.by_item(ones) @ Ut  # S^U_j = Σ_{i':(i',j)∈P} Ũ_i'
        return NegativeScore("aggregate", Ut, Vt, SV, SU, coef=-w / (model.lam * n))
    ones = np.ones(len(P))
    xU, xV = fia_directions(model, terms, P)
    XU = _per_positive_sum(P, xU, "user")
    XV = _per_positive_sum(P, xV, "item")
    return NegativeScore("aggregate", U, V, XU, XV, coef=-w / n)


def _per_positive_sum(P: Interactions, X: np.ndarray, by: str) -> np.ndarray:
    """Σ of per-positive rows X (data order) over each user's (``by="user"``) or each item's positives."""
    n_groups = P.n_users if by == "user" else P.n_items
    group = P.user if by == "user" else P.item
    M = sp.csr_array((np.ones(len(P)), (group, np.arange(len(P)))), shape=(n_groups, len(P)))
    return M @ X


def fia_directions(model: ImplicitModel, terms: DenseTerms | SparseTerms, P: Interactions):
    """x_z' = H_θ⁻¹ [V_j'; U_i'] for every positive z' = (i', j'), split into (x_U, x_V), each (|P|, k).

    H_θ = [[A_i' + λI, C], [Cᵀ, B_j' + λI]] with A, B the per-user / per-item curvature Grams of the
    whole objective and C = (ℓ''_z' V_j' U_i'ᵀ + ℓ'_z' I)/|D| the cross term of z''s own loss.
    """
    U, V, lam, n = model.U, model.V, model.lam, model.n_train
    k = U.shape[1]
    A, B = terms.curvature_grams(U, V)
    eye = np.eye(k)
    xU, xV = np.empty((len(P), k)), np.empty((len(P), k))
    u, i = P.user.astype(np.intp), P.item.astype(np.intp)
    for a in range(0, len(P), FIA_CHUNK):
        uu, ii = u[a : a + FIA_CHUNK], i[a : a + FIA_CHUNK]
        Uu, Vi = U[uu], V[ii]
        sig = expit(np.einsum("nk,nk->n", Uu, Vi))
        d1, d2 = (sig - 1.0) / n, sig * (1.0 - sig) / n  # ℓ', ℓ'' of a positive (y = 1, c = 1), over |D|
        C = d2[:, None, None] * np.einsum("nk,nl->nkl", Vi, Uu) + d1[:, None, None] * eye
        H = np.block([[A[uu] + lam * eye, C], [C.transpose(0, 2, 1), B[ii] + lam * eye]])
        x = np.linalg.solve(H, np.concatenate([Vi, Uu], axis=1)[..., None])[..., 0]
        xU[a : a + FIA_CHUNK], xV[a : a + FIA_CHUNK] = x[:, :k], x[:, k:]
    return xU, xV


def scan(
    score: NegativeScore,
    terms: DenseTerms,
    K: int,
    rows: tuple[int, int] | None = None,
    tile_rows: int | None = None,
    threshold: float = np.inf,
) -> tuple:
    """The K lowest-scoring unobserved, non-excluded pairs among users rows[0]:rows[1] (default: all).

    Tiles of ``tile_rows`` users (default ``scan_rows``, a memory budget) start at rows[0]; ranges
    that start at multiples of it score every pair with the same tile computation as a whole scan.
    Only values ≤ ``threshold`` are candidates. Returns (values, users, items) sorted by (value, user, item).
    """
    a0, b0 = rows or (0, terms.n_users)
    step = tile_rows or scan_rows(terms.n_items)
    keep = LowestK(K, threshold)
    for a in range(a0, b0, step):
        keep.push_tile(_negatives_tile(score, terms, a, min(b0, a + step)), a)
    return keep.result()


def estimate_threshold(
    score: NegativeScore,
    terms: DenseTerms,
    K: int,
    tile_rows: int | None = None,
    sample_share: float = 0.02,
    margin: float = 1.25,
) -> float:
    """An estimate of a value that at least K negatives reach, from evenly spaced tiles of users.

    Without a bound every shard must buffer its own K lowest, and on large catalogues that buffering,
    not the matrix products, takes most of the scan's time. The estimate is the
    ``margin``·p quantile of a ~2% sample; ``lowest`` checks that it held and rescans if not, so the
    result stays exact.
    """
    step = tile_rows or scan_rows(terms.n_items)
    starts = np.arange(0, terms.n_users, step)
    stride = max(1, int(round(1 / sample_share)))
    sample = []
    for a in starts[::stride]:
        tile = _negatives_tile(score, terms, a, min(terms.n_users, a + step))
        sample.append(tile[np.isfinite(tile)])
    values = np.concatenate(sample)
    if len(values) == 0 or terms.n_neg == 0:
        return np.inf
    q = min(1.0, margin * K / terms.n_neg)
    return float(np.quantile(values, q)) if q < 1.0 else np.inf


def lowest(scan_fn, score: NegativeScore, terms: DenseTerms, K: int, tile_rows: int | None = None) -> tuple:
    """The exact K lowest negatives via ``scan_fn(threshold)``: first with an estimated bound, and again
    without one in the rare case fewer than K negatives fell under it."""
    threshold = estimate_threshold(score, terms, K, tile_rows)
    out = scan_fn(threshold)
    if len(out[0]) < K and np.isfinite(threshold):
        log.warning(
            "only %d of %d negatives scored ≤ the estimated bound %.4g: rescanning without it",
            len(out[0]),
            K,
            threshold,
        )
        out = scan_fn(np.inf)
    return out


def _negatives_tile(score: NegativeScore, terms: DenseTerms, a: int, b: int) -> np.ndarray:
    """Scores of users a:b × the catalogue, with the pairs that are not negatives (positives and
    exclusions) set to +inf so that no selection takes them."""
    tile = score.tile(a, b)
    for indptr, cols in ((terms.pos_indptr, terms.pos_cols), (terms.excl_indptr, terms.excl_cols)):
        tile[csr_rows(indptr, cols, a, b)] = np.inf
    return tile


def flag_count(terms: DenseTerms | SparseTerms, percent: float) -> int:
    """K = ⌈p% · |N|⌉, the number of negatives to flag."""
    return int(math.ceil(percent / 100.0 * terms.n_neg))


def flag_table(terms: SparseTerms, score: NegativeScore, percent: float) -> tuple:
    """Table mode: the lowest p% of an explicit list of negatives, O(k) each. Same return as ``scan``."""
    neg = terms.y == 0
    u, i = terms.u[neg], terms.i[neg]
    v = score.pairs(u, i)
    keep = LowestK(flag_count(terms, percent))
    keep.push(v, u.astype(np.int64), i.astype(np.int64))
    return keep.result()


def flagged_table(values, users, items, P: Interactions, method: str) -> pa.Table:
    """The output rows: original ids, the score, and the rank (1 = most likely a false negative)."""
    return pa.table(
        {
            "user": P.user_ids.take(pa.array(users)),
            "item": P.item_ids.take(pa.array(items)),
            "score": np.asarray(values, np.float64),
            "rank": np.arange(1, len(values) + 1, dtype=np.int64),
            "method": pa.array([method] * len(values)).dictionary_encode(),
        }
    )


def shard_ranges(n_users: int, step: int, n_shards: int) -> list[tuple[int, int]]:
    """Contiguous user ranges aligned to tiles of ``step`` rows, about equal in size."""
    n_tiles = -(-n_users // step)
    cuts = np.unique(np.linspace(0, n_tiles, max(1, min(n_shards, n_tiles)) + 1).round().astype(int)) * step
    cuts[-1] = n_users
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def select_lowest(
    score: NegativeScore,
    terms: DenseTerms | SparseTerms,
    percent: float,
    mapper: Mapper | None = None,
    n_shards: int = 1,
    tile_rows: int | None = None,
) -> tuple:
    """The lowest p% of the negatives under ``score``: scanned over all unobserved pairs (DenseTerms),
    in user shards on ``mapper``, or ranked from the explicit list (SparseTerms). Returns (values, users,
    items), lowest first.

    The scan runs under the bound that ``lowest`` estimates (and again without, if it did not hold). The
    score's embeddings and the positives' CSR go to every worker once; each shard returns its K lowest.
    """
    if isinstance(terms, SparseTerms):
        return flag_table(terms, score, percent)
    mapper = mapper or LocalMapper()
    K = flag_count(terms, percent)
    step = tile_rows or scan_rows(terms.n_items)
    ranges = shard_ranges(terms.n_users, step, n_shards)
    score_h, terms_h = mapper.put(score, broadcast=True), mapper.put(terms, broadcast=True)

    def scan_shards(threshold: float) -> tuple:
        t0, pairs, keep = time.perf_counter(), 0, LowestK(K)
        shards = mapper.imap(scan, [(score_h, terms_h, K, r, step, threshold) for r in ranges], name="negscan")
        for done, (s, result) in enumerate(shards, start=1):
            keep.push(*result)
            pairs += (ranges[s][1] - ranges[s][0]) * terms.n_items
            log.debug(
                "negative scan: shard %d/%d done, %.3g pairs scored (%.3g pairs/s)",
                done,
                len(ranges),
                pairs,
                pairs / max(time.perf_counter() - t0, 1e-9),
            )
            progress.update("negatives: scan shards", done, len(ranges), f"{pairs:.3g} pairs scored")
        return keep.result()

    return lowest(scan_shards, score, terms, K, step)


def flag(method: str, model: ImplicitModel, terms, P: Interactions, percent: float, seed: int = 0) -> tuple:
    """In memory: score with ``method`` and keep the lowest p% of the negatives."""
    t0 = time.perf_counter()
    out = select_lowest(negative_score(method, model, terms, P, seed), terms, percent)
    log.info("%s: flagged %d of %d negatives in %.1fs", method, len(out[0]), terms.n_neg, time.perf_counter() - t0)
    return out
