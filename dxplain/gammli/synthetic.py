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


def eq6(n_users: int = 1000, n_items: int = 1000, missing: float = 0.9, groups: int = 10, seed: int = 0,
        n_obs: int | None = None) -> dict:
    """Feature tables (pyarrow: ``user``/``item`` + x1..x5 / z1..z5) and arrays u, i, y, f, label, groups."""
    rng = np.random.default_rng(seed)
    A, gu = _blobs(rng, n_users, groups)
    B, gi = _blobs(rng, n_items, groups)
    x, uu = _scale(A[:, :5], 0, 1), _scale(A[:, 5:], -1, 1)
    z, vv = _scale(B[:, :5], 0, 1), _scale(B[:, 5:], -1, 1)
    n = n_obs if n_obs is not None else int(round((1 - missing) * n_users * n_items))
    if n_users * n_items <= 5e7:
        flat = rng.choice(n_users * n_items, size=n, replace=False)
    else:  # too many pairs to draw without replacement: draw with it and drop repeats (a ~n/(m·n) share)
        flat = np.unique(rng.integers(0, n_users * n_items, size=n, dtype=np.int64))
    flat.sort()
    u, i = (flat // n_items).astype(np.int64), (flat % n_items).astype(np.int64)
    f = (5 * x[u, 0] + 5 * z[i, 0] ** 2 + 0.5 * np.exp(-4 * (z[i, 1] + x[u, 2]) + 4)
         + 5 * np.sin(2 * np.pi * x[u, 1] * z[i, 2]) + 3 * np.einsum("nk,nk->n", uu[u], vv[i]))
    y = f + rng.normal(size=len(f))
    users = pa.table({"user": np.arange(n_users), **{f"x{k + 1}": x[:, k] for k in range(5)}})
    items = pa.table({"item": np.arange(n_items), **{f"z{k + 1}": z[:, k] for k in range(5)}})
    return {"users": users, "items": items, "u": u, "i": i, "y": y, "f": f, "label": (y > 0.5).astype(float),
            "user_groups": gu, "item_groups": gi}
