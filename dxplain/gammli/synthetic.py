"""The simulation of the paper's eq. 6, at any size.

Users and items each get 5 numeric features and a rank-3 latent vector, drawn together from isotropic
Gaussian blobs (``groups`` centres in 8 dimensions, unit spread, centres uniform in [−10, 10] as in
scikit-learn's ``make_blobs``); features are min-max scaled to [0, 1], latent vectors to [−1, 1]. A
``1 − missing`` share of all pairs is observed, with

    y = 5x₁ + 5z₁² + 0.5·exp(−4(z₂ + x₃) + 4) + 5·sin(2π x₂ z₃) + 3⟨u, v⟩ + ε,    ε ~ N(0, 1),

and the classification scenario's label is 1{y > 0.5}. ``f`` is the noiseless part (the noise floor).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

TRUE_MAIN = ("user:x1", "item:z1", "user:x2", "user:x3", "item:z2", "item:z3")
TRUE_PAIRS = ("user:x2 x item:z3", "user:x3 x item:z2")


def _blobs(rng, n: int, groups: int, dims: int = 8) -> tuple[np.ndarray, np.ndarray]:
    centres = rng.uniform(-10, 10, size=(groups, dims))
    g = rng.integers(0, groups, n)
    X = centres[g] + rng.normal(size=(n, dims))
    return X, g


def _scale(X, lo, hi):
    mn, mx = X.min(0), X.max(0)
    return lo + (hi - lo) * (X - mn) / np.where(mx > mn, mx - mn, 1.0)


def entities(rng, n_users: int, n_items: int, groups: int = 10) -> dict:
    """Features x, z in [0, 1], latent vectors u, v in [−1, 1] and the blob of every user and item."""
    A, gu = _blobs(rng, n_users, groups)
    B, gi = _blobs(rng, n_items, groups)
    return {
        "x": _scale(A[:, :5], 0, 1),
        "uu": _scale(A[:, 5:], -1, 1),
        "z": _scale(B[:, :5], 0, 1),
        "vv": _scale(B[:, 5:], -1, 1),
        "user_groups": gu,
        "item_groups": gi,
    }


def noiseless(e: dict, u: np.ndarray, i: np.ndarray) -> np.ndarray:
    """f of eq. 6 at the pairs (u, i)."""
    x, z = e["x"], e["z"]
    return (
        5 * x[u, 0]
        + 5 * z[i, 0] ** 2
        + 0.5 * np.exp(-4 * (z[i, 1] + x[u, 2]) + 4)
        + 5 * np.sin(2 * np.pi * x[u, 1] * z[i, 2])
        + 3 * np.einsum("nk,nk->n", e["uu"][u], e["vv"][i])
    )


def feature_tables(e: dict) -> tuple[pa.Table, pa.Table]:
    x, z = e["x"], e["z"]
    users = pa.table({"user": np.arange(len(x)), **{f"x{k + 1}": x[:, k] for k in range(5)}})
    items = pa.table({"item": np.arange(len(z)), **{f"z{k + 1}": z[:, k] for k in range(5)}})
    return users, items


def eq6(
    n_users: int = 1000,
    n_items: int = 1000,
    missing: float = 0.9,
    groups: int = 10,
    seed: int = 0,
    n_obs: int | None = None,
) -> dict:
    """Feature tables (pyarrow: ``user``/``item`` + x1..x5 / z1..z5) and arrays u, i, y, f, label, groups."""
    rng = np.random.default_rng(seed)
    e = entities(rng, n_users, n_items, groups)
    n = n_obs if n_obs is not None else int(round((1 - missing) * n_users * n_items))
    if n_users * n_items <= 5e7:
        flat = rng.choice(n_users * n_items, size=n, replace=False)
    else:  # too many pairs to draw without replacement: draw with it and drop repeats (a ~n/(m·n) share)
        flat = np.unique(rng.integers(0, n_users * n_items, size=n, dtype=np.int64))
    flat.sort()
    u, i = (flat // n_items).astype(np.int64), (flat % n_items).astype(np.int64)
    f = noiseless(e, u, i)
    y = f + rng.normal(size=len(f))
    users, items = feature_tables(e)
    return {
        "users": users,
        "items": items,
        "u": u,
        "i": i,
        "y": y,
        "f": f,
        "label": (y > 0.5).astype(float),
        "user_groups": e["user_groups"],
        "item_groups": e["item_groups"],
    }


def eq6_blocks(n_obs: int, seed: int = 0, block_users: int = 2000, groups: int = 10):
    """eq. 6 at the simulation's density (10%) with users = items = √(10·n_obs), streamed: (users, items) feature
    tables first, then (u, i, y) per block of ``block_users`` users, each pair observed with probability 0.1,
    so memory is one block's, whatever n_obs."""
    side = max(10, int(round(np.sqrt(10 * n_obs))))
    rng = np.random.default_rng(seed)
    e = entities(rng, side, side, groups)
    yield feature_tables(e)
    for start in range(0, side, block_users):
        stop = min(side, start + block_users)
        brng = np.random.default_rng([seed, start])
        flat = np.flatnonzero(brng.random((stop - start) * side, dtype=np.float32) < 0.1)
        u, i = start + flat // side, flat % side
        yield u, i, noiseless(e, u, i) + brng.normal(size=len(u))
