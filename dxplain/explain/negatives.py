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

The scan over *all* unobserved pairs keeps the lowest K = p%·|N| in user blocks × the catalogue,
mapped over user shards by any ``Mapper`` (``select_lowest``): each shard returns its K lowest, merged
here in O(K) memory. Shard boundaries are multiples of the block size, so every pair is scored by the
same block computation however many shards there are, and the result is identical.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from scipy.special import expit

from .. import progress
from ..interactions import Interactions
from ..io import spill
from ..io.row_blocks import RowSource, block_ranges, take_rows
from ..io.tables import write_pairs_file
from ..kernels.bce import DenseTerms, SparseTerms, csr_rows
from ..kernels.negatives import LowestK, NegativeScore, scan_rows
from ..kernels.representer import balance_transforms, balance_transforms_from_grams
from ..mapper import LocalMapper, Mapper
from ..models.blocks import Blocks
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


FIA_CHUNK = 1024  # positives per batched 2k×2k solve: (1024, 64, 64) float64 = 32 MB


def negative_score(
    method: str, model: ImplicitModel, terms: DenseTerms | SparseTerms | None, P: Interactions | None, seed: int = 0
) -> NegativeScore:
    """The scoring rule of ``method`` for this model; positives P are the model's training positives
    (FIA needs the terms too). A model in row blocks on the workers is scored by ``part_scores``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
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
    block_rows: int | None = None,
    threshold: float = np.inf,
) -> tuple:
    """The K lowest-scoring unobserved, non-excluded pairs among users rows[0]:rows[1] (default: all).

    Blocks of ``block_rows`` users (default ``scan_rows``, a memory budget) start at rows[0]; ranges
    that start at multiples of it score every pair with the same block computation as a whole scan.
    Only values ≤ ``threshold`` are candidates. Returns (values, users, items) sorted by (value, user, item).
    """
    a0, b0 = rows or (0, terms.n_users)
    step = block_rows or scan_rows(terms.n_items)
    keep = LowestK(K, threshold)
    for a in range(a0, b0, step):
        keep.push_block(_negatives_block(score, terms, a, min(b0, a + step)), a)
    return keep.result()


def estimate_threshold(
    score: NegativeScore,
    terms: DenseTerms,
    K: int,
    block_rows: int | None = None,
    sample_share: float = 0.02,
    margin: float = 1.25,
) -> float:
    """An estimate of a value that at least K negatives reach, from evenly spaced blocks of users.

    Without a bound every shard must buffer its own K lowest, and at p = 1% of 1.6·10⁹ pairs that
    buffering (not the matrix products) was 5/6 of the scan's time (measured). The estimate is the
    ``margin``·p quantile of a ~2% sample; ``lowest`` checks that it held and rescans if not, so the
    result stays exact.
    """
    step = block_rows or scan_rows(terms.n_items)
    starts = np.arange(0, terms.n_users, step)
    stride = max(1, int(round(1 / sample_share)))
    sample = []
    for a in starts[::stride]:
        block = _negatives_block(score, terms, a, min(terms.n_users, a + step))
        sample.append(block[np.isfinite(block)])
    values = np.concatenate(sample)
    if len(values) == 0 or terms.n_neg == 0:
        return np.inf
    q = min(1.0, margin * K / terms.n_neg)
    return float(np.quantile(values, q)) if q < 1.0 else np.inf


def lowest(scan_fn, score: NegativeScore, terms: DenseTerms, K: int, block_rows: int | None = None) -> tuple:
    """The exact K lowest negatives via ``scan_fn(threshold)``: first with an estimated bound, and again
    without one in the rare case fewer than K negatives fell under it."""
    threshold = estimate_threshold(score, terms, K, block_rows)
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


def _negatives_block(score: NegativeScore, terms: DenseTerms, a: int, b: int) -> np.ndarray:
    """Scores of users a:b × the catalogue, with the pairs that are not negatives (positives and
    exclusions) set to +inf so that no selection takes them."""
    block = score.block(a, b)
    for indptr, cols in ((terms.pos_indptr, terms.pos_cols), (terms.excl_indptr, terms.excl_cols)):
        block[csr_rows(indptr, cols, a, b)] = np.inf
    return block


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
    """Contiguous user ranges aligned to blocks of ``step`` rows, about equal in size."""
    n_blocks = -(-n_users // step)
    cuts = np.unique(np.linspace(0, n_blocks, max(1, min(n_shards, n_blocks)) + 1).round().astype(int)) * step
    cuts[-1] = n_users
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def select_lowest(
    score: NegativeScore,
    terms: DenseTerms | SparseTerms,
    percent: float,
    mapper: Mapper | None = None,
    n_shards: int = 1,
    block_rows: int | None = None,
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
    step = block_rows or scan_rows(terms.n_items)
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


def _positive_sum_part(parts, side: str, p: int, F: RowSource) -> np.ndarray:
    """Σ of F's rows over the positives (y = 1) of each row in part p of ``side``: users' S^V (F = Ṽ) from a
    by-user part, items' S^U (F = Ũ) from a by-item part; only the rows of F its positives touch are read."""
    d = parts.read_part(side, p).data
    lo, hi = (int(parts.user_cuts[p]), int(parts.user_cuts[p + 1])) if side == "user" else parts.item_range(p)
    pos = d.rating > 0
    rows, cols = (d.user, d.item) if side == "user" else (d.item, d.user)
    need, local = np.unique(cols[pos], return_inverse=True)
    M = sp.csr_array((np.ones(len(local)), (rows[pos] - lo, local)), shape=(hi - lo, len(need)))
    return M @ take_rows(F, need)


