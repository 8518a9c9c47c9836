"""Choosing iALS's λ and α (and k) on a validation split by recall@n, then refitting on all the data.

The split holds out a seeded share of each user's positive entries (r > 0); a setting's fit on the rest
ranks every item the user has not kept in training (``kernels.topn.recall_ndcg_at``), and the setting with the
highest recall@n wins, its NDCG@n breaking ties. The chosen model is fitted again on all of D.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from itertools import product

import numpy as np

from ..errors import DegenerateError, InputError
from ..interactions import Interactions
from ..kernels.topn import recall_ndcg_at
from .base import FactorModel
from .ials import IALS

log = logging.getLogger(__name__)

# Grids around each library's defaults (implicit: λ = 0.01, α = 1; Spark: λ = 0.1, α = 1); a λ or α given
# by the user is the grid.
SELECT_LAMS = {"implicit": (0.01, 0.1, 1.0, 10.0), "spark": (0.01, 0.1, 1.0)}
SELECT_ALPHAS = (1.0, 5.0, 20.0)
VALIDATION_SHARE = 0.1
RANK_AT = 20


def validation_split(data: Interactions, share: float, seed: int) -> np.ndarray:
    """A boolean mask of the held-out rows: a seeded ``share`` of each user's positive entries, at least one
    positive kept in training."""
    if not 0.0 < share < 1.0:
        raise InputError(f"share={share}: the validation share must be between 0 and 1, e.g. {VALIDATION_SHARE}")
    rng = np.random.default_rng(seed)
    held = (rng.random(len(data)) < share) & (data.rating > 0)
    ptr = data.user_indptr
    for u in np.flatnonzero(np.add.reduceat(held, ptr[:-1]) == np.diff(ptr)):  # a user with nothing left
        held[ptr[u] : ptr[u + 1]] = False
    return held


def _csr(data: Interactions, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts = np.bincount(data.user[mask], minlength=data.n_users)
    return np.concatenate([[0], np.cumsum(counts)]), data.item[mask].astype(np.intp)


def select(
    data: Interactions,
    trainer: IALS,
    lams=None,
    alphas=None,
    ks=None,
    seed: int = 0,
    share: float = VALIDATION_SHARE,
    n: int = RANK_AT,
) -> FactorModel:
    """The ``trainer``'s model refitted on all of ``data`` with the (k, λ, α) of the best validation recall@n.

    Returns the model with ``settings["selected"]``: the chosen values, the metric, the split, and the grid's
    rows (k, λ, α, recall, NDCG, sweeps, converged)."""
    lams = SELECT_LAMS[trainer.convention] if lams is None else tuple(float(x) for x in lams)
    alphas = SELECT_ALPHAS if alphas is None else tuple(float(x) for x in alphas)
    ks = (trainer.k,) if ks is None else tuple(int(x) for x in ks)
    held = validation_split(data, share, seed)
    if not held.any():
        raise InputError("no user has a positive entry to hold out for validation: --select needs more data")
    train = data.subset(~held)
    seen, valid = _csr(data, ~held), _csr(data, held)
    grid = []
    for k, lam, alpha in product(ks, lams, alphas):
        try:
            m = replace(trainer, k=k, lam=lam, alpha=alpha).fit(train)
        except DegenerateError as e:  # this λ outweighs the data: a grid point that lost, not an error
            grid.append({"k": k, "lam": lam, "alpha": alpha, "recall": None, "ndcg": None, "failed": str(e)})
            log.info("validation: k=%d λ=%g α=%g collapsed the factors", k, lam, alpha)
            continue
        recall, ndcg = recall_ndcg_at(m.U, m.V, *seen, *valid, n)
        grid.append({"k": k, "lam": lam, "alpha": alpha, "recall": recall, "ndcg": ndcg,
                     "sweeps": m.info["sweeps"], "converged": m.info["converged"]})  # fmt: skip
        log.info("validation: k=%d λ=%g α=%g recall@%d=%.4f NDCG@%d=%.4f", k, lam, alpha, n, recall, n, ndcg)
    fitted = [g for g in grid if g["recall"] is not None]
    if not fitted:
        raise DegenerateError(
            f"every setting of --select's grid collapsed the factors on this data: {grid[0]['failed']}"
        )
    best = max(fitted, key=lambda g: (g["recall"], g["ndcg"]))
    model = replace(trainer, k=best["k"], lam=best["lam"], alpha=best["alpha"]).fit(data)
    selected = {
        "k": best["k"],
        "lam": best["lam"],
        "alpha": best["alpha"],
        "metric": f"recall@{n}",
        "validation": {"share": share, "seed": seed, "rows": int(held.sum())},
        "grid": grid,
    }
    return replace(model, settings={**model.settings, "selected": selected})
