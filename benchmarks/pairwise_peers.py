"""shap's explainers on a pairwise model, the way a user would try them: through the difference function
g(δ) = ζ(δ, 0) (OPAUC and LowRank scores depend on x_i − x_j only) with an independent background of
differences of random reference pairs."""

import numpy as np


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
