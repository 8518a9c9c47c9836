"""The refresh's plan: pure functions of sizes and counts, no I/O.

How many user shards (``shard_count``), which users each holds (``shard_users``), the item blocks the
user side is planned in (``item_blocks``), and how the user-side tasks are cut from every shard's
per-block counts (``user_side_chunks``, ``user_side_tasks``). ``summarize`` merges the shards' entries
into a run's summary. The passes that run this plan are in ``refresh.passes``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..interactions import Interactions, equal_cuts

# Output rows one shard (or one user-side chunk) holds before writing: bounds a task's memory however
# many targets the run has (docs/scaling.md has the measured worker peaks).
ROWS_PER_SHARD = 8_000_000

# Item blocks per item part in the user side's plan: the grain its tasks are cut at.
BLOCKS_PER_PART = 64


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
    """Contiguous user blocks of about equal work: interactions (the explanation cost follows them) + 1 per user."""
    work = np.concatenate([[0], np.cumsum(data.user_degree() + 1)])
    return [np.arange(a, b) for a, b in itertools.pairwise(equal_cuts(work, min(n_shards, data.n_users)))]


def item_blocks(parts) -> np.ndarray:
    """Edges of the item blocks the user side is planned in: each item part cut into up to
    ``BLOCKS_PER_PART`` ranges of equal item count (block b holds items edges[b]:edges[b+1])."""
    return np.unique(
        np.concatenate(
            [
                np.linspace(lo, hi, BLOCKS_PER_PART + 1).astype(np.int64)
                for lo, hi in itertools.pairwise(parts.item_cuts)
            ]
        )
    )


def user_side_chunks(parts, plans: list[dict], rows_per_chunk: int | None = None) -> list[tuple[int, int, list[int]]]:
    """(first item, end item, shards) per user-side task: a range of items inside one item part and
    every shard with targets on them, so each item's raters are gathered and searched once for all
    its targets.

    Ranges are runs of item blocks holding at most ``rows_per_chunk`` rows: by default a shard's share
    of all user-side rows (never more than ``ROWS_PER_SHARD``), about as many tasks as shards, so the
    pass balances over the workers even when one part holds most targets. A single block above that
    (a popular item's many targets) is split by shards instead, at worst one shard per task.
    """
    edges = item_blocks(parts)
    if not plans:
        return []
    t = np.array([plan["block_targets"] for plan in plans])  # (shards, blocks)
    r = np.array([plan["block_rows"] for plan in plans])
    shard_ids = np.array([plan["shard"] for plan in plans])
    total = int(r.sum())
    limit = rows_per_chunk or min(ROWS_PER_SHARD, max(1, -(-total // len(plans))))
    part_of = np.searchsorted(parts.item_cuts, edges[:-1], side="right") - 1
    chunks = []  # (rows, lo, hi, shards)

    def emit(b0, b1, members=None):
        has = t[:, b0:b1].sum(axis=1) > 0
        if members is not None:
            has &= members
        chunks.append((int(r[has, b0:b1].sum()), int(edges[b0]), int(edges[b1]), shard_ids[has].tolist()))

    for p in np.unique(part_of):
        blocks = np.flatnonzero(part_of == p)
        start, rows = None, 0
        for b in blocks:
            rb = int(r[:, b].sum())
            if rb > limit:  # one block alone is too big: close the run, then split the block by shards
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
            emit(start, blocks[-1] + 1)
    # Largest first: the last tasks to start are short ones, so no worker is left alone with a long one.
    chunks = [c for c in chunks if c[3]]
    return [(lo, hi, members) for _, lo, hi, members in sorted(chunks, key=lambda c: -c[0])]


def user_side_tasks(parts, plans: list[dict], pending: list[int]) -> list[tuple[int, int, list[int], list[int]]]:
    """(first item, end item, member shards, shards to write) per user-side task for the ``pending`` shards.

    Tasks are cut from every shard's plan and explain every member's targets, so a resumed run groups
    targets exactly as a clean one (the same batches give the same bits: BLAS sums depend on a batch's
    shape); only the pending members' pieces are written, and tasks with none are dropped.
    """
    keep = set(pending)
    tasks = [(lo, hi, members, [s for s in members if s in keep]) for lo, hi, members in user_side_chunks(parts, plans)]
    return [task for task in tasks if task[3]]


def shard_items(tasks: list[tuple[int, int, list[int], list[int]]]) -> dict[int, list[tuple[int, int]]]:
    """Per shard, the item ranges of the user-side tasks that write a piece for it."""
    out: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, _, members in tasks:
        for s in members:
            out.setdefault(s, []).append((lo, hi))
    return out


def pass_stats(plans: list[dict], chunks: list[dict]) -> dict:
    """Seconds inside the plan and user-side tasks, summed (the shards' own split is in their entries)."""
    return {
        "plan_seconds": round(sum(p["seconds"] for p in plans), 3),
        "user_side_seconds": round(sum(c["seconds"] for c in chunks), 3),
        "user_side_tasks": len(chunks),
        "user_side_rows": sum(c["rows"] for c in chunks),
    }


def summarize(entries: list[dict], passes: dict | None = None) -> dict:
    """Counts, throughput and fidelity of a run, merged from its shard entries and its passes' stats."""
    passes = passes or {}
    fresh = [e for e in entries if not e.get("resumed")]
    # Seconds inside the tasks per pass, summed (CPU-side split of the stage's wall time): plan (the targets,
    # recommended or selected), the item-keyed user side, then the shards' gather, explain and write.
    task_seconds = {
        "plan": passes.get("plan_seconds", 0.0),
        "user_side": passes.get("user_side_seconds", 0.0),
        **{p: round(sum(e.get(f"seconds_{p}", 0.0) for e in fresh), 3) for p in ("gather", "explain", "write")},
    }
    busy = sum(task_seconds.values())
    rows = sum(e["rows"] for e in entries)
    measured = [e for e in entries if e["targets"] > 0]
    return {
        "users": sum(e["users"] for e in entries),
        "targets": sum(e["targets"] for e in entries),
        "attributions": rows,
        "pairs_scored": sum(e.get("pairs_scored", 0) for e in entries),
        "shards": len(entries),
        "resumed_shards": sum(bool(e.get("resumed")) for e in entries),
        "user_side_tasks": passes.get("user_side_tasks", 0),
        "attributions_per_second": round(rows / max(busy, 1e-9)),  # per task-second of work
        "task_seconds": task_seconds,
        # Over shards that explained something: a shard without targets has no error to report.
        "fidelity_max_rel_error": {
            s: max((e[f"max_rel_error_{s}"] for e in measured), default=None) for s in ("item", "user")
        },
        "fidelity_median_rel_error": {
            s: float(np.median([e[f"median_rel_error_{s}"] for e in measured])) if measured else None
            for s in ("item", "user")
        },
        "fidelity_p99_rel_error_below": {
            s: quantile_bound([e.get(f"rel_error_decades_{s}", {}) for e in measured], 0.99) for s in ("item", "user")
        },
    }


def quantile_bound(decades: list[dict[str, int]], q: float) -> float | None:
    """An upper bound on the q-quantile of the targets' relative error from their counts per decade
    (``explain.representer.decade_counts``, added up over shards): 10^(e+1) for the decade e that holds
    it (inf for the last, open decade); None without targets. Exact as a bound on the q-quantile taken as
    the smallest error that at least q of the targets reach (numpy's ``method="inverted_cdf"``), coarse
    by a decade."""
    from ..explain.representer import ERROR_DECADES

    counts = {}
    for d in decades:
        for e, c in d.items():
            counts[int(e)] = counts.get(int(e), 0) + c
    total = sum(counts.values())
    if total == 0:
        return None
    seen = 0
    for e in sorted(counts):
        seen += counts[e]
        if seen >= q * total:
            return float("inf") if e >= ERROR_DECADES[-1] else 10.0 ** (e + 1)
    return float("inf")
