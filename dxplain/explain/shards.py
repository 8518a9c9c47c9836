"""The refresh in three passes over user blocks (shards) and item ranges: the units Dask maps.

1. ``plan_shard``: each shard's targets (supplied, or its users' top-n, kept in the run's stage) and
   how many fall in each item block.
2. ``user_side_chunk``: item-keyed. Each task takes a range of items inside one item part with every
   shard's targets on them, reads those items' raters once and explains all the targets together, so
   a popular item's raters are gathered and searched once for all their targets, not once per shard
   holding one of them. Its rows go to the stage, one piece per shard.
3. ``run_shard``: each shard reads its users' part for the item side, gathers its user-side pieces,
   orders all rows once and writes ``part-<shard>.parquet`` atomically.

Item-keying the user side is what keeps its cost linear: with user shards streaming the item parts, a
target item's raters were gathered and scored once per shard, and shards multiply as |D| grows (at
50M, 1.5 targets per item per shard). The 50M refresh's explanation stage went from 310 s to 207 s
with popularity-drawn targets and from 214 s to 136 s with uniform ones (``benchmarks/scaling.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..interactions import Interactions, Targets, equal_cuts
from ..io import runs
from ..io.partitions import ROWS_PER_PART, Part, Partitions, write_alpha, write_partitions
from .representer import Preprocessed, RepresenterExplainer, attribution_rows, fidelity
from .targets import recommend

# Output rows one shard (or one user-side chunk) holds before writing: bounds a task's memory however
# many targets the run has. With 8M rows per shard, the 20M and 50M benchmarks peaked at 2.0 and 3.0 GiB
# per worker (VmHWM; the rest of the growth is the worker's share of the ALS parts and the factors).
ROWS_PER_SHARD = 8_000_000

# The user-side columns a chunk stages for a shard: the target's position among the shard's targets,
# then the training row and its attribution.
# Item blocks per item part in the user side's plan: the grain its tasks are cut at.
BLOCKS_PER_PART = 64

USER_SIDE_COLUMNS = ("target", "train_user", "train_item", "rating", "global_importance", "local_importance")


@dataclass
class RefreshJob:
    """Read-only state every shard needs, scattered to each worker once: O(users + items), never O(|D|).

    The interactions and α stay on storage in ``parts``: a shard reads its own users' part, a user-side
    task one item part, so no worker holds the whole table.
    """

    parts: Partitions
    pre: Preprocessed  # Ũ, Ṽ and B only (``Preprocessed.factors``): α comes with each part
    item_degree: np.ndarray  # raters per item: the user side's work, known before any part is read
    top_n: int = 10
    top_k: int = 10
    targets: Targets | None = None  # supplied targets; None = every user's top-n unseen items

    def __post_init__(self):
        if self.pre.B is None or self.pre.A is not None or self.pre.alpha is not None:
            raise ValueError("a RefreshJob holds Preprocessed.factors(): B for the user side's sums, no A or α")

    @classmethod
    def create(cls, data: Interactions, pre: Preprocessed, root, top_n: int = 10, top_k: int = 10,
               targets: Targets | None = None, rows_per_part: int = ROWS_PER_PART) -> "RefreshJob":
        """Write (or reuse) the partitioned interactions and α at ``root``; keep only the factors in memory."""
        parts = write_partitions(root, data, rows_per_part)
        # α is all that changes with the model: the same α is reused, any other rewritten.
        key = f"{data.fingerprint()}-{hashlib.sha256(np.ascontiguousarray(pre.alpha).tobytes()).hexdigest()[:16]}"
        parts = write_alpha(parts, data, pre.alpha, key)
        return cls(parts, pre.factors(), data.item_degree(), top_n, top_k, targets)


def shard_count(workers: int, data: Interactions, n_targets: int, top_k: int,
                rows_per_shard: int = ROWS_PER_SHARD) -> int:
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


def shard_targets(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> Targets:
    """The targets of a shard's users (a contiguous block): the supplied ones, or their top-n unseen items.

    Recommended targets are computed once, by the plan, and kept in the run's stage for the later passes.
    """
    if job.targets is not None:
        return job.targets.for_user_range(int(users[0]), int(users[-1]) + 1)
    name = f"targets/shard-{shard:05d}"
    staged = runs.read_stage(run_dir, name)
    if staged is not None:
        return Targets(*(staged[c].to_numpy() for c in ("user", "item", "rec_rank")))
    own = job.parts.read_users(int(users[0]), int(users[-1]) + 1)
    t = recommend(job.pre.Ut, job.pre.Vt, own.data, users, job.top_n)
    runs.write_stage(run_dir, name, pa.table({"user": t.user, "item": t.item, "rec_rank": t.rec_rank}))
    return t


def item_blocks(parts: Partitions) -> np.ndarray:
    """Edges of the item blocks the user side is planned in: each item part cut into up to
    ``BLOCKS_PER_PART`` ranges of equal item count (block b holds items edges[b]:edges[b+1])."""
    return np.unique(np.concatenate([np.linspace(lo, hi, BLOCKS_PER_PART + 1).astype(np.int64)
                                     for lo, hi in itertools.pairwise(parts.item_cuts)]))


def plan_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> dict:
    """Pass 1: the shard's targets, and how many targets and user-side rows fall in each item block.

    Rows per target are at most 2·top_k (top_k most positive and most negative), or the item's raters
    when top_k = 0 keeps them all.
    """
    t0 = time.perf_counter()
    t = shard_targets(job, shard, users, run_dir)
    edges = item_blocks(job.parts)
    block = np.searchsorted(edges, t.item, side="right") - 1
    rows = np.full(len(t), 2 * job.top_k) if job.top_k else job.item_degree[t.item]
    n = len(edges) - 1
    return {"shard": shard, "targets": len(t), "seconds": time.perf_counter() - t0,
            "block_targets": np.bincount(block, minlength=n).tolist(),
            "block_rows": np.bincount(block, weights=rows, minlength=n).astype(np.int64).tolist()}


def user_side_chunks(parts: Partitions, plans: list[dict],
                     rows_per_chunk: int | None = None) -> list[tuple[int, int, list[int]]]:
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


def user_side_chunk(job: RefreshJob, lo: int, hi: int, shards: list[tuple[int, np.ndarray]], write: list[int],
                    run_dir: str) -> dict:
    """Pass 2: the user side of every target of these shards on items lo:hi (inside one item part),
    staged per shard for the shards in ``write``.

    The part's rows for those items are read once and all targets are explained together, grouped by
    item. A piece already staged (by an interrupted run) is kept; a task with none left to write
    computes nothing.
    """
    t0 = time.perf_counter()
    todo = {s for s in write if not runs.staged(run_dir, _piece(s, lo, hi))}
    if not todo:
        return {"items": [lo, hi], "shards": len(shards), "targets": 0, "rows": 0, "seconds": 0.0, "resumed": True}
    selected = []  # per shard: positions of its targets on these items
    for s, users in shards:
        t = shard_targets(job, s, users, run_dir)
        selected.append((t, np.flatnonzero((t.item >= lo) & (t.item < hi))))
    tp = Targets(*(np.concatenate([getattr(t, f)[sel] for t, sel in selected]) for f in ("user", "item", "rec_rank")))
    p = int(np.searchsorted(job.parts.item_cuts, lo, side="right") - 1)
    columns = user_side_columns(job, job.parts.read_items(p, lo, hi), tp)
    # Back from positions in tp to (shard, position among the shard's targets).
    offsets = np.cumsum([0] + [len(sel) for _, sel in selected])
    owner = np.searchsorted(offsets, columns["target"], side="right") - 1
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(len(shards) + 1))
    for n, ((s, _), (_, sel)) in enumerate(zip(shards, selected)):
        if s not in todo:
            continue
        rows = order[bounds[n]:bounds[n + 1]]
        piece = {c: v[rows] for c, v in columns.items()}
        piece["target"] = sel[piece["target"] - offsets[n]]
        runs.write_stage(run_dir, _piece(s, lo, hi), pa.table(piece))
    return {"items": [lo, hi], "shards": len(shards), "targets": len(tp), "rows": len(order),
            "seconds": time.perf_counter() - t0}


def _piece(shard: int, lo: int, hi: int) -> str:
    return f"user-side/shard-{shard:05d}/items-{lo}-{hi}"


def user_side_columns(job: RefreshJob, part: Part, t: Targets) -> dict[str, np.ndarray]:
    """The user side of targets whose items are all in ``part`` (``USER_SIDE_COLUMNS``; ``target``
    indexes ``t``)."""
    a = RepresenterExplainer(part.data, job.pre.with_alpha(part.alpha)).user_side(t, job.top_k)
    d = part.data
    return dict(zip(USER_SIDE_COLUMNS, (a.target.astype(np.int64), d.user[a.train], d.item[a.train],
                                        d.rating[a.train], a.global_importance, a.local_importance)))


def explain_shard(job: RefreshJob, own: Part, t: Targets, user_side: dict[str, np.ndarray]) -> tuple[pa.Table, dict, int]:
    """Both sides of the targets' explanations, their fidelity and the work.

    Item side: the target users' histories, all in ``own``. User side: ``user_side``, the rows the
    item parts computed for these targets (``USER_SIDE_COLUMNS``), ordered here. Rows come out as the
    whole-table ``RepresenterExplainer.explain`` gives them: item side then user side, each by target and
    importance.

    The work is the number of (target, training row) pairs the exact explanation scores: Σ over targets
    of the user's history length and the item's rater count. It sets the cost, and grows faster than
    |D| when targets favour popular items.
    """
    ex = RepresenterExplainer(own.data, job.pre.with_alpha(own.alpha))
    s = ex.scores(t)
    item_rows = ex.rows(t, s, "item", ex.item_side(t, job.top_k))
    # Σ over every training row of each side, not only the top-k: the item side from the own part, the
    # user side from B (its raters are spread over the item parts).
    fid = fidelity(ex.side_sum(t, "item"), ex.side_sum(t, "user"), s)
    user_rows = attribution_rows(t, s, job.pre.mu, "user", job.parts.user_ids, job.parts.item_ids,
                                 *(user_side[c] for c in USER_SIDE_COLUMNS))
    pairs = int(own.data.user_degree()[t.user].sum() + job.item_degree[t.item].sum())
    return pa.concat_tables([item_rows, user_rows]), fid, pairs


def run_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str, items: list[tuple[int, int]]) -> dict:
    """Pass 3: explain the shard's users' targets and write ``part-<shard>.parquet``; return its manifest entry.

    ``users`` is a contiguous block; ``items`` are the item ranges of the user-side tasks that staged a
    piece for it. A shard already written (a task retried after its write) is kept.
    """
    done = runs.completed_shard(run_dir, shard)
    if done is not None:
        return {**done, "resumed": True}
    t0 = time.perf_counter()
    own = job.parts.read_users(int(users[0]), int(users[-1]) + 1)
    t = shard_targets(job, shard, users, run_dir)
    pieces = []
    for lo, hi in items:
        piece = runs.read_stage(run_dir, _piece(shard, lo, hi))
        if piece is None:
            raise RuntimeError(f"shard {shard}: the user side of items {lo}:{hi} is not staged in {run_dir}; "
                               "its user-side task must run first")
        pieces.append(piece)
    user_side = {c: np.concatenate([piece[c].to_numpy() for piece in pieces]) if pieces else np.empty(0, dt)
                 for c, dt in zip(USER_SIDE_COLUMNS, (np.int64, np.int32, np.int32, float, float, float))}
    t1 = time.perf_counter()
    # Fidelity (Σ attributions vs score, relative) per side; the flow merges it over shards.
    table, fid, pairs = explain_shard(job, own, t, user_side)
    t2 = time.perf_counter()
    entry = runs.write_shard(run_dir, shard, table, {
        "users": int(len(users)), "targets": int(len(t)), "pairs_scored": pairs,
        **{f"{stat}_{side}": v for side, stats in fid.items() for stat, v in stats.items()},
        "seconds_gather": t1 - t0, "seconds_explain": t2 - t1,
    })
    # Known only once the file is written, so in the returned entry (the manifest), not the side file.
    t3 = time.perf_counter()
    entry["seconds_write"], entry["seconds"] = t3 - t2, t3 - t0
    return entry


def completed_shards(n_shards: int, run_dir: str) -> dict[int, dict]:
    """Entries of the shards an interrupted run of this plan already wrote (file hash verified), marked
    resumed; every other shard is pending. Each file is hashed once here, not again by ``run_shard``."""
    done = {s: runs.completed_shard(run_dir, s) for s in range(n_shards)}
    return {s: {**e, "resumed": True} for s, e in done.items() if e is not None}


def in_shard_order(done: dict[int, dict], written: list[dict]) -> list[dict]:
    """Every shard's entry in shard order: the kept ones and the ones just written."""
    entries = {**done, **{e["shard"]: e for e in written}}
    return [entries[s] for s in sorted(entries)]


