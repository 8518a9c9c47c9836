"""From ratings to the probabilities a Kolmogorov model fits: p = rating / R_max, or implicit 0/1."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InputError
from ..interactions import Interactions

FEEDBACK = ("explicit", "implicit")


def check_options(dim: int, solver: str, check_exhaustive: bool, r_min: float, r_max: float) -> None:
    """Options that constrain each other (the single-option ranges are the flow's CONSTRAINTS)."""
    from ..kernels.kolmogorov import EXHAUSTIVE_CAP

    if dim < 2:
        raise InputError(f"--dim {dim}: a Kolmogorov model needs D ≥ 2 elementary events; give e.g. --dim 8")
    if (solver == "exhaustive" or check_exhaustive) and dim > EXHAUSTIVE_CAP:
        raise InputError(
            f"--dim {dim}: exhaustive search is capped at D ≤ {EXHAUSTIVE_CAP} (2^D vectors per item); "
            f"use --solver sdr without --check-exhaustive for D = {dim}, or a smaller --dim"
        )
    if not r_min < r_max:
        raise InputError(f"--r-min {r_min:g} --r-max {r_max:g}: R_min must be below R_max (ml-100k: 1 and 5)")


def probabilities(
    data: Interactions, feedback: str, r_max: float, like_threshold: float, negatives: int, seed: int
) -> Interactions:
    """The training pairs with p_ui in ``rating``.

    * explicit: every rated pair, p = rating / R_max (the paper's choice);
    * implicit: pairs rated ≥ ``like_threshold`` as p = 1, plus ``negatives`` unobserved pairs per
      positive drawn uniformly, as p = 0 (a pair drawn twice is kept once).
    """
    if feedback == "explicit":
        return dataclasses.replace(data, rating=data.rating / r_max)
    pos = data.rating >= like_threshold
    if not pos.any():
        raise InputError(f"--like-threshold {like_threshold:g}: no interaction is rated that high; lower it")
    u, i = data.user[pos].astype(np.int64), data.item[pos].astype(np.int64)
    rng = np.random.default_rng(seed)
    nu = np.repeat(u, negatives)
    ni = rng.integers(0, data.n_items, size=len(nu))
    seen = data.user.astype(np.int64) * data.n_items + data.item
    key = np.unique(nu * data.n_items + ni)
    key = key[~np.isin(key, seen)]
    users = np.concatenate([u, key // data.n_items])
    items = np.concatenate([i, key % data.n_items])
    p = np.concatenate([np.ones(len(u)), np.zeros(len(key))])
    return Interactions.from_indices(users, items, p, data.user_ids, data.item_ids)


def test_targets(y: np.ndarray, feedback: str, r_max: float, like_threshold: float) -> np.ndarray:
    """What the model should predict on the test pairs: rating / R_max, or the 0/1 like."""
    return y / r_max if feedback == "explicit" else (y >= like_threshold).astype(np.float64)