@dataclass(frozen=True)
class PartScore:
    """``negative_score``'s rule for a model kept in row-block files (``models.blocks``), made by each
    by-user part's task for its own negatives (``at``): its users' rows of Us (and A) are its blocks, and
    only the items its negatives touch are read of Vs (and B)."""

    kind: str  # as NegativeScore's
    Us: RowSource
    Vs: RowSource
    A: RowSource | None = None
    B: RowSource | None = None
    coef: float = 1.0
    w: float = 1.0
    seed: int = 0
    keep: tuple = field(default=(), compare=False, repr=False)  # the Blocks behind the files, in the flow only

    def __getstate__(self):
        return {**self.__dict__, "keep": ()}  # tasks get the file names, never the flow's Blocks

    def __copy__(self):
        return self  # immutable; a copy made by pickling would drop ``keep``, and with it the files

    def __deepcopy__(self, memo):
        return self

    def at(self, parts, p: int, items: np.ndarray) -> NegativeScore:
        a = int(parts.user_cuts[p])
        if self.kind == "random":  # noise of the pair: no factor needed
            return NegativeScore("random", None, None, seed=self.seed)
        need = np.unique(items)
        cols = lambda F: None if F is None else take_rows(F, need)  # noqa: E731
        return NegativeScore(
            self.kind,
            _own_rows(self.Us, p),
            cols(self.Vs),
            _own_rows(self.A, p),
            cols(self.B),
            coef=self.coef,
            w=self.w,
            seed=self.seed,
            row0=a,
            items=need,
        )

    def scores(self, parts, p: int, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """``at(parts, p, items).pairs(users, items)``, the same values, with the pairs taken in item order
        one block of Vs (and B) at a time, each read where it lies. ``at`` copies out every row its items
        touch first: at 50M a part's 1.6M negatives touch 1.5M of 3.2M items, 384 MB a factor read at
        random, twice a part (flag's slope from 5M, where the rows it touches are a fifth as many, was 1.23)."""
        if self.kind == "random":
            return self.at(parts, p, items).pairs(users, items)
        a = int(parts.user_cuts[p])
        Us, A = _own_rows(self.Us, p), _own_rows(self.A, p)
        order = np.argsort(items, kind="stable")
        u, i = np.asarray(users)[order], np.asarray(items, np.int64)[order]
        cuts = self.Vs.cuts
        out = np.empty(len(i))
        for b, lo, hi in block_ranges(i, cuts):
            block = lambda F: None if F is None else spill.load(F.paths[b], mmap=True)  # noqa: E731
            rule = NegativeScore(
                self.kind, Us, block(self.Vs), A, block(self.B), coef=self.coef, w=self.w, seed=self.seed, row0=a
            )
            out[order[lo:hi]] = rule.pairs(u[lo:hi], i[lo:hi] - cuts[b])
        return out


def _own_rows(F: RowSource | None, p: int) -> np.ndarray | None:
    """Block p of a users' factor: by-user part p's users, read whole."""
    return None if F is None else spill.load(F.paths[p])


def part_scores(method: str, model: ImplicitModel, parts, seed: int = 0) -> PartScore:
    """``negative_score`` for a model whose factors are row-block files (``models.blocks.Blocks``, U's blocks
    the by-user parts' rows). The representer's balancing transforms come from the blocks' Grams; Ũ, Ṽ,
    S^V (by the by-user parts) and S^U (by the by-item parts) are blocks written by tasks. Nothing
    users × k, or items × k, reaches this process or any one task."""
    if method not in ("representer", "loss", "random"):
        raise ValueError(f"{method!r} needs the model whole; score it with negative_score")
    U, V, w = model.U, model.V, model.neg_weight
    if not (np.array_equal(U.cuts, parts.user_cuts) and np.array_equal(V.cuts, parts.item_cuts)):
        raise ValueError(
            "the model's blocks are not the parts' rows: load it with FactorModel.load(blocks=(mapper, parts))"
        )
    if method in ("loss", "random"):
        return PartScore(method, U.source, V.source, w=w, seed=seed, keep=(U, V))
    T_U, T_V = balance_transforms_from_grams(U.gram(), V.gram())  # k × r: r < k when the rank collapsed
    Ut = U.map(np.matmul, T_U, name="neg-balance", k=T_U.shape[1])
    Vt = V.map(np.matmul, T_V, name="neg-balance", k=T_V.shape[1])
    SV, SU = (
        Blocks.made_by(
            U.mapper,
            U.scratch,
            _positive_sum_part,
            [(parts, side, p, F.source) for p in range(len(cuts) - 1)],
            cuts,
            F.k,
            "neg-positive-sums",
        )
        for side, cuts, F in (("user", parts.user_cuts, Vt), ("item", parts.item_cuts, Ut))
    )
    return PartScore(
        "aggregate",
        Ut.source,
        Vt.source,
        SV.source,
        SU.source,
        coef=-w / (model.lam * model.n_train),
        w=w,
        seed=seed,
        keep=(Ut, Vt, SV, SU),
    )


def part_negatives(parts, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(users, items) of the negatives (y = 0) in by-user part p of a BCE training table, in table order."""
    d = parts.read_part("user", p).data
    neg = d.rating == 0
    return d.user[neg].astype(np.int64), d.item[neg].astype(np.int64)


def _scored(score: NegativeScore | PartScore, parts, p: int) -> tuple:
    """(users, items, scores) of part p's negatives."""
    u, i = part_negatives(parts, p)
    return u, i, score.scores(parts, p, u, i) if isinstance(score, PartScore) else score.pairs(u, i)


def lowest_in_part(score: NegativeScore | PartScore, parts, p: int, K: int) -> tuple:
    """The K lowest-scoring negatives of part p, as ``LowestK.result``, and whether they are all of them."""
    u, i, v = _scored(score, parts, p)
    keep = LowestK(K)
    keep.push(v, u, i)
    return keep.result(), len(v) <= K


# A part's first answer: its share of K (by its rows) with this margin; a part asked again sends K.
SHARE_MARGIN, SHARE_EXTRA = 1.25, 1024


def cleaned_part(score: NegativeScore | PartScore, parts, p: int, last: tuple[float, int, int], folder) -> int:
    """Write part p's negatives that are not flagged (above ``last``, the K-th lowest (value, user, item)
    in ``LowestK``'s order) to ``folder``; their number. The scores are recomputed: the same rows give
    the same values, so the cut is exact."""
    u, i, v = _scored(score, parts, p)
    lv, lu, li = last
    flagged = (v < lv) | ((v == lv) & ((u < lu) | ((u == lu) & (i <= li))))
    write_pairs_file(folder, p, parts.user_ids, parts.item_ids, u[~flagged], i[~flagged])
    return int((~flagged).sum())


def select_lowest_parts(
    score: NegativeScore | PartScore, parts, n_neg: int, percent: float, mapper: Mapper, cleaned_folder=None
) -> tuple:
    """The lowest p% of a BCE training table's negatives (its y = 0 rows), scored where the by-user parts
    are: each part's task returns its K lowest, merged here in O(K) as they finish; the same result as
    ``flag_table`` over the whole list. With ``cleaned_folder``, a second map writes each part's
    unflagged negatives there (a Parquet dataset, one file per part). ``score`` is a ``NegativeScore``
    (sent to every worker) or a ``PartScore`` (``part_scores``: each part's task makes its own rule)."""
    K = int(math.ceil(percent / 100.0 * n_neg))
    n_parts = len(parts.user_cuts) - 1
    score_h = score if isinstance(score, PartScore) else mapper.put(score, broadcast=True)
    # Two rounds, exact: asking every part for the global K lowest made each part at 50M (K = 2M, 1.6M
    # negatives a part) send all its scores to this process, 200M merged here. First each part sends its
    # share of K with a margin; the K-th lowest of what came is a cut. A part that sent all its negatives,
    # or whose last sent value is at or above the cut, holds nothing unsent below it; any other part is
    # asked again for K. (Its unsent values lie above its last sent one, in the total order.)
    rows = np.diff(np.append(parts.user_part_offsets(), parts.n_interactions))  # each by-user part's
    share = np.minimum(K, np.ceil(K * SHARE_MARGIN * rows / max(1, rows.sum())).astype(np.int64) + SHARE_EXTRA)
    keep, last_sent, again = LowestK(K), {}, []
    for done, (p, (result, complete)) in enumerate(
        mapper.imap(lowest_in_part, [(score_h, parts, p, int(share[p])) for p in range(n_parts)], name="neg-parts"),
        start=1,
    ):
        keep.push(*result)
        if not complete and len(result[0]):
            last_sent[p] = (float(result[0][-1]), int(result[1][-1]), int(result[2][-1]))
        progress.update("negatives: score parts", done, n_parts)
    values, users, items = keep.result()
    if last_sent and K:
        cut = (float(values[-1]), int(users[-1]), int(items[-1])) if len(values) == K else (np.inf, 0, 0)
        again = sorted(p for p, e in last_sent.items() if e < cut and share[p] < K)
    if again:
        log.info("negatives: %d of %d parts asked again for their %d lowest", len(again), n_parts, K)
        for n, (result, _) in mapper.imap(lowest_in_part, [(score_h, parts, p, K) for p in again], name="neg-parts"):
            keep.push(*(x[share[again[n]] :] for x in result))  # its first share[p] were sent in the first round
        values, users, items = keep.result()
    if cleaned_folder is not None and len(values):
        last = (float(values[-1]), int(users[-1]), int(items[-1]))
        kept = mapper.map(
            cleaned_part, [(score_h, parts, p, last, cleaned_folder) for p in range(n_parts)], name="neg-cleaned"
        )
        if sum(kept) != n_neg - len(values):
            raise RuntimeError(f"the cleaned parts hold {sum(kept)} negatives, expected {n_neg} − {len(values)}")
    return values, users, items


def flag(method: str, model: ImplicitModel, terms, P: Interactions, percent: float, seed: int = 0) -> tuple:
    """In memory: score with ``method`` and keep the lowest p% of the negatives."""
    t0 = time.perf_counter()
    out = select_lowest(negative_score(method, model, terms, P, seed), terms, percent)
    log.info("%s: flagged %d of %d negatives in %.1fs", method, len(out[0]), terms.n_neg, time.perf_counter() - t0)
    return out
