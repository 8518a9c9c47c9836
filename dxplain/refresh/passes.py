"""The refresh in three passes over user shards and item ranges, mapped by any ``Mapper``.

1. ``census_shard``: each shard's targets (supplied, or its users' top-n, kept in the run's stage) and
   how many fall in each item range.
2. ``user_side_task``: item-keyed. Each task takes a range of items inside one item part with every
   shard's targets on them, reads those items' raters once and explains all the targets together, so
   a popular item's raters are gathered and searched once for all their targets, not once per shard
   holding one of them. Its rows go to the stage, one piece per shard.
3. ``run_shard``: each shard reads its users' part for the item side, gathers its user-side pieces,
   orders all rows once and writes ``part-<shard>.parquet`` atomically.

Item-keying the user side is what keeps its cost linear: with user shards streaming the item parts, a
target item's raters were gathered and scored once per shard, and shards multiply as |D| grows
(docs/scaling.md has the measurements). ``run_passes`` runs the three passes on a mapper: in this
process or on Dask, the same tasks in the same batches, so both write the same bytes. α is written
beside the parts before them, by ``refresh.alpha``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .. import progress
from ..explain.representer import Preprocessed, RepresenterExplainer
from ..explain.run_rows import attribution_rows, extra_columns, fidelity
from ..explain.targets import recommend
from ..interactions import Targets, stable_id_order
from ..io import runs
from ..io.partitions import Part, Partitions
from ..mapper import Mapper
from .plan import item_ranges, shard_items, user_side_tasks

log = logging.getLogger(__name__)

# The user-side columns a user-side task stages for a shard: the target's position among the shard's targets,
# then the training row and its attribution.
USER_SIDE_COLUMNS = ("target", "train_user", "train_item", "rating", "global_importance", "local_importance")


@dataclass
class RefreshJob:
    """Read-only state every shard needs, scattered to each worker once: O(users + items), never O(|D|).

    The interactions and α stay on storage in ``parts`` (read with α: ``refresh.alpha`` wrote it): a shard
    reads its own users' part, a user-side task one item part, so no worker holds the whole table.
    """

    parts: Partitions
    pre: Preprocessed  # the factors, B and Bx only (``refresh.alpha``): α comes with each part
    item_degree: np.ndarray  # raters per item: the user side's work, known before any part is read
    top_n: int = 10
    top_k: int = 10
    targets: Targets | None = None  # supplied targets; None = every user's top-n unseen items
    top_unobserved: int = 0  # iALS: the largest terms of each target's unobserved row on the item side

    def __post_init__(self):
        if self.pre.B is None or self.pre.A is not None or self.pre.alpha is not None:
            raise ValueError("a RefreshJob holds Preprocessed.factors(): B for the user side's sums, no A or α")
        if self.pre.extra is not None and self.pre.Bx is None:
            raise ValueError("a RefreshJob of a model with extra rows holds Bx, the user side's extra-row embedding")


@dataclass(frozen=True)
class PassResults:
    """What the three passes return (``refresh.summary`` makes the run's summary of it)."""

    entries: list[dict]  # every shard's manifest entry (``run_shard``), in shard order, kept ones included
    census: list[dict]  # pass 1's per shard (``census_shard``); none when every shard was kept
    user_side: list[dict]  # pass 2's per task (``user_side_task``)


def shard_targets(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> Targets:
    """The targets of a shard's users (a contiguous range): the supplied ones, or their top-n unseen items.

    Recommended targets are computed once, by the census, and kept in the run's stage for the later passes.
    """
    if job.targets is not None:
        return job.targets.for_user_range(int(users[0]), int(users[-1]) + 1)
    name = f"targets/shard-{shard:05d}"
    staged = runs.read_stage(run_dir, name)
    if staged is not None:
        return Targets(*(staged[c].to_numpy() for c in ("user", "item", "rec_rank")))
    own = job.parts.read_users(int(users[0]), int(users[-1]) + 1).data
    # An implicit model's table holds its sampled negatives too (y = 0): they stay recommendable.
    seen = own.subset(own.rating > 0) if job.pre.loss == "bce" else own
    t = recommend(job.pre.Ut, job.pre.Vt, seen, users, job.top_n)
    runs.write_stage(run_dir, name, pa.table({"user": t.user, "item": t.item, "rec_rank": t.rec_rank}))
    return t


def census_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> dict:
    """Pass 1: the shard's targets, and how many targets and user-side rows fall in each item range.

    Rows per target are at most 2·top_k (top_k most positive and most negative), or the item's raters
    when top_k = 0 keeps them all.
    """
    t0 = time.perf_counter()
    t = shard_targets(job, shard, users, run_dir)
    edges = item_ranges(job.parts)
    in_range = np.searchsorted(edges, t.item, side="right") - 1
    rows = np.full(len(t), 2 * job.top_k) if job.top_k else job.item_degree[t.item]
    n = len(edges) - 1
    return {
        "shard": shard,
        "targets": len(t),
        "seconds": time.perf_counter() - t0,
        "range_targets": np.bincount(in_range, minlength=n).tolist(),
        "range_rows": np.bincount(in_range, weights=rows, minlength=n).astype(np.int64).tolist(),
    }


def user_side_task(
    job: RefreshJob, lo: int, hi: int, shards: list[tuple[int, np.ndarray]], write: list[int], run_dir: str
) -> dict:
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
    order = stable_id_order(owner)
    bounds = np.searchsorted(owner[order], np.arange(len(shards) + 1))
    for n, ((s, _), (_, sel)) in enumerate(zip(shards, selected)):
        if s not in todo:
            continue
        rows = order[bounds[n] : bounds[n + 1]]
        piece = {c: v[rows] for c, v in columns.items()}
        piece["target"] = sel[piece["target"] - offsets[n]]
        runs.write_stage(run_dir, _piece(s, lo, hi), pa.table(piece))
    return {
        "items": [lo, hi],
        "shards": len(shards),
        "targets": len(tp),
        "rows": len(order),
        "seconds": time.perf_counter() - t0,
    }


def _piece(shard: int, lo: int, hi: int) -> str:
    return f"user-side/shard-{shard:05d}/items-{lo}-{hi}"


def user_side_columns(job: RefreshJob, part: Part, t: Targets) -> dict[str, np.ndarray]:
    """The user side of targets whose items are all in ``part`` (``USER_SIDE_COLUMNS``; ``target``
    indexes ``t``)."""
    a = RepresenterExplainer(part.data, job.pre.with_alpha(part.alpha)).user_side(t, job.top_k)
    d = part.data
    return dict(
        zip(
            USER_SIDE_COLUMNS,
            (
                a.target.astype(np.int64),
                d.user[a.train],
                d.item[a.train],
                d.rating[a.train],
                a.global_importance,
                a.local_importance,
            ),
        )
    )


def explain_shard(
    job: RefreshJob, own: Part, t: Targets, user_side: dict[str, np.ndarray]
) -> tuple[pa.Table, dict, int]:
    """Both sides of the targets' explanations, their fidelity and the work.

    Item side: the target users' histories, all in ``own``. User side: ``user_side``, the rows the
    item parts computed for these targets (``USER_SIDE_COLUMNS``), ordered here. Rows come out as the
    whole-table ``RepresenterExplainer.explain`` gives them: item side then user side, each by target and
    importance.

    The work is the number of (target, training row) pairs the exact explanation scores: Σ over targets
    of the user's history length and the item's rater count. It sets the cost, and grows faster than
    |D| when targets favour popular items.

    ``user_side`` is consumed: its arrays are let go once the user side's rows are made, before the item
    side is computed, so a shard never holds both sides' columns beside both sides' tables.
    """
    ex = RepresenterExplainer(own.data, job.pre.with_alpha(own.alpha))
    s = ex.scores(t)
    # Each side's extra row (biased MF's bias, iALS's unobserved entries): the user side's from Bx, the item
    # side's from the own part, which holds the target users' whole histories.
    extra = {side: ex.extra(t, side) for side in ("item", "user")}
    more = {side: [] if v is None else [extra_columns(job.pre.extra, t, side, v)] for side, v in extra.items()}
    user_rows = attribution_rows(
        t,
        s,
        job.pre.mu,
        "user",
        job.parts.user_ids,
        job.parts.item_ids,
        *(user_side[c] for c in USER_SIDE_COLUMNS),
        loss=job.pre.loss,
        more=more["user"],
    )
    user_side.clear()
    terms = None
    if job.top_unobserved:  # the own part holds the target users' whole histories: their unobserved items are known
        terms = job.pre.extra.top_terms(ex.pre, own.data, "item", t, job.top_unobserved)
    item_rows = ex.rows(t, s, "item", ex.item_side(t, job.top_k), extra["item"], terms)
    # Σ over every training row of each side, not only the top-k, and its extra row: the item side from the own
    # part, the user side from B and Bx (its raters are spread over the item parts).
    sums = [ex.side_sum(t, side, extra[side]) for side in ("item", "user")]
    fid = fidelity(*sums, s, job.pre.score_floor)
    pairs = int(own.data.user_degree()[t.user].sum() + job.item_degree[t.item].sum())
    return pa.concat_tables([item_rows, user_rows]), fid, pairs


def run_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str, items: list[tuple[int, int]]) -> dict:
    """Pass 3: explain the shard's users' targets and write ``part-<shard>.parquet``; return its manifest entry.

    ``users`` is a contiguous range; ``items`` are the item ranges of the user-side tasks that staged a
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
            raise RuntimeError(
                f"shard {shard}: the user side of items {lo}:{hi} is not staged in {run_dir}; "
                "its user-side task must run first"
            )
        pieces.append(piece)
    user_side = {
        c: np.concatenate([piece[c].to_numpy() for piece in pieces]) if pieces else np.empty(0, dt)
        for c, dt in zip(USER_SIDE_COLUMNS, (np.int64, np.int32, np.int32, float, float, float))
    }
    del pieces  # their columns are copied into user_side: the staged tables go before the explanation
    t1 = time.perf_counter()
    # Fidelity (Σ attributions vs score, relative) per side; the flow merges it over shards.
    table, fid, pairs = explain_shard(job, own, t, user_side)
    t2 = time.perf_counter()
    entry = runs.write_shard(
        run_dir,
        shard,
        table,
        {
            "users": int(len(users)),
            "targets": int(len(t)),
            "pairs_scored": pairs,
            **{f"{stat}_{side}": v for side, stats in fid.items() for stat, v in stats.items()},
            "seconds_gather": t1 - t0,
            "seconds_explain": t2 - t1,
        },
    )
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


def run_passes(mapper: Mapper, job: RefreshJob, shards: list[np.ndarray], run_dir: str) -> PassResults:
    """The three passes on ``mapper``; what each returned (``PassResults``).

    The job (factors, B, where the parts are) is sent to every worker once, so tasks carry only their
    user range or item range. Every file is written atomically, so a task that runs twice leaves one
    complete file, and shards an interrupted run of this plan already wrote are kept. Each pass waits
    for the one before: user-side tasks need every shard's targets, shards every user-side piece of theirs.
    """
    job_h = mapper.put(job, broadcast=True)

    def run_pass(name: str, fn, args: list[tuple], describe) -> list:
        t0 = time.perf_counter()

        def report(done, r):
            log.debug("%s %d/%d done: %s (%.1fs)", name, done, len(args), describe(r), time.perf_counter() - t0)
            progress.update(f"explain: {name}", done, len(args))

        return mapper.map(fn, [(job_h, *a) for a in args], name=name, report=report)

    done = completed_shards(len(shards), run_dir)
    pending = [s for s in range(len(shards)) if s not in done]
    census = run_pass(
        "census",
        census_shard,
        [(s, shards[s], run_dir) for s in range(len(shards))] if pending else [],
        lambda r: f"shard {r['shard']}, {r['targets']} targets",
    )
    tasks = user_side_tasks(job.parts, census, pending)
    user_side = run_pass(
        "user-side",
        user_side_task,
        [(lo, hi, [(s, shards[s]) for s in members], write, run_dir) for lo, hi, members, write in tasks],
        lambda r: (
            f"items {r['items'][0]}:{r['items'][1]}, {r['targets']} targets of {r['shards']} shards, {r['rows']} rows"
        ),
    )
    items = shard_items(tasks)
    written = run_pass(
        "shard",
        run_shard,
        [(s, shards[s], run_dir, items.get(s, [])) for s in pending],
        lambda r: f"shard {r['shard']}, {r['users']} users, {r['targets']} targets, {r['rows']} rows",
    )
    write_run_targets(job, len(shards), run_dir)
    runs.clear_stage(run_dir)
    return PassResults(in_shard_order(done, written), census, user_side)


def write_run_targets(job: RefreshJob, n_shards: int, run_dir: str) -> None:
    """The run's targets in original ids (user, item, rec_rank; null ranks for supplied targets) as
    ``_meta/targets.parquet``, one row each: what the next run compares itself with (``reporting.diff``). A run
    resumed after every shard was written has no staged targets left: it writes none, and says so."""
    if job.targets is not None:
        user, item, rank = job.targets.user, job.targets.item, job.targets.rec_rank
    else:
        staged = [runs.read_stage(run_dir, f"targets/shard-{s:05d}") for s in range(n_shards)]
        if any(t is None for t in staged):
            log.info("%s: its targets were not staged any more (a resumed run); no targets file", run_dir)
            return
        t = pa.concat_tables(staged)
        user, item, rank = (t[c].to_numpy() for c in ("user", "item", "rec_rank"))
    table = pa.table(
        {
            "user": job.parts.user_ids.take(pa.array(user)),
            "item": job.parts.item_ids.take(pa.array(item)),
            "rec_rank": pa.array(rank, pa.int32()) if rank is not None else pa.nulls(len(user), pa.int32()),
        }
    )
    runs.write_meta_table(run_dir, runs.TARGETS, table)
