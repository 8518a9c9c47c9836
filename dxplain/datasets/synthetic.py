"""Seeded synthetic ratings shaped like Amazon review data: low-rank signal, Zipf user and item degrees.

Two kinds:

- ``zipf`` (the scaling benchmarks' set): Zipf user and item weights, ratings from a rounded low-rank signal;
- ``amazon``: calibrated to the published shape of Amazon's 2018 reviews (``AMAZON``, docs/scaling.md,
  "Amazon-like data"): log-normal user degrees with median 2 and mean about 5, power-law item popularity,
  ratings skewed to 5 (the J-shaped marginal of ``AMAZON["ratings"]``); ``implicit`` turns every rating
  into a 1 (purchases, clicks).

Generated one batch of users at a time and appended to Parquet as row groups, so a 50M-interaction
set never sits in memory whole. Duplicates cannot cross batches (batches partition the users) and are
removed within a batch, so the result is a valid prepared dataset.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..io.atomic import atomic_path

log = logging.getLogger(__name__)


def zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Weights ∝ rank^-exponent, randomly assigned to ids so popularity is not sorted by id."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return rng.permutation(w / w.sum())


def _sample_batch(rng, deg, start, item_cdf, n_items, rounds=8) -> np.ndarray:
    """Sorted unique keys user·n_items + item, each user with (nearly) its degree of distinct items.

    Popular items are drawn repeatedly by heavy users; the shortfall is redrawn a few rounds.
    """
    users = np.repeat(np.arange(start, start + len(deg)), deg)
    key = np.empty(0, np.int64)
    for _ in range(rounds):
        items = np.searchsorted(item_cdf, rng.random(len(users)), side="right").astype(np.int64)
        key = np.union1d(key, users * n_items + items)
        short = deg - np.bincount(key // n_items - start, minlength=len(deg))
        if not short.any():
            break
        users = np.repeat(np.arange(start, start + len(deg)), np.maximum(short, 0))
    return key


AMAZON = {
    # Ni, Li & McAuley (EMNLP 2019), the 2018 release: 233.1M reviews, 43.5M users, 15.2M items, so
    # 5.4 reviews per user and 15.3 per item on average.
    "per_user_mean": 233.1 / 43.5,
    "per_item_mean": 233.1 / 15.2,
    # Most users write 1-2 reviews: a log-normal degree with median 2 and σ chosen for the mean above.
    "user_median": 2.0,
    "user_sigma": 1.35,
    # The J-shaped star distribution of Amazon reviews (Hu, Pavlou & Zhang 2009; about 60% five stars).
    "ratings": {1: 0.08, 2: 0.05, 3: 0.08, 4: 0.19, 5: 0.60},
}
KINDS = ("zipf", "amazon", "gammli")


def amazon_degrees(n_interactions: int, n_items: int, rng: np.random.Generator) -> np.ndarray:
    """User degrees ≥ 1, log-normal (median ``AMAZON["user_median"]``), drawn until they sum to
    ``n_interactions`` (the last one trimmed); capped at half the catalogue."""
    mu, sigma = np.log(AMAZON["user_median"]), AMAZON["user_sigma"]
    draws, total = [], 0
    while total < n_interactions:
        d = np.maximum(1, np.rint(rng.lognormal(mu, sigma, max(1000, (n_interactions - total) // 4))))
        d = np.minimum(d, max(1, n_items // 2)).astype(np.int64)
        draws.append(d)
        total += int(d.sum())
    deg = np.concatenate(draws)
    end = int(np.searchsorted(np.cumsum(deg), n_interactions))  # the user whose degree crosses the target
    deg = deg[: end + 1]
    deg[-1] -= int(deg.sum()) - n_interactions
    return deg if deg[-1] > 0 else deg[:-1]


def j_shaped(latent: np.ndarray) -> np.ndarray:
    """Stars 1-5 with ``AMAZON["ratings"]`` as their marginal, ordered by ``latent`` (higher, more stars)."""
    share = np.cumsum([AMAZON["ratings"][r] for r in range(1, 5)])
    cuts = np.quantile(latent, share) if len(latent) else share
    return 1.0 + np.searchsorted(cuts, latent, side="right")


def generate(
    out: str | Path,
    n_interactions: int,
    n_users: int | None = None,
    n_items: int | None = None,
    rank: int = 8,
    user_exponent: float = 0.6,
    item_exponent: float = 0.75,
    noise: float = 0.5,
    seed: int = 0,
    batch_users: int = 200_000,
    kind: str = "zipf",
    implicit: bool = False,
) -> dict:
    """Write a prepared synthetic dataset folder and return its summary.

    Defaults follow Amazon's 2018 review data: about 5 ratings per user and 15 per item, and
    exponents that give the most popular item about 1% of all ratings (an exponent of 1.0 over
    300k items would give it 7.5%, far heavier than any Amazon item).
    Ratings are ``clip(round(3.6 + ⟨a_u, b_i⟩ + ε), 1, 5)`` with Gaussian a, b of the given rank.
    """
    if n_interactions < 1:
        raise InputError(f"--interactions {n_interactions}: give at least 1")
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r}: give one of {', '.join(KINDS)}")
    if kind == "gammli":
        if n_users or n_items or implicit:
            raise InputError(
                "--kind gammli: users = items = √(10·interactions) (eq. 6's 10% density) and ratings "
                "are real; give --interactions (and --seed) only"
            )
        return _generate_gammli(Path(out), n_interactions, seed)
    rng = np.random.default_rng(seed)
    if kind == "amazon":
        if n_users:
            raise InputError(
                "--users: the amazon kind draws its users' degrees (median 2, mean about 5); "
                "give --interactions (and --items) only"
            )
        n_items = n_items or max(10, round(n_interactions / AMAZON["per_item_mean"]))
        deg = amazon_degrees(n_interactions, n_items, rng)
        n_users = len(deg)
    else:
        n_users = n_users or max(10, n_interactions // 5)
        n_items = n_items or max(10, n_interactions // 15)
        pu = zipf_weights(n_users, user_exponent, rng)
        # Every user rates at least one item; the rest of the budget follows the Zipf weights.
        deg = 1 + rng.multinomial(max(0, n_interactions - n_users), pu)
        deg = np.minimum(deg, max(1, n_items // 2))
    pi = zipf_weights(n_items, item_exponent, rng)
    item_cdf = np.cumsum(pi)
    item_cdf[-1] = 1.0
    scale = 1.0 / np.sqrt(rank)
    b = rng.standard_normal((n_items, rank)) * np.sqrt(scale)
    seen_items = np.zeros(n_items, dtype=bool)
    schema = pa.schema([("user", pa.int64()), ("item", pa.int64()), ("rating", pa.float32())])
    written = 0
    out = Path(out)
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        with pq.ParquetWriter(tmp / "interactions.parquet", schema) as writer:
            for start in range(0, n_users, batch_users):
                stop = min(n_users, start + batch_users)
                brng = np.random.default_rng([seed, start])
                key = _sample_batch(brng, deg[start:stop], start, item_cdf, n_items)
                users, items = key // n_items, key % n_items
                a = brng.standard_normal((stop - start, rank)) * np.sqrt(scale)
                signal = np.einsum("nk,nk->n", a[users - start], b[items])
                latent = 1.5 * signal + noise * brng.standard_normal(len(users))
                if implicit:
                    y = np.ones(len(users))
                elif kind == "amazon":
                    y = j_shaped(latent)
                else:
                    y = np.clip(np.rint(3.6 + latent), 1, 5)
                seen_items[items] = True
                writer.write_table(
                    pa.table({"user": users, "item": items, "rating": y.astype(np.float32)}, schema=schema)
                )
                written += len(users)
                log.info("synthetic: users %d-%d, %d interactions so far", start, stop, written)
        pq.write_table(pa.table({"id": np.arange(n_users, dtype=np.int64)}), tmp / "users.parquet")
        pq.write_table(pa.table({"id": np.flatnonzero(seen_items).astype(np.int64)}), tmp / "items.parquet")
    return {
        "interactions": written,
        "users": n_users,
        "items": int(seen_items.sum()),
        "path": str(out),
        "kind": kind,
        "implicit": implicit,
    }


def _generate_gammli(out: Path, n_interactions: int, seed: int) -> dict:
    """GAMMLI's eq. 6 (``gammli.synthetic.eq6_blocks``) as a prepared dataset plus the two feature tables
    ``gammli fit`` reads: ``user_features.parquet`` (user, x1..x5) and ``item_features.parquet`` (item, z1..z5).
    Written one batch of users at a time (``eq6_blocks`` yields them), so memory is one batch's."""
    from ..gammli.synthetic import eq6_blocks

    batches = eq6_blocks(n_interactions, seed)
    users, items = next(batches)
    schema = pa.schema([("user", pa.int64()), ("item", pa.int64()), ("rating", pa.float64())])
    written = 0
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        with pq.ParquetWriter(tmp / "interactions.parquet", schema) as writer:
            for u, i, y in batches:
                writer.write_table(pa.table({"user": u, "item": i, "rating": y}, schema=schema))
                written += len(u)
                log.info("synthetic gammli: %d interactions so far", written)
        pq.write_table(users, tmp / "user_features.parquet")
        pq.write_table(items, tmp / "item_features.parquet")
        pq.write_table(pa.table({"id": np.arange(len(users), dtype=np.int64)}), tmp / "users.parquet")
        pq.write_table(pa.table({"id": np.arange(len(items), dtype=np.int64)}), tmp / "items.parquet")
    return {
        "interactions": written,
        "users": len(users),
        "items": len(items),
        "path": str(out),
        "kind": "gammli",
        "implicit": False,
    }
