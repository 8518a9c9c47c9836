"""What the ALS area's runners share: where their results go, the data sets they time, RMSE and the user + item
bias baseline."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS
from dxplain.datasets import resolve_dataset
from dxplain.datasets.synthetic import generate

ALS = RESULTS / "als"
ML1M_SHAPE = {"n_interactions": 1_000_000, "n_users": 6040, "n_items": 3449}


def named_interactions(name: str, cache: Path):
    """A data set's interactions by name; ``synthetic-ml1m`` (ml-1m's shape) is generated once into ``cache``."""
    if name == "synthetic-ml1m":
        folder = cache / name
        if not (folder / "interactions.parquet").exists():
            generate(folder, ML1M_SHAPE["n_interactions"], ML1M_SHAPE["n_users"], ML1M_SHAPE["n_items"], seed=0)
        return resolve_dataset(str(folder)).interactions
    return resolve_dataset(name).interactions


def rmse(pred, y) -> float:
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def fit_biases(tr, reg: float, sweeps: int = 30):
    """μ + b_u + b_i by alternating ridge updates: b_u = Σ(y − μ − b_i)/(n_u + reg)."""
    mu = tr.rating.mean()
    bu, bi = np.zeros(tr.n_users), np.zeros(tr.n_items)
    for _ in range(sweeps):
        bu = np.bincount(tr.user, tr.rating - mu - bi[tr.item], tr.n_users) / (
            np.bincount(tr.user, minlength=tr.n_users) + reg
        )
        bi = np.bincount(tr.item, tr.rating - mu - bu[tr.user], tr.n_items) / (
            np.bincount(tr.item, minlength=tr.n_items) + reg
        )
    return lambda u, i: mu + bu[u] + bi[i]
