"""High-dimensional representer kernels for low-rank models (docs/methods.md §1, paper App. F).

For a target (i', j') and the nuclear-norm solution Θ̂ = ŨṼᵀ:
  item-based (the user's own items):  Θ̂_{i'j'} = Σ_{j:(i',j)∈D} α_{i'j} ⟨Ṽ_j, Ṽ_{j'}⟩
  user-based (other users of j'):     Θ̂_{i'j'} = Σ_{i:(i,j')∈D} α_{ij'} ⟨Ũ_i, Ũ_{i'}⟩
with α_ij = −ℓ'(y_ij, s_ij)/(λ|D|). Both sides have one shape — a *group* (a user's history, or an
item's raters) scored against the group's targets — so one batched routine serves both. The balanced
factors Ũ, Ṽ come from ``kernels.balance``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The element budget: floats in one padded (B, d, max(k, t)) stack of products at most, ~32 MB of float64.
ELEMENT_BUDGET = 1 << 22


# A score below this has no scale: relative errors divide by at least it (``explain.representer.relative_error``).
SCORE_FLOOR = 1e-12


def global_importance(residual: np.ndarray, lam: float | None, n: int) -> np.ndarray:
    """α = −c·ℓ'(y, s)/(λ|D|) from the loss residual r = −c·ℓ'(y, s) (``explain.representer.loss_residual``);
    without λ the factor 1/(λ|D|) is dropped."""
    return residual / (lam * n) if lam else residual


@dataclass
class Groups:
    """Groups of history rows scored against groups of target rows.

    Group g has history positions ``hist[hist_ptr[g]:hist_ptr[g+1]]`` (rows of ``F_hist`` via
    ``hist_row``) and targets ``tgt[tgt_ptr[g]:tgt_ptr[g+1]]`` (rows of ``F_tgt`` via ``tgt_row``).
    ``hist`` indexes the training interactions (for α and for the output); ``tgt`` indexes targets.
    """

    hist_ptr: np.ndarray
    hist: np.ndarray
    hist_row: np.ndarray
    tgt_ptr: np.ndarray
    tgt: np.ndarray
    tgt_row: np.ndarray


@dataclass
class Attributions:
    """Selected attributions: target index, training-interaction index, α, local, α·local."""

    target: np.ndarray
    train: np.ndarray
    global_importance: np.ndarray
    local_importance: np.ndarray

    @property
    def importance(self) -> np.ndarray:
        return self.global_importance * self.local_importance

    @staticmethod
    def concat(parts: list[Attributions]) -> Attributions:
        if not parts:
            e = np.empty(0)
            return Attributions(e.astype(np.int64), e.astype(np.int64), e, e)
        return Attributions(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("target", "train", "global_importance", "local_importance")
            )
        )


def split_heavy_groups(g: Groups, budget: int | None = None) -> Groups:
    """Split the targets of groups whose d×t product would exceed ``budget`` (selection is per target, so exact)."""
    budget = budget or ELEMENT_BUDGET
    d = np.diff(g.hist_ptr)
    t = np.diff(g.tgt_ptr)
    per = np.maximum(1, budget // np.maximum(d, 1))
    pieces = np.where(t > 0, -(-t // per), 0)
    if np.all(pieces <= 1):
        return g
    gid = np.repeat(np.arange(len(d)), np.maximum(pieces, 0))
    first = np.concatenate([[0], np.cumsum(pieces)[:-1]])
    piece = np.arange(len(gid)) - np.repeat(first, np.maximum(pieces, 0))
    starts = g.tgt_ptr[gid] + piece * per[gid]
    stops = np.minimum(starts + per[gid], g.tgt_ptr[gid + 1])
    tgt_idx = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(gid) else np.empty(0, np.int64)
    hist_idx = (
        np.concatenate([np.arange(g.hist_ptr[x], g.hist_ptr[x + 1]) for x in gid])
        if len(gid)
        else np.empty(0, np.int64)
    )
    new_hist_ptr = np.concatenate([[0], np.cumsum(d[gid])])
    new_tgt_ptr = np.concatenate([[0], np.cumsum(stops - starts)])
    return Groups(new_hist_ptr, g.hist[hist_idx], g.hist_row[hist_idx], new_tgt_ptr, g.tgt[tgt_idx], g.tgt_row[tgt_idx])


# With top-k selection, rows at least this long (heavy items) are computed as (B, t, d) = T·(α⊙H)ᵀ and
# selected in float64; shorter ones as (B, d, t) = H·Tᵀ with contiguous operands, which numpy multiplies
# twice as fast for small stacks, then scaled and cast in one pass.
LONG_ROW = 2048

# Top-k selection by the compiled kernel (``fused_attributions``) rather than the numpy stacks below:
# faster on both benchmark sets (``python -m benchmarks.scaling.explain_throughput``, docs/scaling.md).
FUSED = True

# Rows at least this many times longer than top_k are selected by threshold pruning (see below).
PRUNE_FACTOR = 50


def _select_top_k(imp: np.ndarray, top_k: int, d_real: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices (b, t, d) of the top_k largest positive and top_k most negative entries of a C-ordered
    (B, t, d) array along its last axis, selected on the values as given (see ``_select_flat``)."""
    flat = _select_flat(imp, lambda f: imp.reshape(-1)[f], top_k, d_real)
    return np.unravel_index(flat, imp.shape)


