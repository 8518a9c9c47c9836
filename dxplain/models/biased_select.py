"""Choosing biased MF's rank and regularisers on a validation split (``select``), then refitting on all the data."""

from __future__ import annotations

import logging
from dataclasses import replace
from itertools import product

import numpy as np

from ..errors import InputError
from ..interactions import Interactions
from .als.trainer import DEFAULT_K
from .base import FactorModel
from .biased_mf import BiasedMF

log = logging.getLogger(__name__)

# ``select``'s default grids, as ridges (λ|D|/2, λ_b|D|/2) around the defaults: small, 9 fits at one k.
SELECT_RIDGES = (10.0, 15.0, 20.0)
SELECT_BIAS_RIDGES = (1.0, 3.0, 10.0)
# The grid's fits stop at this miss (the refit at the trainer's own): validation RMSE moves by ~1e-8 from here
# to 1e-9 on ml-100k, and the polish that some settings need for the last decades costs far more than the sweeps.
SELECT_MISS_TOL = 1e-6


def select(
    data: Interactions,
    ks=(DEFAULT_K,),
    lams=None,
    lam_biases=None,
    seed: int = 0,
    share: float = 0.1,
    holdout: np.ndarray | None = None,
    trainer: BiasedMF | None = None,
) -> FactorModel:
    """Choose (k, λ, λ_b) on a validation split by RMSE, then refit on all of ``data``.

    The grids hold the final model's λ and λ_b (for |D| = ``len(data)``); a validation fit on the remaining
    rows D' uses λ·|D|/|D'| (and λ_b likewise): the same ridge λ|D|/2 in every solve, so that the chosen
    setting means the same regularisation of a user's rows in both fits.

    Parameters
    ----------
    data : the interactions
    ks, lams, lam_biases : the grids; lams/lam_biases None = the ridges ``SELECT_RIDGES``/``SELECT_BIAS_RIDGES``
    seed : the validation split's seed (a ``share`` of the rows, uniformly) and the fits' seed
    holdout : a boolean mask of the validation rows instead of the seeded split
    trainer : the other settings of every fit (``BiasedMF``'s defaults if None); the grid's fits stop at a miss
        of max(trainer.miss_tol, SELECT_MISS_TOL), the refit at trainer.miss_tol

    Returns
    -------
    The refitted model, with ``settings["selected"]``: the chosen k, λ, λ_b, the split, and the grid's rows
    (k, λ, λ_b, validation RMSE, whether the fit met its stopping rule, sweeps).
    """
    n = len(data)
    lams = [2.0 * r / n for r in SELECT_RIDGES] if lams is None else [float(x) for x in lams]
    lam_biases = [2.0 * r / n for r in SELECT_BIAS_RIDGES] if lam_biases is None else [float(x) for x in lam_biases]
    ks = [int(k) for k in ks]
    for name, grid in (("ks", ks), ("lams", lams), ("lam_biases", lam_biases)):
        if not grid:
            raise InputError(f"{name}=[]: give at least one value to select from")
    if holdout is None:
        if not 0.0 < share < 1.0:
            raise InputError(f"share={share}: the validation share must be between 0 and 1, e.g. 0.1")
        holdout = np.random.default_rng(seed).random(n) < share
    holdout = np.asarray(holdout, bool)
    if holdout.shape != (n,) or not holdout.any() or holdout.all():
        raise InputError(
            f"holdout: a boolean mask of the {n} rows with some validation rows and some training rows "
            f"(got shape {holdout.shape}, {int(holdout.sum())} validation rows)"
        )
    base = trainer or BiasedMF()
    grid_tol = max(base.miss_tol, SELECT_MISS_TOL)
    fit_part, val = data.subset(~holdout), data.subset(holdout)
    scale = n / len(fit_part)
    grid = []
    for k, lam, lam_bias in product(ks, lams, lam_biases):
        t = replace(base, k=k, lam=lam * scale, lam_bias=lam_bias * scale, seed=seed, miss_tol=grid_tol)
        m = t.fit(fit_part)
        rmse = float(np.sqrt(np.mean((m.predict(val.user, val.item) - val.rating) ** 2)))
        grid.append(
            {"k": k, "lam": lam, "lam_bias": lam_bias, "val_rmse": rmse, "converged": t.converged(m)}
            | {"sweeps": m.info["sweeps"], "newton_iters": m.info["newton_iters"], "seconds": m.info["seconds"]}
        )
        log.info("biased MF k=%d λ=%g λ_b=%g: validation RMSE %.4f", k, lam, lam_bias, rmse)
    best = min(grid, key=lambda row: row["val_rmse"])
    model = replace(base, k=best["k"], lam=best["lam"], lam_bias=best["lam_bias"], seed=seed).fit(data)
    model.settings["selected"] = {
        "k": best["k"],
        "lam": best["lam"],
        "lam_bias": best["lam_bias"],
        "val_rmse": best["val_rmse"],
        "validation": {"rows": int(holdout.sum()), "share": float(holdout.mean()), "seed": seed},
        "grid": grid,
    }
    return model
