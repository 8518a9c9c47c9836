"""Classification data for the sparse-model evaluation: scikit-learn's bundled sets and a sparse synthetic one.

    breast-cancer      569 × 30 (scikit-learn, bundled: no download)
    digits-4v9         the 4s and 9s of scikit-learn's 8×8 digits, 361 × 64 (a small analogue of Gisette)
    synthetic-sparse   5,000 × 50,000 sparse features, 0.1% dense, a 500-feature logistic ground truth
    synthetic-small    300 × 12 dense, a logistic ground truth on 4 features (smoke tests, demos)

Dense sets are standardised on each trial's training split (by the caller).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import InputError

TABULAR = ("breast-cancer", "digits-4v9", "synthetic-sparse", "synthetic-small")


def check_available(name: str) -> None:
    """Refuse a dataset that ships with scikit-learn (an optional extra) when it is not installed."""
    import importlib.util

    if name in ("breast-cancer", "digits-4v9") and importlib.util.find_spec("sklearn") is None:
        raise InputError(f"dataset {name!r} comes with scikit-learn: pip install -e '.[bench]'")


def load_tabular(name: str):
    """(X, y) with y ∈ {0, 1}; X dense, or CSR for the sparse synthetic set."""
    if name == "synthetic-sparse":
        return synthetic_sparse()
    if name == "synthetic-small":
        rng = np.random.default_rng(0)
        X = rng.normal(size=(300, 12))
        y = (rng.random(300) < 1 / (1 + np.exp(-(X[:, :4] @ np.array([2.0, -1.5, 1.0, 0.5]))))).astype(np.int64)
        return X, y
    if name not in TABULAR:
        raise InputError(f"unknown classification dataset {name!r}; choose one of {', '.join(TABULAR)}")
    check_available(name)
    from sklearn import datasets

    if name == "breast-cancer":
        d = datasets.load_breast_cancer()
        return d.data.astype(np.float64), d.target.astype(np.int64)
    d = datasets.load_digits()
    keep = np.isin(d.target, (4, 9))
    return d.data[keep].astype(np.float64), (d.target[keep] == 9).astype(np.int64)


def synthetic_sparse(n: int = 5000, p: int = 50_000, density: float = 0.001, support: int = 500, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=density, random_state=np.random.default_rng(seed + 1), format="csr")
    w = np.zeros(p)
    w[rng.choice(p, support, replace=False)] = rng.normal(size=support) * 10
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w)))).astype(np.int64)
    return X, y