def user_side_tasks(parts: Partitions, plans: list[dict],
                    pending: list[int]) -> list[tuple[int, int, list[int], list[int]]]:
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


def run_in_memory(job: RefreshJob, shards: list[np.ndarray], run_dir: str) -> tuple[list[dict], dict]:
    """The in-memory twin of ``distributed.refresh.run_on_cluster``: same passes, same files.

    Returns the shard entries and the passes' stats (``pass_stats``).
    """
    done = completed_shards(len(shards), run_dir)
    pending = [s for s in range(len(shards)) if s not in done]
    plans = [plan_shard(job, s, shards[s], run_dir) for s in range(len(shards))] if pending else []
    tasks = user_side_tasks(job.parts, plans, pending)
    chunks = [user_side_chunk(job, lo, hi, [(s, shards[s]) for s in members], write, run_dir)
              for lo, hi, members, write in tasks]
    items = shard_items(tasks)
    written = [run_shard(job, s, shards[s], run_dir, items.get(s, [])) for s in pending]
    runs.clear_stage(run_dir)
    return in_shard_order(done, written), pass_stats(plans, chunks)


def pass_stats(plans: list[dict], chunks: list[dict]) -> dict:
    """Seconds inside the plan and user-side tasks, summed (the shards' own split is in their entries)."""
    return {"plan_seconds": round(sum(p["seconds"] for p in plans), 3),
            "user_side_seconds": round(sum(c["seconds"] for c in chunks), 3),
            "user_side_tasks": len(chunks), "user_side_rows": sum(c["rows"] for c in chunks)}


