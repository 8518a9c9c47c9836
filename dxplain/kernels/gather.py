"""Row gathers for the compiled kernels (numba)."""

from __future__ import annotations

from numba import njit


@njit(nogil=True, cache=True)
def gather_rows(F, idx, a, d, out):
    """out[:d] ← F[idx[a:a + d]], element by element.

    Element by element because numba's row slice assignment (``out[j, :] = F[idx[a + j]]``) costs more per
    row, a visible share of the explain kernel and of the CG steps that gather rows."""
    k = F.shape[1]
    for j in range(d):
        r = idx[a + j]
        for c in range(k):
            out[j, c] = F[r, c]


@njit(nogil=True, cache=True)
def gather_scaled_rows(F, idx, a, d, s, out):
    """out[:d] ← diag(s[:d]) F[idx[a:a + d]]: ``gather_rows`` with row j scaled by s[j] as it is copied. The
    explain kernel gathers its history rows scaled by α this way, so its product gives the importances and no
    pass over every target's row multiplies by α."""
    k = F.shape[1]
    for j in range(d):
        r, w = idx[a + j], s[j]
        for c in range(k):
            out[j, c] = F[r, c] * w
