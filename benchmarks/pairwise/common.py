"""Shared by the pairwise benchmarks: the paper's synthetic data, UCI loading, timing, JSON output, and shap's
explainers as peers.

The peers: shap's explainers on a pairwise model, the way a user would try them: through the difference function
g(δ) = ζ(δ, 0) (OPAUC and LowRank scores depend on x_i − x_j only) with an independent background of
differences of random reference pairs."""

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS
from dxplain.io.labelled import read_labelled

PAIRWISE = RESULTS / "pairwise"
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
    PAIRWISE.mkdir(parents=True, exist_ok=True)
    path = PAIRWISE / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")
    return path


def slope(x, y) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def difference_background(R: np.ndarray, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 99])
    a, b = rng.integers(0, len(R), n), rng.integers(0, len(R), n)
    return R[a] - R[b]


def shap_values(
    kind: str,
    zeta,
    R: np.ndarray,
    Xi: np.ndarray,
    Xj: np.ndarray,
    seed: int = 0,
    background: int = 50,
    nsamples: int | str = "auto",
) -> np.ndarray:
    """φ (N, D) from shap's KernelExplainer (``kind="kernel"``) or PermutationExplainer (``"permutation"``)."""
    import shap

    bg = difference_background(R, background, seed)
    zero = np.zeros(R.shape[1])

    def g(delta):
        delta = np.atleast_2d(delta)
        return zeta(delta, np.broadcast_to(zero, delta.shape))

    if kind == "kernel":
        ex = shap.KernelExplainer(g, bg, silent=True)
        return np.asarray(ex.shap_values(Xi - Xj, nsamples=nsamples, silent=True))
    ex = shap.PermutationExplainer(g, shap.maskers.Independent(bg, max_samples=background), seed=seed)
    return np.asarray(ex(Xi - Xj, silent=True).values)
