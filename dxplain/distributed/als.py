"""ALS half-steps on Dask: shards of rows solved in parallel, the fixed factor broadcast once per half-step.

Each shard's slice of the by-user (and by-item) CSR view is scattered to the cluster once, when
training starts, and stays there for every sweep; per half-step only the fixed factor matrix travels
(broadcast to every worker), and each task returns its rows of the new factors.
"""

from __future__ import annotations

import itertools

import numpy as np
from distributed import Client

from ..interactions import Interactions, equal_cuts
from ..kernels import als
from ..models.mf import HalfSteps, csr_views


def _slice(indptr, cols, y, a: int, b: int):
    s, e = indptr[a], indptr[b]
    return indptr[a:b + 1] - s, cols[s:e], y[s:e]


def _solve(part, F, ridge):
    indptr, cols, y = part
    return als.ridge_solve_rows(indptr, cols, y, F, ridge)


class ClusterHalfSteps(HalfSteps):
    """Half-steps sharded over a Dask cluster (``client`` passed in; the library creates none)."""

    def __init__(self, client: Client, data: Interactions, y: np.ndarray, ridge: float, n_shards: int = 8):
        self.client, self.ridge = client, ridge
        self.parts = {}
        for side, (indptr, cols, vals) in csr_views(data, y).items():
            parts = [_slice(indptr, cols, vals, a, b) for a, b in itertools.pairwise(equal_cuts(indptr, n_shards))]
            self.parts[side] = client.scatter(parts)  # each shard's slice is sent once, kept for all sweeps

    def _half(self, side: str, F: np.ndarray) -> np.ndarray:
        F_f = self.client.scatter(F, broadcast=True)
        futures = [self.client.submit(_solve, p, F_f, self.ridge, pure=False, retries=2) for p in self.parts[side]]
        return np.vstack(self.client.gather(futures))

    def users(self, V):
        return self._half("user", V)

    def items(self, U):
        return self._half("item", U)
