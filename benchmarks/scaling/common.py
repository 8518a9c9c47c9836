"""What the scaling area's runners share: the synthetic scaling sets and their supplied targets, the
Amazon-like sets, and the named data sets the kernel benchmarks load."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import CACHE, RESULTS
from dxplain.datasets import resolve_dataset
from dxplain.datasets.synthetic import generate

SCALING = RESULTS / "scaling"
SIZES = {"1m": 1_000_000, "5m": 5_000_000, "20m": 20_000_000, "50m": 50_000_000}
AMAZON_SIZES = {"100k": 100_000, "1m": 1_000_000, "5m": 5_000_000, "20m": 20_000_000, "50m": 50_000_000}
TARGETS_PER_USER = 10


def scaling_dataset(cache: Path, n: int, rank: int = 8) -> Path:
    """The scaling set of n interactions; its ratings have the given rank plus noise (8: the recorded sets)."""
    folder = cache / (f"scaling-{n}" if rank == 8 else f"scaling-{n}-rank{rank}")
    if not (folder / "interactions.parquet").exists():
        t0 = time.perf_counter()
        generate(folder, n, n_users=n // 100, n_items=n // 400, seed=0, rank=rank)
        print(f"generated {folder} in {time.perf_counter() - t0:.0f}s", flush=True)
    return folder


def supplied_targets(folder: Path, popular: bool = True) -> Path:
    """10 unseen items per user, drawn by popularity (what another recommender would plausibly list), or
    uniformly over the catalogue (the control)."""
    path = folder / ("targets-10.parquet" if popular else "targets-10-uniform.parquet")
    if path.exists():
        return path
    d = resolve_dataset(str(folder)).interactions
    rng = np.random.default_rng(1)
    p = d.item_degree() / len(d) if popular else None
    seen = d.user.astype(np.int64) * d.n_items + d.item  # sorted: interactions are sorted by (user, item)
    users, items = [], []
    for start in range(0, d.n_users, 100_000):
        u = np.arange(start, min(d.n_users, start + 100_000))
        cand = rng.choice(d.n_items, size=(len(u), 4 * TARGETS_PER_USER), p=p)
        key = u[:, None] * d.n_items + cand
        pos = np.minimum(np.searchsorted(seen, key), len(seen) - 1)
        ok = seen[pos] != key
        cand = np.where(ok, cand, -1)
        cand.sort(axis=1)
        ok = (cand >= 0) & np.concatenate([np.ones((len(u), 1), bool), cand[:, 1:] != cand[:, :-1]], axis=1)
        # Keep 10 of each user's distinct unseen candidates, the lowest ids after the sort (ids carry no
        # popularity order: the generator shuffles its Zipf weights); a few heavy users may get fewer.
        rank = np.cumsum(ok, axis=1)
        take = ok & (rank <= TARGETS_PER_USER)
        users.append(np.repeat(u, take.sum(axis=1)))
        items.append(cand[take])
    u, i = np.concatenate(users), np.concatenate(items)
    pq.write_table(pa.table({"user": d.user_ids.take(pa.array(u)), "item": d.item_ids.take(pa.array(i))}), path)
    return path


def amazon_dataset(n: int) -> Path:
    folder = CACHE / f"amazon-{n}"
    if not (folder / "interactions.parquet").exists():
        t0 = time.perf_counter()
        generate(folder, n, kind="amazon", seed=0)
        print(f"generated {folder} in {time.perf_counter() - t0:.0f}s", flush=True)
    return folder


def named_dataset(name: str, cache: Path):
    """A data set by name; ``synthetic-<N>m`` is generated once into ``cache``."""
    if name.startswith("synthetic-"):
        n = int(float(name.split("-")[1].rstrip("m")) * 1e6)
        folder = cache / name
        if not (folder / "interactions.parquet").exists():
            generate(folder, n, seed=0)
        return resolve_dataset(str(folder))
    return resolve_dataset(name)
