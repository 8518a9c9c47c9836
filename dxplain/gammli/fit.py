"""Fitting GAMMLI in its three stages (the paper's Algorithm 2) over parts of the interactions, on a mapper.

1. main effects: intercept + every feature's effect, ranked by D(h), the best prefix kept (s₁);
2. manifest interactions on the stage-1 residual: every user×item feature pair screened alone, the
   ``max_pairs`` largest fitted jointly, the best prefix kept (s₂);
3. latent interactions: (K, L, λ) by the coarse-to-fine grid, then the group-constrained ALS.

Selection uses a seeded validation share of the training rows; the chosen terms and (K, L, λ) are then
refitted on every training row. The interactions live in parts (``make_parts``): sorted by user for the
Gram passes and the user half-steps, by item for the item half-steps; each is put on the mapper once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..io.features import FeatureTable
from ..mapper import LocalMapper, peak_rss_mib
from .additive import fit_groups, put_one, screen_pairs, select_terms
from .latent import RIDGE_SHARE, fit_latent, training_residuals
from .model import INTERCEPT, GAMMLIModel, candidate_terms
from .select import clusters, grid_search, grid_table
from .terms import Additive, Term, cluster_matrix, encode_features


@dataclass(frozen=True)
class Config:
    """Hyperparameters of a fit (the flow's options)."""

    task: str = "regression"
    rank: int = 3
    smooth: float = 1e-3
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
            sel = order[indptr[lo]:indptr[hi]]
            parts.append(({"u": u[sel], "i": i[sel], "y": y[sel], "val": val[sel]}, int(lo), int(hi)))
        out[side] = parts
    return out


def fit_gammli(users: FeatureTable, items: FeatureTable, u: np.ndarray, i: np.ndarray, y: np.ndarray,
               cfg: Config = Config(), mapper=None, log=print) -> GAMMLIModel:
    """Fit GAMMLI to ratings/labels ``y`` of the pairs (u, i) (rows of the feature tables)."""
    mapper = mapper or LocalMapper()
    seconds, t0 = {}, time.perf_counter()
    val = np.random.default_rng(cfg.seed).random(len(y)) < cfg.val_fraction
    fu, fi = encode_features(users), encode_features(items)
    mains, pairs = candidate_terms(users, items, fu, fi)
    raw = make_parts(u, i, y, val, len(users), len(items), cfg.n_parts)
    sides = {s: [(put_one(mapper, p), lo, hi) for p, lo, hi in ps] for s, ps in raw.items()}
    del raw
    parts = [p for p, _, _ in sides["user"]]
    intercept = Term(INTERCEPT, "intercept")

    t = time.perf_counter()
    s1 = select_terms(mapper, parts, mains, Additive(), cfg.task, cfg.smooth, intercept=intercept)
    seconds["stage1"] = time.perf_counter() - t
    log(f"stage 1: kept {len(s1['kept'])} of {len(mains)} main effects: {s1['kept']}")

    t = time.perf_counter()
    candidates, screened = screen_pairs(mapper, parts, pairs, s1["fitted"], cfg.task, cfg.smooth, cfg.max_pairs)
    s2 = (select_terms(mapper, parts, candidates, s1["fitted"], cfg.task, cfg.smooth) if candidates
          else {"fitted": Additive(), "ranking": {}, "kept": [], "val_loss": []})
    seconds["stage2"] = time.perf_counter() - t
    log(f"stage 2: kept {len(s2['kept'])} of {len(pairs)} interactions: {s2['kept']}")

    t = time.perf_counter()
    Xu, Xi = cluster_matrix(users, fu), cluster_matrix(items, fi)
    table = grid_table(mapper, parts, len(y))
    grid = grid_search(mapper, table, s1["fitted"].plus(s2["fitted"]), Xu, Xi, cfg.task, cfg.rank, cfg.seed,
                       cfg.grid_rounds, cfg.K, cfg.L, cfg.lam)
    del table
    seconds["grid"] = time.perf_counter() - t
    K, L, lam = grid["K"], grid["L"], grid["lam"]
    log(f"grid: K={K} L={L} λ={lam:g} over {len(grid['grid'])} points")

    # Refit the chosen model on every training row.
    t = time.perf_counter()
    by_name = {tm.name: tm for tm in mains + pairs}
    (f1,), (D1,) = fit_groups(mapper, parts, [[intercept] + [by_name[n] for n in s1["kept"]]], Additive(),
                              cfg.task, cfg.smooth, use="all")
    f2, D2 = Additive(), np.zeros(0)
    if s2["kept"]:
        (f2,), (D2,) = fit_groups(mapper, parts, [[by_name[n] for n in s2["kept"]]], f1, cfg.task, cfg.smooth,
                                  use="all")
    additive = f1.plus(f2)
    seconds["refit_additive"] = time.perf_counter() - t

    t = time.perf_counter()
    _, gu = clusters(Xu, K, cfg.seed)
    _, gi = clusters(Xi, L, cfg.seed)
    lat = fit_latent(mapper, sides, additive, cfg.task, "all", gu, gi, K, L, lam, cfg.rank, cfg.seed, cfg.tol,
                     cfg.max_sweeps)
    tu, ti, e = training_residuals(mapper, lat["parts"]["user"], lat["U"], lat["V"], lam)
    seconds["stage3"] = time.perf_counter() - t
    log(f"stage 3: {lat['sweeps']} sweeps, last relative change {lat['change']:.1e}")

    latent = np.einsum("nk,nk->n", lat["U"][tu], lat["V"][ti])
    D = {tm.name: float(d) for tm, d in zip(f1.terms[1:] + f2.terms, list(D1[1:]) + list(D2))}
    D["latent"] = float(((latent - latent.mean()) ** 2).sum() / max(len(latent) - 1, 1))
    total = sum(D.values()) or 1.0
    ir = {k: v / total for k, v in sorted(D.items(), key=lambda kv: -kv[1])}
    seconds = {k: round(v, 3) for k, v in seconds.items()} | {"total": round(time.perf_counter() - t0, 3)}
    info = {"K": K, "L": L, "lam": lam, "rank": cfg.rank, "ir": ir, "seconds": seconds,
            "stage1": {k: s1[k] for k in ("ranking", "kept", "val_loss")},
            "stage2": {"screened": screened, **{k: s2[k] for k in ("ranking", "kept", "val_loss")}},
            "grid": grid["grid"], "sweeps": lat["sweeps"], "relative_change": lat["change"],
            "n_train": int(len(y)), "n_val": int(val.sum()), "flow_peak_rss_mib": peak_rss_mib()}
    seen_u = np.bincount(u, minlength=len(users)) > 0
    seen_i = np.bincount(i, minlength=len(items)) > 0
    return GAMMLIModel(cfg.task, users, items, {"user": fu, "item": fi}, additive, lat["U"], lat["V"],
                       lat["U_group"], lat["V_group"], gu, gi, lam, RIDGE_SHARE * lam, {"u": tu, "i": ti, "e": e}, seen_u, seen_i,
                       info)
