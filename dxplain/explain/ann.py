"""Approximate top-k for heavy items: maximum-inner-product search over α-scaled embeddings (faiss).

The user side of an item j with R raters explains each target user u by the raters i with the largest
(and most negative) α_ij ⟨Ũ_i, Ũ_u⟩ = ⟨X_i, Ũ_u⟩, X = α ⊙ Ũ[raters]: a maximum-inner-product search
of Ũ_u (and of −Ũ_u) over X. Exact, that is R·k work per target; an index answers it in far less once
built, and one index serves every target of the item (docs/methods.md: "Top influential samples are a
maximum-inner-product search over α-scaled embeddings").

The index is faiss's HNSW graph with the inner product as its similarity (an optional extra:
``pip install 'dxplain[ann]'``). MIPS can also be reduced to nearest-neighbour search by the usual
augmentation (Bachrach et al. 2014: x' = [x, √(M² − ‖x‖²)], q' = [q, 0]), ``augment=True``; but α
makes the norms so uneven that almost every x' sits near [0, M], and that graph found only 10–15% of
the true top-10 on the 5M set's heaviest item, against 99.5% for the inner-product graph. The kernel
ranks the candidates by their exact importance, so only which rows are found is approximate;
``python -m benchmarks.scaling.heavy_items`` measures recall against exact. On those norms the exact norm-ordered
search of ``kernels.representer`` is faster still (docs/scaling.md), so the refresh uses it; this is
the path for histories whose norms are even.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError


def hnsw_search(
    M: int = 32, ef_construction: int = 80, ef_search: int = 128, oversample: int = 2, augment: bool = False
):
    """A ``search(X, T, top_k)`` for ``kernels.representer.streamed_group_attributions``.

    Returns (t, m) rows of X with the largest ⟨X, T⟩ and (t, m) with the largest ⟨X, −T⟩, m = oversample·top_k.
    ``M``, ``ef_construction`` and ``ef_search`` are HNSW's graph degree and beam widths (recall against
    cost); oversampling gives the exact re-ranking more candidates than it keeps. ``augment=False``
    searches the inner product directly (faiss's HNSW with METRIC_INNER_PRODUCT).
    """
    try:
        import faiss
    except ImportError as e:  # an optional extra
        raise InputError(
            "approximate heavy-item search needs faiss: pip install 'dxplain[ann]' (or run without --approximate)"
        ) from e

    def search(X: np.ndarray, T: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        if augment:
            norms = np.einsum("ij,ij->i", X, X)
            X = np.hstack([X, np.sqrt(np.maximum(norms.max() - norms, 0.0))[:, None]])
            index = faiss.IndexHNSWFlat(X.shape[1], M)
        else:
            index = faiss.IndexHNSWFlat(X.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.add(np.ascontiguousarray(X, dtype=np.float32))
        index.hnsw.efSearch = max(ef_search, oversample * top_k)
        m = min(len(X), oversample * top_k)
        Q = np.zeros((len(T), X.shape[1]), np.float32)
        Q[:, : T.shape[1]] = T
        _, hi = index.search(Q, m)
        Q[:, : T.shape[1]] = -T
        _, lo = index.search(Q, m)
        return hi, lo

    return search