def summarize(entries: list[dict], passes: dict | None = None) -> dict:
    """Counts, throughput and fidelity of a run, merged from its shard entries and its passes' stats."""
    passes = passes or {}
    fresh = [e for e in entries if not e.get("resumed")]
    # Seconds inside the tasks per pass, summed (CPU-side split of the stage's wall time): plan (the targets,
    # recommended or selected), the item-keyed user side, then the shards' gather, explain and write.
    task_seconds = {"plan": passes.get("plan_seconds", 0.0), "user_side": passes.get("user_side_seconds", 0.0),
                    **{p: round(sum(e.get(f"seconds_{p}", 0.0) for e in fresh), 3) for p in ("gather", "explain", "write")}}
    busy = sum(task_seconds.values())
    rows = sum(e["rows"] for e in entries)
    return {
        "users": sum(e["users"] for e in entries), "targets": sum(e["targets"] for e in entries),
        "attributions": rows, "pairs_scored": sum(e.get("pairs_scored", 0) for e in entries),
        "shards": len(entries), "resumed_shards": sum(bool(e.get("resumed")) for e in entries),
        "user_side_tasks": passes.get("user_side_tasks", 0),
        "attributions_per_second": round(rows / max(busy, 1e-9)),  # per task-second of work
        "task_seconds": task_seconds,
        "fidelity_max_rel_error": {s: max((e[f"max_rel_error_{s}"] for e in entries), default=0.0)
                                   for s in ("item", "user")},
        "fidelity_median_rel_error": {s: float(np.median([e[f"median_rel_error_{s}"] for e in entries]))
                                      if entries else 0.0 for s in ("item", "user")},
    }