def _select_flat(x: np.ndarray, value, top_k: int, d_real: int | None = None) -> np.ndarray:
    """C-order flat indices of each row's top_k largest positive and top_k most negative entries.

    ``x`` is the (B, t, d) importance, C-ordered: a float32 copy (then ``value(flat)`` returns the
    exact float64 values) or the float64 values themselves. Rounding to float32 is monotone, so a
    float32 threshold that is ≤ the float32 k-th largest passes every true top-k entry; only rows with float32
    ties get more than k candidates, and only those are ranked, in float64 — the result is exact. Short rows take their
    threshold from a float32 sort (vectorised; an index-returning ``argpartition`` with two kth is
    far slower). Long rows (heavy items) take it by pruning over
    the first ``d_real`` entries, which are real (not padding) in every row. Zeros (padding
    included; also magnitudes below float32's smallest subnormal) are never selected.
    """
    d = x.shape[-1]
    d_real = d if d_real is None else d_real
    k = min(top_k, d)
    if d_real >= PRUNE_FACTOR * k:
        tau_hi, tau_lo = _pruning_thresholds(x, k, d_real)
    else:
        srt = np.sort(x, axis=-1)
        tau_hi, tau_lo = srt[..., d - k], srt[..., k - 1]
    tiny = np.finfo(np.float32).smallest_subnormal
    tau_hi = np.maximum(tau_hi, tiny)[..., None]  # only positives qualify
    tau_lo = np.minimum(tau_lo, -tiny)[..., None]  # only negatives qualify
    flat = np.flatnonzero((x >= tau_hi) | (x <= tau_lo))  # one pass; τ_lo < 0 < τ_hi keeps sides apart
    positive = x.reshape(-1)[flat] > 0
    return np.concatenate(
        [_best_per_row(flat[positive], value, d, k, -1.0), _best_per_row(flat[~positive], value, d, k, 1.0)]
    )


