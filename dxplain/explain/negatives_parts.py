"""Negative scores for a BCE training table kept in parts: each by-user part's task scores its own negatives.

``select_lowest_parts`` keeps the lowest p% of a parted table's negatives (its y = 0 rows), scored where
the by-user parts are, and optionally writes the unflagged rest; ``part_scores`` makes the scoring rule for
a model kept in row-block files (``models.blocks``), so that nothing users × k reaches one process. The
in-memory scores and the scan over all unobserved pairs are in ``explain.negatives``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .. import progress
from ..io import spill
from ..io.row_blocks import RowSource, block_ranges, take_rows
from ..io.tables import write_pairs_file
from ..kernels.balance import balance_transforms_from_grams
from ..kernels.negatives import LowestK, NegativeScore
from ..mapper import Mapper
from ..models.blocks import Blocks
from ..models.implicit_mf import ImplicitModel
from .negatives import check_bce

log = logging.getLogger(__name__)

# A part's first answer: its share of K (by its rows) with this margin; a part asked again sends K.
SHARE_MARGIN, SHARE_EXTRA = 1.25, 1024


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
    """``negatives.negative_score``'s rule for a model kept in row-block files (``models.blocks``), made by each
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
        touch first: on a large table a part's negatives touch a large share of the items, a factor's worth
        of rows read at random, twice a part."""
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
    """``negatives.negative_score`` for a model whose factors are row-block files (``models.blocks.Blocks``, U's blocks
    the by-user parts' rows). The representer's balancing transforms come from the blocks' Grams; Ũ, Ṽ,
    S^V (by the by-user parts) and S^U (by the by-item parts) are blocks written by tasks. Nothing
    users × k, or items × k, reaches this process or any one task."""
    if method not in ("representer", "loss", "random"):
        raise ValueError(f"{method!r} needs the model whole; score it with negative_score")
    check_bce(model)
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
    ``negatives.flag_table`` over the whole list. With ``cleaned_folder``, a second map writes each part's
    unflagged negatives there (a Parquet dataset, one file per part). ``score`` is a ``NegativeScore``
    (sent to every worker) or a ``PartScore`` (``part_scores``: each part's task makes its own rule)."""
    K = int(math.ceil(percent / 100.0 * n_neg))
    n_parts = len(parts.user_cuts) - 1
    score_h = score if isinstance(score, PartScore) else mapper.put(score, broadcast=True)
    # Two rounds, exact: asking every part for the global K lowest makes each part send nearly all its scores
    # to this process once K is near a part's negatives (every score merged here). First each part sends its
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
