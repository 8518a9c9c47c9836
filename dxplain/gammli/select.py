"""Choosing (K, L, λ) on the validation rows with the paper's coarse-to-fine grid, one mapper task per point.

Each task clusters users and items by their features (K-means, K and L groups), fits stage 3 on the
training rows of a bounded sample of the table (the whole table when it has at most ``GRID_ROWS`` rows;
else every user of a hashed share of users, with all their rows), and scores the validation rows. A
round is a 3×3×3 grid; the next is centred on the best point with half the (log) spacing.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import InputError
from ..kernels import gammli as G
from ..mapper import LocalMapper
from .additive import n_validation, put_one, rows
from .latent import LatentGroups, fit_latent

GRID_ROWS = 2_000_000
K_MAX = 30
LAM_RANGE = (0.3, 100.0)
GRID_SWEEPS = 60


def clusters(X: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(centroids, group of every row): K-means on the feature matrix."""
    C = G.kmeans(X, n, seed)
    return C, G.nearest(X, C)


def latent_groups(Xu: np.ndarray, Xi: np.ndarray, K: int, L: int, seed: int) -> LatentGroups:
    """Eq. 4's clusters: K-means groups of the users (K) and of the items (L) by their feature rows."""
    return LatentGroups(clusters(Xu, K, seed)[1], clusters(Xi, L, seed)[1], K, L)


def _sample(part, keep_share):
    keep = ((part["u"].astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)) < keep_share * (1 << 32)
    return {k: part[k][keep] for k in ("u", "i", "y", "val")}


def _concat(samples):
    return {k: np.concatenate([s[k] for s in samples]) for k in ("u", "i", "y", "val")}


def grid_table(mapper, parts, n_rows: int):
    """The rows grid tasks train and score on (everything, or a hashed share of users: bounded), assembled
    on the mapper: a handle, for the grid tasks to fetch; it never passes through this process."""
    share = min(1.0, GRID_ROWS / max(n_rows, 1))
    samples = mapper.persist(_sample, [(p, share) for p in parts], name="gammli-grid-sample")
    return mapper.persist(_concat, [(samples,)], name="gammli-grid-table")[0]


def val_loss(task, y, eta) -> float:
    return float(np.mean((y - eta) ** 2)) if task == "regression" else G.log_loss(y, eta)


def _grid_point(table, base, Xu, Xi, K, L, lam, rank, seed, task, sweeps):
    # Scored without backfitting (``latent.fit_backfitted``): on eq. 6 it made every grid point several times
    # slower and chose the same (K, L, λ).
    groups = latent_groups(Xu, Xi, K, L, seed)
    sides = {"user": [(table, 0, len(Xu))], "item": [(table, 0, len(Xi))]}
    fit = fit_latent(LocalMapper(), sides, base, task, "fit", groups, lam, rank, seed, 1e-6, sweeps)
    u, i, y = rows(table, "val")
    return val_loss(task, y, base.eta(u, i) + np.einsum("nk,nk->n", fit["U"][u], fit["V"][i]))


def _axis(lo, hi, center, log_step, integer):
    vals = np.exp(np.log(center) + log_step * np.array([-1.0, 0.0, 1.0]))
    vals = np.clip(vals, lo, hi)
    if integer:
        vals = np.round(vals)
    return sorted(set(float(v) for v in vals))


def grid_search(
    mapper,
    table,
    base,
    Xu,
    Xi,
    task: str,
    rank: int,
    seed: int = 0,
    rounds: int = 2,
    K: int | None = None,
    L: int | None = None,
    lam: float | None = None,
) -> dict:
    """Best (K, L, λ) by validation loss over ``rounds`` coarse-to-fine rounds; a given value is held fixed."""
    if not mapper.map(n_validation, [(table,)], name="gammli-grid-val")[0]:
        raise InputError("the validation split is empty; raise --val-fraction (e.g. 0.1) or give more interactions")
    nu, ni = len(Xu), len(Xi)
    for name, v, n, side in (("K", K, nu, "users"), ("L", L, ni, "items")):
        if v is not None and v > n:
            raise InputError(f"--{name} {v}: larger than the {n} {side} in the feature table; give at most {n}")
    hi_k, hi_l = min(K_MAX, nu), min(K_MAX, ni)
    center = {"K": np.sqrt(2 * hi_k), "L": np.sqrt(2 * hi_l), "lam": np.sqrt(LAM_RANGE[0] * LAM_RANGE[1])}
    step = {
        "K": np.log(hi_k / 2) / 2 if hi_k > 2 else 0.0,
        "L": np.log(hi_l / 2) / 2 if hi_l > 2 else 0.0,
        "lam": np.log(LAM_RANGE[1] / LAM_RANGE[0]) / 2,
    }
    h = {
        "table": table,
        "base": put_one(mapper, base, broadcast=True),
        "Xu": put_one(mapper, Xu, broadcast=True),
        "Xi": put_one(mapper, Xi, broadcast=True),
    }
    history, best = [], None
    for _ in range(rounds):
        Ks = [K] if K else _axis(min(2, hi_k), hi_k, center["K"], step["K"], True)
        Ls = [L] if L else _axis(min(2, hi_l), hi_l, center["L"], step["L"], True)
        lams = [lam] if lam else _axis(*LAM_RANGE, center["lam"], step["lam"], False)
        points = [
            p
            for p in itertools.product(Ks, Ls, lams)
            if (int(p[0]), int(p[1]), p[2]) not in {(h_["K"], h_["L"], h_["lam"]) for h_ in history}
        ]
        losses = mapper.map(
            _grid_point,
            [
                (h["table"], h["base"], h["Xu"], h["Xi"], int(k), int(l), lm, rank, seed, task, GRID_SWEEPS)
                for k, l, lm in points
            ],
            name="gammli-grid",
        )
        history += [{"K": int(k), "L": int(l), "lam": lm, "val_loss": v} for (k, l, lm), v in zip(points, losses)]
        best = min(history, key=lambda r: (r["val_loss"], r["K"], r["L"], r["lam"]))
        center = {"K": best["K"], "L": best["L"], "lam": best["lam"]}
        step = {k: v / 2 for k, v in step.items()}
    return {"K": best["K"], "L": best["L"], "lam": best["lam"], "grid": history}