def _pruning_thresholds(x: np.ndarray, k: int, d_real: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k-th largest of m = 4k chunk maxima and the k-th smallest of the chunk minima.

    The chunk maxima are distinct entries, so at least k entries are ≥ the k-th largest of them,
    which therefore bounds the row's k-th largest from below. A few streaming passes (chunk max/min,
    compare, flat nonzero) leave a handful of candidates per row — instead of sorting the whole
    (B, t, d) stack, which costs several times the matmul for heavy items.
    """
    m = 4 * k
    starts = np.arange(m) * (d_real // m)
    head = x[..., :d_real]
    maxima = np.maximum.reduceat(head, starts, axis=-1)  # (B, t, m)
    minima = np.minimum.reduceat(head, starts, axis=-1)
    return np.partition(maxima, m - k, axis=-1)[..., m - k], np.partition(minima, k - 1, axis=-1)[..., k - 1]


def _best_per_row(flat: np.ndarray, value, d: int, k: int, sign: float) -> np.ndarray:
    """The k best of the candidate flat indices in each row of length d: largest for sign −1, smallest for +1.

    Rows with at most k candidates keep them all; only rows with more (float32 ties, or pruning
    survivors) are ranked, by their exact ``value``.
    """
    row = flat // d
    over = np.bincount(row)[row] > k if len(row) else np.zeros(0, bool)
    if not over.any():
        return flat
    sub = flat[over]
    order = np.lexsort((sign * value(sub), row[over]))  # by row, then best first
    r = row[over][order]
    rank = np.arange(len(r)) - np.searchsorted(r, r, side="left")
    return np.concatenate([flat[~over], sub[order[rank < k]]])


def _pair_dots(A: np.ndarray, ia: np.ndarray, B: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """⟨A_ia, B_ib⟩ per pair, for rows of (…, k) arrays at flat row indices (np.take of flat rows, not
    3-D fancy indexing such as A[bb, tt], which is several times slower)."""
    k = A.shape[-1]
    return np.einsum("ij,ij->i", np.take(A.reshape(-1, k), ia, axis=0), np.take(B.reshape(-1, k), ib, axis=0))


def _local_at(L: np.ndarray, bb: np.ndarray, tt: np.ndarray, dd: np.ndarray) -> np.ndarray:
    """``L[bb, dd, tt]`` of the C-contiguous (B, d, t) product, by flat offsets (3-D fancy indexing is slower)."""
    _, d, t = L.shape
    return L.reshape(-1)[(bb * d + dd) * t + tt]


def heavy_groups(g: Groups, budget: int | None = None) -> np.ndarray:
    """Groups with at least ``LONG_ROW`` history rows whose history × targets product exceeds ``budget``."""
    d, t = np.diff(g.hist_ptr), np.diff(g.tgt_ptr)
    return np.flatnonzero((d >= LONG_ROW) & (d * t > (budget or ELEMENT_BUDGET)))


def without_groups(g: Groups, drop: np.ndarray) -> Groups:
    """``g`` minus the groups ``drop`` (their history and targets removed)."""
    keep = np.ones(len(g.hist_ptr) - 1, bool)
    keep[drop] = False
    h = np.repeat(keep, np.diff(g.hist_ptr))
    t = np.repeat(keep, np.diff(g.tgt_ptr))
    return Groups(
        np.concatenate([[0], np.cumsum(np.diff(g.hist_ptr)[keep])]),
        g.hist[h],
        g.hist_row[h],
        np.concatenate([[0], np.cumsum(np.diff(g.tgt_ptr)[keep])]),
        g.tgt[t],
        g.tgt_row[t],
    )


def streamed_group_attributions(
    g: Groups,
    x: int,
    alpha: np.ndarray,
    F_hist: np.ndarray,
    F_tgt: np.ndarray,
    top_k: int,
    search=None,
    budget: int | None = None,
) -> Attributions:
    """Top_k positive and negative attributions of one heavy group (say an item with 10⁵ raters).

    The α-scaled history X = α ⊙ F_hist[hist] is gathered once and searched exactly in slices of rows within
    ``budget`` by ``_norm_ordered_top_k``, which stops scanning for a target as soon as no unseen row
    can enter its top_k — so no product larger than the budget, and no second gather of X, is made.

    ``search(X, T, m)``, if given, replaces the slices by an approximate maximum-inner-product search:
    it returns (t, m) candidate rows of X for T (largest ⟨X, T⟩) and for −T, and the candidates are
    then ranked by their exact importance. Only which rows are found is approximate; every value
    reported is exact.
    """
    budget = budget or ELEMENT_BUDGET
    h = np.arange(g.hist_ptr[x], g.hist_ptr[x + 1])
    p = np.arange(g.tgt_ptr[x], g.tgt_ptr[x + 1])
    a_h = alpha[g.hist[h]]
    H = np.take(F_hist, g.hist_row[h].astype(np.intp), axis=0)
    X = H * a_h[:, None]  # (d, k)
    T = np.take(F_tgt, g.tgt_row[p].astype(np.intp), axis=0)  # (t, k)
    if search is None:
        tt, dd = _norm_ordered_top_k(X, T, top_k, budget)
    else:
        tt, dd = _exact_rerank(X, T, search(X, T, top_k), top_k)
    local = np.einsum("ij,ij->i", T[tt], H[dd])  # exact, for the selected pairs
    return Attributions(g.tgt[p[tt]], g.hist[h[dd]], a_h[dd], local)


def _exact_rerank(
    X: np.ndarray, T: np.ndarray, found: tuple[np.ndarray, np.ndarray], top_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(target, row) pairs of each target's top_k of each sign among an approximate search's candidates
    (``found``: (t, m) rows for T and for −T, −1 for none), ranked by their exact ⟨X_i, T_u⟩."""
    d = len(X)
    hi, lo = found
    cand_t = np.repeat(np.arange(len(T)), hi.shape[1] + lo.shape[1])
    cand_d = np.concatenate([hi, lo], axis=1).reshape(-1)
    ok = cand_d >= 0  # a search may return fewer than asked (-1)
    flat = np.unique(cand_t[ok] * d + cand_d[ok])  # sorted; a row found by both queries counts once
    value = np.einsum("ij,ij->i", T[flat // d], X[flat % d])

    def exact(f):
        return value[np.searchsorted(flat, f)]

    keep = np.concatenate(
        [_best_per_row(flat[value > 0], exact, d, top_k, -1.0), _best_per_row(flat[value < 0], exact, d, top_k, 1.0)]
    )
    return keep // d, keep % d


def _norm_ordered_top_k(X: np.ndarray, T: np.ndarray, top_k: int, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(target, row) pairs of each target's exact top_k largest positive and most negative ⟨X_i, T_u⟩.

    Rows are scanned in slices in order of decreasing ‖X_i‖ and each target keeps its running top_k per
    sign. By Cauchy–Schwarz every unseen row has |⟨X_i, T_u⟩| ≤ ‖X_next‖·‖T_u‖, so a target whose
    k-th best of both signs already exceeds that bound is finished and leaves the scan. α makes the
    norms very uneven (a heavy item of the 5M set: median ‖X_i‖ 5.6·10⁻⁴, largest 0.18), so most
    targets finish after a few percent of the rows — an exact search that beats a graph index there
    (``python -m benchmarks.scaling.heavy_items``). Slices grow from 1024 rows, within ``budget`` elements.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    perm = np.argsort(-norms, kind="stable")
    Xs, ns = X[perm], norms[perm]
    t, d, k = len(T), len(X), min(top_k, len(X))
    qn = np.sqrt(np.einsum("ij,ij->i", T, T))
    best = {s: (np.zeros((t, k)), np.full((t, k), -1, np.int64)) for s in (1.0, -1.0)}  # s·value > 0 only
    active = np.arange(t)
    start, r = 0, 1024
    while start < d and len(active):
        r = max(1, min(r, budget // len(active)))
        rows_in = slice(start, min(d, start + r))
        S = T[active] @ Xs[rows_in].T  # (a, r)
        rows = np.arange(rows_in.start, rows_in.stop)
        for s in (1.0, -1.0):
            v, i = best[s]
            allv = np.concatenate([v[active], s * S], axis=1)
            alli = np.concatenate([i[active], np.broadcast_to(rows, S.shape)], axis=1)
            top = np.argpartition(-allv, k - 1, axis=1)[:, :k]
            v[active] = np.take_along_axis(allv, top, axis=1)
            i[active] = np.take_along_axis(alli, top, axis=1)
        start = rows_in.stop
        if start < d:  # the bound on every unseen row (with a margin for rounding in the products)
            bound = ns[start] * qn[active] * (1 + 1e-9)
            kth = np.minimum(best[1.0][0][active].min(axis=1), best[-1.0][0][active].min(axis=1))
            active = active[kth <= bound]
        r *= 2
    tt, dd = [], []
    for s in (1.0, -1.0):
        v, i = best[s]
        found = v > 0
        tt.append(np.nonzero(found)[0])
        dd.append(perm[i[found]])
    return np.concatenate(tt), np.concatenate(dd)


def buckets(g: Groups, k: int, budget: int | None = None):
    """Yield (group indices, padded history length d, padded target count t) per stacked matmul.

    Groups are bucketed by history length in √2 steps and by target count in powers of two;
    each bucket is cut into batches whose (B, d, max(k, t)) stack stays within ``budget`` floats.
    """
    budget = budget or ELEMENT_BUDGET
    d_all, t_all = np.diff(g.hist_ptr), np.diff(g.tgt_ptr)
    live = np.flatnonzero((d_all > 0) & (t_all > 0))
    # History lengths in √2 steps (≤ 41% padding, which argpartition would pay for); targets in powers of 2.
    level = np.ceil(2 * np.log2(np.maximum(d_all, 1))).astype(np.int64) * 64 + np.ceil(
        np.log2(np.maximum(t_all, 1))
    ).astype(np.int64)
    for lv in np.unique(level[live]):
        members = live[level[live] == lv]
        d, t = int(d_all[members].max()), int(t_all[members].max())
        step = max(1, budget // (d * max(k, t)))
        for a in range(0, len(members), step):
            yield members[a : a + step], d, t


def fused_attributions(g: Groups, alpha: np.ndarray, F_hist: np.ndarray, F_tgt: np.ndarray, top_k: int) -> Attributions:
    """``grouped_attributions`` (top_k > 0, no heavy groups) by the compiled score-and-select kernel
    (``representer_fused``): the same attributions, without the padded stacks and their memory passes."""
    from .representer_fused import fused_group_top_k  # numba compiles (or loads its cache) on first use

    d, t = np.diff(g.hist_ptr), np.diff(g.tgt_ptr)
    room = int(np.sum(t * 2 * np.minimum(top_k, d)))
    out = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room), np.empty(room))
    ints = [np.asarray(x, np.int64) for x in (g.hist_ptr, g.hist, g.hist_row, g.tgt_ptr, g.tgt, g.tgt_row)]
    floats = [np.ascontiguousarray(x, np.float64) for x in (alpha, F_hist, F_tgt)]
    n = fused_group_top_k(*ints, *floats, int(top_k), *out)
    return Attributions(*(x[:n] for x in out))


def grouped_attributions(
    g: Groups,
    alpha: np.ndarray,
    F_hist: np.ndarray,
    F_tgt: np.ndarray,
    top_k: int,
    search=None,
    fused: bool | None = None,
) -> Attributions:
    """Score every group's history against its targets: I = α ⊙ (F_tgt[tgt] F_hist[hist]ᵀ).

    Groups are bucketed by (history, targets) length and each bucket is one stacked matmul: for
    ordinary rows (B, d, k) @ (B, k, t) of contiguous operands (a transposed operand halves numpy's
    matmul rate there), with α applied to the product while it is cast to float32 for selection; for
    heavy items (d ≥ ``LONG_ROW``) (B, t, k) @ (B, k, d) with α folded into the history rows, selected
    in float64 without a cast. Either way selection is exact (see ``_select_flat``). Padded history
    has α = 0 and padded targets a zero row, so their importance is exactly 0 and is never selected
    (``top_k=0`` keeps all real pairs by mask and reports the local importance for them).

    Groups whose (history × targets) product exceeds the budget (the user side of popular items) go to
    ``streamed_group_attributions`` instead, exactly or through an approximate ``search``.

    ``fused`` (default ``FUSED``) selects the rest with the compiled kernel (``fused_attributions``);
    this numpy path is its reference in the tests.
    """
    fused = FUSED if fused is None else fused
    if top_k > 0:
        heavy = heavy_groups(g)
        if len(heavy):
            streamed = [streamed_group_attributions(g, x, alpha, F_hist, F_tgt, top_k, search) for x in heavy]
            rest = grouped_attributions(without_groups(g, heavy), alpha, F_hist, F_tgt, top_k, fused=fused)
            return Attributions.concat([rest] + streamed)
        if fused:
            return fused_attributions(g, alpha, F_hist, F_tgt, top_k)
    elif search is not None:
        raise ValueError("an approximate search needs top_k > 0")
    g = split_heavy_groups(g)
    d_all = np.diff(g.hist_ptr)
    t_all = np.diff(g.tgt_ptr)
    # Padding points at a real row (position 0) instead of an appended zero row, so no O(n) copy of
    # the factors or of α is made per call: padded history gets α = 0 (importance exactly 0) and
    # padded target rows of the small T stack are zeroed. np.take gathers rows faster than F[idx].
    hist_row = g.hist_row.astype(np.intp)
    tgt_row = g.tgt_row.astype(np.intp)
    parts = []
    for b, d, t in buckets(g, F_hist.shape[1]):
        od, ot = np.arange(d), np.arange(t)
        hv = od[None, :] < d_all[b][:, None]  # (B, d) real history entries
        tv = ot[None, :] < t_all[b][:, None]  # (B, t) real targets
        hpos = np.where(hv, g.hist_ptr[b][:, None] + od[None, :], 0)
        tpos = np.where(tv, g.tgt_ptr[b][:, None] + ot[None, :], 0)
        H = np.take(F_hist, hist_row[hpos], axis=0)  # (B, d, k)
        Tt = np.take(F_tgt, tgt_row[tpos], axis=0)  # (B, t, k)
        Tt[~tv] = 0.0
        a_b = np.where(hv, alpha[g.hist[hpos]], 0.0)  # (B, d)
        if top_k > 0 and d >= LONG_ROW:
            # Heavy items: the (B, t, d) importance straight from BLAS with α folded into the history
            # rows (d·k work, less than t·d when t > k); pruning selects on it in float64, no cast.
            imp = np.matmul(Tt, (H * a_b[:, :, None]).transpose(0, 2, 1))
            bb, tt, dd = _select_top_k(imp, top_k, int(d_all[b].min()))
            local = _pair_dots(Tt, bb * t + tt, H, bb * d + dd)  # exact, for the few selected pairs
        else:
            # (B, d, t) = H·Tᵀ with contiguous operands (twice numpy's rate of a transposed operand on
            # small stacks); α applied, laid out as (B, t, d) and cast for selection in one pass.
            L = np.matmul(H, np.ascontiguousarray(Tt.transpose(0, 2, 1)))  # (B, d, t) local importances
            if top_k > 0:
                x = np.empty((len(b), t, d), np.float32)
                np.multiply(L.transpose(0, 2, 1), a_b[:, None, :], out=x, casting="same_kind")

                def importance(f):  # exact float64 α·local at flat indices of x
                    bb, tt, dd = np.unravel_index(f, x.shape)
                    return a_b[bb, dd] * _local_at(L, bb, tt, dd)

                flat = _select_flat(x, importance, top_k, int(d_all[b].min()))
                bb, tt, dd = np.unravel_index(flat, x.shape)
            else:
                bb, tt, dd = np.nonzero(hv[:, None, :] & tv[:, :, None])
            # From the batched product: recomputing each selected pair from its two rows would give the
            # same bits whatever the batch, but doubled the user side's time (random row gathers).
            local = _local_at(L, bb, tt, dd)
        bd = bb * d + dd
        parts.append(
            Attributions(g.tgt[tpos.reshape(-1)[bb * t + tt]], g.hist[hpos.reshape(-1)[bd]], a_b.reshape(-1)[bd], local)
        )
    return Attributions.concat(parts)
