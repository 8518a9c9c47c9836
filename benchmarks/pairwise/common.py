"""Shared by the pairwise benchmarks: the paper's synthetic data, UCI loading, timing, JSON output."""

import json
import time
from pathlib import Path

import numpy as np

from dxplain.io.labelled import read_labelled

RESULTS = Path(__file__).parent / "results" / "pairwise"
UCI = Path("/work/shared/data/uci")
UCI_SETS = {
    "heart": "heart_statlog.parquet",
    "diabetes": "diabetes.parquet",
    "parkinson": "parkinsons.parquet",
    "ionosphere": "ionosphere.parquet",
}


def synthetic(N: int, D: int, seed: int):
    """The paper's generator: x ~ U(−1, 1)^D, w ~ U(−0.5, 0.5)^D, y = [wᵀx > 0]."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(N, D))
    return X, (X @ rng.uniform(-0.5, 0.5, size=D) > 0).astype(np.int64)


def uci(name: str):
    t = read_labelled(UCI / UCI_SETS[name], "label")
    return t.X, t.y.astype(np.int64), t.features


def timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def write(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")
    return path


def slope(x, y) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])
