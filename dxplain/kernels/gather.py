"""Row gathers for the compiled kernels (numba)."""

from __future__ import annotations

from numba import njit


@njit(nogil=True, cache=True)
def gather_rows(F, idx, a, d, out):
    """out[:d] ← F[idx[a:a + d]], element by element.

    numba's row slice assignment (``out[j, :] = F[idx[a + j]]``) costs ~10 ns a row more: 1.5 ms of ~22 in the
    explain kernel on ml-100k, and 4 CG steps on 1.2M entries took 87 ms that way against 82 at k = 64."""
    k = F.shape[1]
    for j in range(d):
        r = idx[a + j]
        for c in range(k):
            out[j, c] = F[r, c]


@njit(nogil=True, cache=True)
def gather_scaled_rows(F, idx, a, d, s, out):
    """out[:d] ← diag(s[:d]) F[idx[a:a + d]]: ``gather_rows`` with row j scaled by s[j] as it is copied. The
    explain kernel gathers its history rows scaled by α this way, so its product gives the importances and no
    pass over every target's row multiplies by α (0.6 ms of ~25 on ml-100k, A/B in one process)."""
    k = F.shape[1]
    for j in range(d):
        r, w = idx[a + j], s[j]
        for c in range(k):
            out[j, c] = F[r, c] * w
