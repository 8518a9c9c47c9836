"""The all-unobserved negative scan on Dask: user shards scored in parallel, their lowest K merged.

The in-memory twin is ``explain.negatives.scan``; shard boundaries are multiples of its block size,
so every pair is scored by exactly the same block computation and the results are identical.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from distributed import Client, as_completed

from ..explain.negatives import lowest, scan
from ..kernels.bce import DenseTerms
from ..kernels.negatives import LowestK, NegativeScore, scan_rows
from .cluster import scatter

log = logging.getLogger(__name__)


def shard_ranges(n_users: int, step: int, n_shards: int) -> list[tuple[int, int]]:
    """Contiguous user ranges aligned to blocks of ``step`` rows, about equal in size."""
    n_blocks = -(-n_users // step)
    cuts = np.unique(np.linspace(0, n_blocks, max(1, min(n_shards, n_blocks)) + 1).round().astype(int)) * step
    cuts[-1] = n_users
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def scan_on_cluster(client: Client, score: NegativeScore, terms: DenseTerms, K: int, n_shards: int,
                    retries: int = 2, block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact K lowest negatives: ``scan`` over user shards on the cluster, under the bound that
    ``explain.negatives.lowest`` estimates (and rescans without, if it did not hold). Each shard
    returns its K lowest, merged here in O(K) memory.

    The score's embeddings and the positives' CSR are scattered to every worker once. A shard lost with
    its worker is recomputed by the scheduler; ``retries`` covers errors raised inside a task.
    """
    step = block_rows or scan_rows(terms.n_items)
    ranges = shard_ranges(terms.n_users, step, n_shards)
    score_f = scatter(client, score, broadcast=True)
    terms_f = scatter(client, terms, broadcast=True)
    return lowest(lambda t: _scan_shards(client, score_f, terms_f, terms, K, ranges, step, t, retries),
                  score, terms, K, step)


def _scan_shards(client, score_f, terms_f, terms, K, ranges, step, threshold, retries):
    t0 = time.perf_counter()
    futures = [client.submit(scan, score_f, terms_f, K, r, step, threshold, retries=retries, pure=False,
                             key=f"dxplain-negscan-{s:05d}-{time.time_ns()}") for s, r in enumerate(ranges)]
    shard_of = {f.key: s for s, f in enumerate(futures)}
    keep, pairs = LowestK(K), 0
    for done, fut in enumerate(as_completed(futures), start=1):
        a, b = ranges[shard_of[fut.key]]
        keep.push(*fut.result())
        fut.release()  # the shard's K candidates are merged; free them on the worker
        pairs += (b - a) * terms.n_items
        elapsed = time.perf_counter() - t0
        log.info("negative scan: shard %d/%d done, %.3g pairs scored (%.3g pairs/s)", done, len(ranges), pairs,
                 pairs / max(elapsed, 1e-9))
    return keep.result()
