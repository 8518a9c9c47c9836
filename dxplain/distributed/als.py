"""ALS half-steps on Dask: shards of rows solved in parallel, the fixed factor broadcast once per half-step.

Each shard is one part of the partitioned interactions (``io.partitions``): a worker reads its part
from storage once, when training starts, and keeps its CSR slice for every sweep. Per half-step only
the fixed factor matrix travels (once to each worker), and each task returns its rows of the new
factors. A worker lost mid-training loses nothing: the scheduler re-reads its parts elsewhere.
"""

from __future__ import annotations

import numpy as np
from distributed import Client

from ..interactions import Interactions
from ..io.partitions import Partitions
from ..kernels import als
from ..models.mf import HalfSteps, csr_view
from .cluster import scatter


def _load(parts: Partitions, side: str, p: int, mu: float):
    """(indptr, columns, y − μ) of the rows in part p: users for ``user``, items for ``item``."""
    if side == "user":
        a, b = int(parts.user_cuts[p]), int(parts.user_cuts[p + 1])
        d = parts.read_users(a, b).data
    else:
        a, b = parts.item_range(p)
        d = parts.read_items(p).data
    indptr, cols, y = csr_view(d, d.rating - mu, side)  # the part's rows are already the only ones there
    return indptr[a:b + 1] - indptr[a], cols, y


def _solve(part, F, ridge):
    indptr, cols, y = part
    return als.ridge_solve_rows(indptr, cols, y, F, ridge)


class ClusterHalfSteps(HalfSteps):
    """Half-steps sharded over a Dask cluster, one shard per part (``client`` passed in; the library creates none).

    Use as ``ALSMF.fit(data, half_steps=functools.partial(ClusterHalfSteps, client, parts))``.
    """

    def __init__(self, client: Client, parts: Partitions, data: Interactions, mu: float, ridge: float):
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        self.client, self.ridge = client, ridge
        cuts = {"user": parts.user_cuts, "item": parts.item_cuts}
        # Read once on the workers and kept there for all sweeps; recomputed from storage if a worker dies.
        self.parts = {side: [client.submit(_load, parts, side, p, mu, pure=False, retries=2)
                             for p in range(len(cuts[side]) - 1)] for side in cuts}

    def _half(self, side: str, F: np.ndarray) -> np.ndarray:
        F_f = scatter(self.client, F)  # to one worker, every half-step (see ``cluster.scatter``)
        futures = [self.client.submit(_solve, p, F_f, self.ridge, pure=False, retries=2) for p in self.parts[side]]
        return np.vstack(self.client.gather(futures))

    def users(self, V):
        return self._half("user", V)

    def items(self, U):
        return self._half("item", U)
