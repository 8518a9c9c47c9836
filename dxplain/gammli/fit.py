"""Fitting GAMMLI in its three stages (the paper's Algorithm 2) over parts of the interactions, on a mapper.

1. main effects: intercept + every feature's effect, ranked by D(h), the best prefix kept (s₁);
2. manifest interactions on the stage-1 residual: every user×item feature pair screened alone, the
   ``max_pairs`` largest fitted jointly, the best prefix kept (s₂);
3. latent interactions: (K, L, λ) by the coarse-to-fine grid; the chosen additive terms refitted jointly;
   backfitting rounds (additive terms on y − ⟨U,V⟩, latent part on the new residual); the group-constrained
   ALS to its tolerance.

Selection uses a seeded validation share of the training rows (half of it whole held-out users); the chosen
terms and (K, L, λ) are then refitted on every training row. The interactions live in parts on the mapper,
built there from the file's chunks (``build_parts``; the same as ``make_parts`` of the whole table): sorted
by user for the Gram passes and the user half-steps, by item for the item half-steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..io.checkpoints import NoCheckpoints
from ..io.features import FeatureTable
from ..io.ratings import check_labels, read_ratings_chunk
from ..io.tables import TableChunk
from ..mapper import LocalMapper, peak_rss_mib
from .additive import choose_prefix, fit_groups, n_validation, put_one, screen_pairs, select_terms
from .latent import RIDGE_SHARE, fit_backfitted, latent_variance, training_residuals
from .model import INTERCEPT, GAMMLIModel, candidate_terms, index_pairs
from .select import grid_search, grid_table, latent_groups
from .terms import Additive, Term, cluster_matrix, encode_features


@dataclass(frozen=True)
class Config:
    """Hyperparameters of a fit (the flow's options)."""

    task: str = "regression"
    rank: int = 3
    smooth: float | None = None
    max_pairs: int = 10
    val_fraction: float = 0.1
    K: int | None = None
    L: int | None = None
    lam: float | None = None
    grid_rounds: int = 2
    n_parts: int = 4
    seed: int = 0
    tol: float = 1e-10
    max_sweeps: int = 500
    backfit: int = 3


# The P-spline penalty per training row, when not given: chosen per stage (main effects, interactions) as
# the value of this grid whose joint fit has the lowest validation loss. On eq. 6 the old fixed 1e-3
# flattened the steep sin(2πx₂z₃) and exp(−4(z₂ + x₃)) interactions.
SMOOTH_GRID = (1e-5, 1e-4, 1e-3, 1e-2)
# The share of the validation rows that belong to users held out whole (``validation_rows``).
COLD_SHARE = 0.5
NO_CHECKPOINTS = NoCheckpoints()  # stateless: one instance serves every call


def make_parts(u, i, y, val, n_users: int, n_items: int, n_parts: int) -> dict[str, list]:
    """``{side: [(part, lo, hi)]}``: the rows cut into ≤ n_parts contiguous entity ranges of each side, with
    about equal row counts, covering every entity 0..n−1 (ranges with no rows included)."""
    out = {}
    for side, own, n in (("user", u, n_users), ("item", i, n_items)):
        order = np.argsort(own, kind="stable")
        indptr = np.searchsorted(own[order], np.arange(n + 1))
        cuts = np.unique(np.searchsorted(indptr, np.linspace(0, len(own), n_parts + 1), side="left").clip(0, n))
        cuts[0], cuts[-1] = 0, n
        cuts = np.unique(cuts)
        parts = []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            sel = order[indptr[lo] : indptr[hi]]
            parts.append(({"u": u[sel], "i": i[sel], "y": y[sel], "val": val[sel]}, int(lo), int(hi)))
        out[side] = parts
    return out


def validation_rows(u: np.ndarray, n_users: int, share: float, seed: int) -> np.ndarray:
    """The validation rows: about ``share`` of them, half drawn row by row and half as every row of users
    held out whole. Warm rows alone choose (K, L, λ) for known users only: on eq. 6 they preferred K = 2
    user groups, whose centroids then served new users badly (cold RMSE 1.33 against 1.08 at K = 10);
    held-out users make the grid pay for the cold start the clusters exist for (the paper's §4.3)."""
    rng = np.random.default_rng(seed)
    return (rng.random(len(u)) < share * (1 - COLD_SHARE)) | (rng.random(n_users) < share * COLD_SHARE)[u]


@dataclass(frozen=True)
class Rows:
    """Training rows already indexed into the feature tables: the in-memory source, read as one chunk."""

    u: np.ndarray
    i: np.ndarray
    y: np.ndarray

    def __call__(self, chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.u, self.i, self.y


@dataclass(frozen=True)
class RatingsFile:
    """A ratings file read chunk by chunk on the workers, each chunk's ids indexed into the feature tables."""

    users: FeatureTable
    items: FeatureTable
    task: str = "regression"
    cold_start_missing: bool = False
    what: str = "--dataset"

    def __call__(self, chunk: TableChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        uid, iid, y = read_ratings_chunk(chunk, self.what)
        if self.task == "classification":
            check_labels(y, f"{self.what} {chunk.path}")
        u, i = index_pairs(self.users, self.items, uid, iid, self.cold_start_missing)
        return u, i, y


def _load(read, chunk, n_users, n_items) -> dict:
    """A chunk's rows that have features on both sides, with their row numbers in the chunk."""
    u, i, y = read(chunk)
    keep = (u < n_users) & (i < n_items)  # an id with no features (--cold-start-missing) cannot be fitted
    return {"u": u[keep], "i": i[keep], "y": y[keep], "row": np.flatnonzero(keep), "n_read": len(y)}


def _counts(rows, n_users, n_items):
    return rows["n_read"], np.bincount(rows["u"], minlength=n_users), np.bincount(rows["i"], minlength=n_items)


def _split(rows, start, held_out, cuts, share, seed) -> dict:
    """The chunk's rows cut by the parts they belong to ({side: [piece per part]}), in chunk order, with the
    validation flag ``validation_rows`` would give them: the row draws are the seed's stream from the
    chunk's first row on (PCG64 advanced), so the flags do not depend on how the table was chunked."""
    bits = np.random.PCG64(seed)
    bits.advance(start)
    draw = np.random.Generator(bits).random(rows["n_read"])[rows["row"]]
    val = (draw < share * (1 - COLD_SHARE)) | held_out[rows["u"]]
    out = {}
    for side, own in (("user", rows["u"]), ("item", rows["i"])):
        part = np.searchsorted(cuts[side], own, side="right") - 1
        out[side] = [
            {"u": rows["u"][sel], "i": rows["i"][sel], "y": rows["y"][sel], "val": val[sel]}
            for sel in (np.flatnonzero(part == p) for p in range(len(cuts[side]) - 1))
        ]
    return out


def _piece(split, side, p):
    return split[side][p]


def _part(pieces, side) -> dict:
    """One part: its pieces in chunk order, stably sorted by its side's entity (``make_parts``' order)."""
    cols = {k: np.concatenate([pc[k] for pc in pieces]) for k in ("u", "i", "y", "val")}
    order = np.argsort(cols["u" if side == "user" else "i"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def build_parts(
    mapper, read, chunks: list, n_users: int, n_items: int, n_parts: int, val_fraction: float, seed: int
) -> tuple[dict, dict]:
    """``make_parts`` over the validation flags of ``validation_rows``, built on the workers from ``chunks``
    of a table that ``read`` reads: the caller's process never holds the table, only per-entity counts.

    Four mapped steps: read and index each chunk (kept where it was read); count rows per user and item,
    reduced here into the parts' entity ranges; cut each chunk by part; gather each part's pieces. Returns
    ``({side: [(part handle, lo, hi)]}, {"n", "n_read", "seen_u", "seen_i", "n_val"})``; the parts equal
    ``make_parts``' on the same rows, bit for bit, however the table is chunked.
    """
    read_h = put_one(mapper, read)
    loaded = mapper.persist(_load, [(read_h, c, n_users, n_items) for c in chunks], name="gammli-read")
    counts = mapper.map(_counts, [(r, n_users, n_items) for r in loaded], name="gammli-count")
    n_read = [c[0] for c in counts]
    cu, ci = sum(c[1] for c in counts), sum(c[2] for c in counts)
    n = int(cu.sum())
    if n == 0:
        raise InputError(
            "no rating of the training table has both a user and an item with features; check that "
            "the ratings' ids match the feature tables' 'user' and 'item' columns"
        )
    cuts = {}
    for side, count in (("user", cu), ("item", ci)):
        indptr = np.concatenate([[0], np.cumsum(count)])
        c = np.unique(np.searchsorted(indptr, np.linspace(0, n, n_parts + 1), side="left").clip(0, len(count)))
        c[0], c[-1] = 0, len(count)
        cuts[side] = np.unique(c)
    # The users held out whole: ``validation_rows``' draws after one per row of the table.
    bits = np.random.PCG64(seed)
    bits.advance(sum(n_read))
    held_out = np.random.Generator(bits).random(n_users) < val_fraction * COLD_SHARE
    starts = np.concatenate([[0], np.cumsum(n_read)[:-1]]).astype(int)
    held_h = put_one(mapper, held_out, broadcast=True)
    split = mapper.persist(
        _split, [(r, int(s), held_h, cuts, val_fraction, seed) for r, s in zip(loaded, starts)], name="gammli-split"
    )
    sides = {}
    for side in ("user", "item"):
        sides[side] = []
        for p, (lo, hi) in enumerate(zip(cuts[side][:-1], cuts[side][1:])):
            pieces = mapper.persist(_piece, [(s, side, p) for s in split], name=f"gammli-piece-{side}")
            (part,) = mapper.persist(_part, [(pieces, side)], name=f"gammli-part-{side}")
            sides[side].append((part, int(lo), int(hi)))
    del loaded, split  # the parts' tasks hold what they still need
    n_val = sum(mapper.map(n_validation, [(p,) for p, _, _ in sides["user"]], name="gammli-count-val"))
    return sides, {"n": n, "n_read": int(sum(n_read)), "seen_u": cu > 0, "seen_i": ci > 0, "n_val": n_val}


def choose_smooth(mapper, parts, terms: list[Term], base: Additive, task: str, grams: list) -> float:
    """The ``SMOOTH_GRID`` value whose joint fit of ``terms`` on the residual of ``base`` (fit rows) has the
    lowest validation loss. ``grams`` as in ``additive.fit_groups``."""
    losses = []
    for smooth in SMOOTH_GRID:
        (joint,), _ = fit_groups(mapper, parts, [terms], base, task, smooth, grams=grams)
        losses.append(choose_prefix(mapper, parts, base, joint, task)[1][-1])
    return SMOOTH_GRID[int(np.argmin(losses))]


def select(mapper, parts, intercept: Term, mains, pairs, Xu, Xi, n_rows, cfg: Config, seconds: dict, log) -> dict:
    """Stages 1 and 2 and the (K, L, λ) grid on the validation rows: what the refit keeps and with which
    settings (names and numbers only, so a rerun can resume after it)."""
    t = time.perf_counter()
    g1, g2 = [], []  # squared loss: each stage's Gram, shared by its smoothing choice and its joint fit
    sm1 = (
        cfg.smooth
        if cfg.smooth is not None
        else choose_smooth(mapper, parts, [intercept] + mains, Additive(), cfg.task, g1)
    )
    s1 = select_terms(mapper, parts, mains, Additive(), cfg.task, sm1, intercept=intercept, grams=g1)
    seconds["stage1"] = time.perf_counter() - t
    log(f"stage 1 (smooth {sm1:g}): kept {len(s1['kept'])} of {len(mains)} main effects: {s1['kept']}")

    t = time.perf_counter()
    candidates, screened = screen_pairs(mapper, parts, pairs, s1["fitted"], cfg.task, sm1, cfg.max_pairs)
    sm2 = (
        sm1
        if cfg.smooth is not None or not candidates
        else choose_smooth(mapper, parts, candidates, s1["fitted"], cfg.task, g2)
    )
    s2 = (
        select_terms(mapper, parts, candidates, s1["fitted"], cfg.task, sm2, grams=g2)
        if candidates
        else {"fitted": Additive(), "ranking": {}, "kept": [], "val_loss": []}
    )
    seconds["stage2"] = time.perf_counter() - t
    log(f"stage 2 (smooth {sm2:g}): kept {len(s2['kept'])} of {len(pairs)} interactions: {s2['kept']}")

    t = time.perf_counter()
    table = grid_table(mapper, parts, n_rows)
    grid = grid_search(
        mapper,
        table,
        s1["fitted"].plus(s2["fitted"]),
        Xu,
        Xi,
        cfg.task,
        cfg.rank,
        cfg.seed,
        cfg.grid_rounds,
        cfg.K,
        cfg.L,
        cfg.lam,
    )
    del table
    seconds["grid"] = time.perf_counter() - t
    return {
        "smooth": [sm1, sm2],
        "stage1": {k: s1[k] for k in ("ranking", "kept", "val_loss")},
        "stage2": {"screened": screened, **{k: s2[k] for k in ("ranking", "kept", "val_loss")}},
        "grid": {"K": int(grid["K"]), "L": int(grid["L"]), "lam": float(grid["lam"]), "grid": grid["grid"]},
    }


def fit_gammli(
    users: FeatureTable,
    items: FeatureTable,
    u: np.ndarray,
    i: np.ndarray,
    y: np.ndarray,
    cfg: Config = Config(),
    mapper=None,
    log=print,
) -> GAMMLIModel:
    """Fit GAMMLI to ratings/labels ``y`` of the pairs (u, i) (rows of the feature tables)."""
    return fit_gammli_chunks(users, items, Rows(u, i, y), [None], cfg, mapper, log)


def fit_gammli_chunks(
    users: FeatureTable,
    items: FeatureTable,
    read,
    chunks: list,
    cfg: Config = Config(),
    mapper=None,
    log=print,
    gather: bool = True,
    checkpoints=NO_CHECKPOINTS,
) -> GAMMLIModel:
    """Fit GAMMLI to the table that ``read(chunk)`` gives as (u, i, y) chunk by chunk (``RatingsFile`` reads
    a file's chunks on the workers); rows whose user or item has no features are left out.

    ``gather=False`` leaves the latent part's training residuals on the mapper (``model.train`` None,
    ``model.train_parts`` their handles, for ``latent.write_training_residuals``): nothing table-sized
    ever comes back to this process. ``checkpoints`` (``io.checkpoints``) keeps the selection (stages 1–2 and
    the grid) once done; a rerun that finds it refits from there."""
    mapper = mapper or LocalMapper()
    seconds, t0 = {}, time.perf_counter()
    fu, fi = encode_features(users), encode_features(items)
    mains, pairs = candidate_terms(users, items, fu, fi)
    t = time.perf_counter()
    sides, rows_info = build_parts(
        mapper, read, chunks, len(users), len(items), cfg.n_parts, cfg.val_fraction, cfg.seed
    )
    seconds["parts"] = time.perf_counter() - t
    log(
        f"parts: {rows_info['n']:,} training rows in {len(chunks)} chunk(s), {len(sides['user'])} user and "
        f"{len(sides['item'])} item parts ({rows_info['n_read'] - rows_info['n']:,} rows without features left out)"
    )
    parts = [p for p, _, _ in sides["user"]]
    intercept = Term(INTERCEPT, "intercept")
    Xu, Xi = cluster_matrix(users, fu), cluster_matrix(items, fi)  # what the K-means clusters are made of

    selection = checkpoints.load("selection")
    resumed = ["selection"] if selection is not None else []
    if selection is None:
        selection = select(mapper, parts, intercept, mains, pairs, Xu, Xi, rows_info["n"], cfg, seconds, log)
        checkpoints.save("selection", selection)
    sm1, sm2 = selection["smooth"]
    s1, s2, grid = selection["stage1"], selection["stage2"], selection["grid"]
    smooth = (sm1, sm2)
    K, L, lam = grid["K"], grid["L"], grid["lam"]
    log(f"grid: K={K} L={L} λ={lam:g} over {len(grid['grid'])} points")

    # Refit the chosen model on every training row: main effects and interactions jointly (the paper's
    # fine-tuning), then stage 3 after backfitting rounds (``latent.fit_backfitted``).
    t = time.perf_counter()
    by_name = {tm.name: tm for tm in mains + pairs}
    chosen = [intercept] + [by_name[n] for n in s1["kept"] + s2["kept"]]
    grams = []  # squared loss: the backfitting refits reuse this Gram of the chosen terms
    (additive,), (D_add,) = fit_groups(mapper, parts, [chosen], Additive(), cfg.task, smooth, use="all", grams=grams)
    seconds["refit_additive"] = time.perf_counter() - t

    t = time.perf_counter()
    groups = latent_groups(Xu, Xi, K, L, cfg.seed)
    additive, D_back, lat, backfit_sweeps = fit_backfitted(
        mapper,
        parts,
        sides,
        additive,
        smooth,
        cfg.task,
        "all",
        groups,
        lam,
        cfg.rank,
        cfg.seed,
        cfg.backfit,
        cfg.tol,
        cfg.max_sweeps,
        grams,
    )
    D_add = D_add if D_back is None else D_back
    if backfit_sweeps:
        log(f"backfitting: {cfg.backfit} rounds, {backfit_sweeps} warm sweeps")
    user_parts = lat["parts"]["user"]
    train = dict(zip("uie", training_residuals(mapper, user_parts, lat["U"], lat["V"], lam))) if gather else None
    seconds["stage3"] = time.perf_counter() - t
    log(f"stage 3: {lat['sweeps']} sweeps, last relative change {lat['change']:.1e}")

    D = {tm.name: float(d) for tm, d in zip(additive.terms[1:], D_add[1:])}
    D["latent"] = latent_variance(mapper, user_parts, lat["U"], lat["V"])
    total = sum(D.values()) or 1.0
    ir = {k: v / total for k, v in sorted(D.items(), key=lambda kv: -kv[1])}
    seconds = {k: round(v, 3) for k, v in seconds.items()} | {"total": round(time.perf_counter() - t0, 3)}
    info = {
        "K": K,
        "L": L,
        "lam": lam,
        "rank": cfg.rank,
        "smooth": {"main": sm1, "interaction": sm2},
        "ir": ir,
        "seconds": seconds,
        "stage1": s1,
        "stage2": s2,
        "grid": grid["grid"],
        "sweeps": lat["sweeps"],
        "backfit_sweeps": backfit_sweeps,
        "relative_change": lat["change"],
        "resumed": resumed,
        "n_train": rows_info["n"],
        "dropped_train": rows_info["n_read"] - rows_info["n"],
        "n_val": rows_info["n_val"],
        "flow_peak_rss_mib": peak_rss_mib(),
    }
    seen_u, seen_i = rows_info["seen_u"], rows_info["seen_i"]
    return GAMMLIModel(
        cfg.task,
        users,
        items,
        {"user": fu, "item": fi},
        additive,
        lat["U"],
        lat["V"],
        lat["U_group"],
        lat["V_group"],
        groups.gu,
        groups.gi,
        lam,
        RIDGE_SHARE * lam,
        train,
        seen_u,
        seen_i,
        info,
        train_parts=None if gather else user_parts,
    )
