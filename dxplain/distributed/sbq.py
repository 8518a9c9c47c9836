"""SBQ prototype selection on Dask: candidates sharded over workers.

Two schemes, both twins of ``kernels.sbq``:

* ``greedy_on_cluster`` — exact: every step each shard reports its best candidate, the driver picks the
  overall best and broadcasts it, each shard appends it to its rows of L⁻¹k_S·. It runs the same
  ``ShardState`` arithmetic as ``kernels.sbq.greedy`` with shards in memory, so it selects the same points.
  Per step: one round trip and O(p + m) bytes per shard; the O(n·m) state stays on the workers.
* ``greedi_on_cluster`` — two rounds (GreeDi): greedy on each part in parallel, then greedy over the
  union. Cheaper in rounds, approximate (``kernels.sbq.greedi`` is the in-memory twin).

Shard states are chained task by task (state_t = add(state_{t-1}, …)), so a lost worker's shard is
recomputed by the scheduler from its lineage; ``retries`` covers errors raised inside a task.
"""

from __future__ import annotations

import logging
import time
import uuid

from distributed import Client

from ..explain.prototypes import Progress
from ..kernels.sbq import Selection, ShardState, as_rows, greedi, greedy, greedy_select, inner, split_rows
from .cluster import scatter

log = logging.getLogger(__name__)


def _best(state: ShardState):
    return state.best()


def _add(state: ShardState, cand, d: float, beta_t: float) -> ShardState:
    return state.add(cand, d, beta_t)


class ClusterShards:
    """Candidate shards held on the workers: the Dask twin of ``kernels.sbq.LocalShards``."""

    def __init__(self, client: Client, Phi, mu, m: int, n_shards: int, retries: int = 2):
        self.client, self.retries, self.tag = client, retries, uuid.uuid4().hex[:8]
        ranges = split_rows(Phi.shape[0], n_shards)
        parts = scatter(client, [Phi[a:b] for a, b in ranges])
        mu_f = scatter(client, mu, broadcast=True)
        self.states = [client.submit(ShardState, part, mu_f, m, a, key=f"dxplain-sbq-{self.tag}-init-{s}")
                       for s, (part, (a, _)) in enumerate(zip(parts, ranges))]
        self.t = 0

    def best(self):
        futures = [self.client.submit(_best, st, key=f"dxplain-sbq-{self.tag}-best-{self.t}-{s}", retries=self.retries)
                   for s, st in enumerate(self.states)]
        return self.client.gather(futures)

    def add(self, cand, d, beta_t):
        self.t += 1
        self.states = [self.client.submit(_add, st, cand, d, beta_t, retries=self.retries,
                                          key=f"dxplain-sbq-{self.tag}-state-{self.t}-{s}")
                       for s, st in enumerate(self.states)]


def greedy_on_cluster(client: Client, Phi, mu, m: int, n_shards: int, retries: int = 2) -> Selection:
    """Exact greedy SBQ with candidates sharded over the cluster (same points as ``kernels.sbq.greedy``)."""
    Phi = as_rows(Phi)
    m = min(m, Phi.shape[0])
    c = inner(mu, mu)
    shards = ClusterShards(client, Phi, mu, m, n_shards, retries)
    return greedy_select(Progress(shards, m, "SBQ exact distributed greedy"), m, c)


def greedi_on_cluster(client: Client, Phi, mu, m: int, n_parts: int, seed: int = 0, retries: int = 2) -> Selection:
    """GreeDi: each part's greedy SBQ is one Dask task; the union round runs here."""
    mu_f = scatter(client, mu, broadcast=True)

    def map_parts(parts):
        t0 = time.perf_counter()
        futures = client.map(greedy, scatter(client, parts), mu=mu_f, m=m, retries=retries, pure=False)
        out = client.gather(futures)
        log.info("GreeDi: %d parts selected %d each in %.1fs", len(parts), m, time.perf_counter() - t0)
        return out

    return greedi(Phi, mu, m, n_parts, seed, map_parts)
