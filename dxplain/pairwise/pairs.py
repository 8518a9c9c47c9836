"""The CLI's experiment around the explainers: an 80/20 split, the pairs to explain, the output table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .explain import top_features


def split(y: np.ndarray, seed: int, test: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test), stratified by label: each class split test/train at the same share."""
    rng = np.random.default_rng(seed)
    train, held = [], []
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        k = max(1, int(round(test * len(rows)))) if len(rows) > 1 else 0
        held.append(rows[:k])
        train.append(rows[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def choose_pairs(y: np.ndarray, n: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct pairs (positions in y): (positive, negative) for ``kind="opauc"`` (y ∈ {0, 1}),
    unordered pairs of distinct instances otherwise. Fewer if there are fewer distinct pairs."""
    rng = np.random.default_rng([seed, 7])
    if kind == "opauc":
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        pick = rng.choice(len(pos) * len(neg), size=min(n, len(pos) * len(neg)), replace=False)
        return pos[pick // len(neg)], neg[pick % len(neg)]
    a, b = np.triu_indices(len(y), k=1)
    pick = rng.choice(len(a), size=min(n, len(a)), replace=False)
    return a[pick], b[pick]


def support_signs(kind: str, y_a: np.ndarray, y_b: np.ndarray) -> np.ndarray:
    """+1 where a larger ζ is the model's right call for the pair, −1 where a smaller one is: every
    (positive, negative) pair of OPAUC; a metric's dissimilar pairs +1, its similar pairs −1 (their
    distance should be small). The masking curves rank features by sign·φ, the support each feature gives
    the model's right call, so that masking the top ones should hurt the model on either kind of pair."""
    if kind == "opauc":
        return np.ones(len(y_a))
    return np.where(np.asarray(y_a) != np.asarray(y_b), 1.0, -1.0)


def attributions_table(
    i: np.ndarray, j: np.ndarray, features: list[str], phi: np.ndarray, zeta: np.ndarray, base: float
) -> pa.Table:
    """Long format, one row per (pair, feature), the pair's features in rank order (1 = largest φ)."""
    N, D = phi.shape
    order = top_features(phi)
    names = np.asarray(features, dtype=object)
    return pa.table(
        {
            "pair": np.repeat(np.arange(N), D),
            "i": np.repeat(i, D),
            "j": np.repeat(j, D),
            "feature": pa.array(names[order].ravel().tolist(), pa.string()),
            "phi": np.take_along_axis(phi, order, 1).ravel(),
            "zeta": np.repeat(zeta, D),
            "base": np.full(N * D, base),
            "rank": np.tile(np.arange(1, D + 1), N),
        }
    )
