"""How a refresh is cut into tasks: pure functions of sizes and counts, no I/O.

How many user shards (``shard_count``, recorded in the run's plan), which users each holds (``shard_users``),
the item ranges the user side is cut at (``item_ranges``), and how the user-side tasks are cut from every
shard's counts per item range (``cut_user_side``, ``user_side_tasks``). The passes that run them are in
``refresh.passes``; the run's summary is made in ``refresh.summary``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..interactions import Interactions, equal_cuts

# Output rows one shard (or one user-side task) holds before writing: bounds a task's memory however
# many targets the run has (docs/scaling.md has the measured worker peaks).
ROWS_PER_SHARD = 8_000_000

# Item ranges per item part: the grain the user side's tasks are cut at.
RANGES_PER_PART = 64


def shard_count(
    workers: int, data: Interactions, n_targets: int, top_k: int, rows_per_shard: int = ROWS_PER_SHARD
) -> int:
    """Shards for a refresh: 4 per worker to balance the load, more when a shard's output would pass
    ``rows_per_shard`` rows (a shard holds its rows until it writes them: this bounds worker memory)."""
    # top_k most positive and top_k most negative per side; top_k = 0 keeps every attribution: a
    # target's user history and its item's raters, on average.
    per_target = 4 * top_k if top_k else len(data) / max(1, data.n_users) + len(data) / max(1, data.n_items)
    return max(4 * workers, math.ceil(n_targets * per_target / rows_per_shard))


def shard_users(data: Interactions, n_shards: int) -> list[np.ndarray]:
    """Contiguous user ranges of about equal work: interactions (the explanation cost follows them) + 1 per user."""
    work = np.concatenate([[0], np.cumsum(data.user_degree() + 1)])
    return [np.arange(a, b) for a, b in itertools.pairwise(equal_cuts(work, min(n_shards, data.n_users)))]


def item_ranges(parts) -> np.ndarray:
    """Edges of the item ranges the user side is cut at: each item part cut into up to
    ``RANGES_PER_PART`` ranges of equal item count (range b holds items edges[b]:edges[b+1])."""
    return np.unique(
        np.concatenate(
            [
                np.linspace(lo, hi, RANGES_PER_PART + 1).astype(np.int64)
                for lo, hi in itertools.pairwise(parts.item_cuts)
            ]
        )
    )


def cut_user_side(parts, census: list[dict], rows_per_task: int | None = None) -> list[tuple[int, int, list[int]]]:
    """(first item, end item, shards) per user-side task: a range of items inside one item part and
    every shard with targets on them, so each item's raters are gathered and searched once for all
    its targets.

    ``census`` holds every shard's counts per item range (``passes.census_shard``). A task is a run of
    item ranges holding at most ``rows_per_task`` rows: by default a shard's share of all user-side rows
    (never more than ``ROWS_PER_SHARD``), about as many tasks as shards, so the pass balances over the
    workers even when one part holds most targets. A single range above that (a popular item's many
    targets) is split by shards instead, at worst one shard per task.
    """
    edges = item_ranges(parts)
    if not census:
        return []
    t = np.array([c["range_targets"] for c in census])  # (shards, ranges)
    r = np.array([c["range_rows"] for c in census])
    shard_ids = np.array([c["shard"] for c in census])
    total = int(r.sum())
    limit = rows_per_task or min(ROWS_PER_SHARD, max(1, -(-total // len(census))))
    part_of = np.searchsorted(parts.item_cuts, edges[:-1], side="right") - 1
    tasks = []  # (rows, lo, hi, shards)

    def emit(b0, b1, members=None):
        has = t[:, b0:b1].sum(axis=1) > 0
        if members is not None:
            has &= members
        tasks.append((int(r[has, b0:b1].sum()), int(edges[b0]), int(edges[b1]), shard_ids[has].tolist()))

    for p in np.unique(part_of):
        ranges = np.flatnonzero(part_of == p)
        start, rows = None, 0
        for b in ranges:
            rb = int(r[:, b].sum())
            if rb > limit:  # one range alone is too big: close the run, then split the range by shards
                if start is not None:
                    emit(start, b)
                start, rows = None, 0
                acc = np.cumsum(r[:, b])
                group = acc // limit  # runs of consecutive shards of about limit rows (one shard is never split)
                for gid in np.unique(group[t[:, b] > 0]):
                    emit(b, b + 1, group == gid)
                continue
            if start is not None and rows + rb > limit:
                emit(start, b)
                start, rows = None, 0
            if start is None:
                start = b
            rows += rb
        if start is not None:
            emit(start, ranges[-1] + 1)
    # Largest first: the last tasks to start are short ones, so no worker is left alone with a long one.
    tasks = [c for c in tasks if c[3]]
    return [(lo, hi, members) for _, lo, hi, members in sorted(tasks, key=lambda c: -c[0])]


def user_side_tasks(parts, census: list[dict], pending: list[int]) -> list[tuple[int, int, list[int], list[int]]]:
    """(first item, end item, member shards, shards to write) per user-side task for the ``pending`` shards.

    Tasks are cut from every shard's census and explain every member's targets, so a resumed run groups
    targets exactly as a clean one (the same batches give the same bits: BLAS sums depend on a batch's
    shape); only the pending members' pieces are written, and tasks with none are dropped.
    """
    keep = set(pending)
    tasks = [(lo, hi, members, [s for s in members if s in keep]) for lo, hi, members in cut_user_side(parts, census)]
    return [task for task in tasks if task[3]]


def shard_items(tasks: list[tuple[int, int, list[int], list[int]]]) -> dict[int, list[tuple[int, int]]]:
    """Per shard, the item ranges of the user-side tasks that write a piece for it."""
    out: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, _, members in tasks:
        for s in members:
            out.setdefault(s, []).append((lo, hi))
    return out
