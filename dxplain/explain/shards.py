"""One shard of the refresh: recommend (or take supplied targets), explain, write — the unit Dask maps."""

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

# Output rows one shard holds before writing: bounds a shard's memory however many targets the run has.
# With 8M rows per shard, the 20M and 50M benchmarks peaked at 2.0 and 3.0 GiB per worker (VmHWM; the
# rest of the growth is the worker's share of the ALS parts and the factors).
ROWS_PER_SHARD = 8_000_000


@dataclass
class RefreshJob:
    """Read-only state every shard needs, scattered to each worker once: O(users + items), never O(|D|).

    The interactions and α stay on storage in ``parts``: a shard reads its own users' part and streams
    the item parts its targets need, one at a time, so no worker holds the whole table.
    """

    parts: Partitions
    pre: Preprocessed  # Ũ, Ṽ and B only (``Preprocessed.factors``): α comes with each part
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
        return cls(parts, pre.factors(), top_n, top_k, targets)


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


def explain_parts(job: RefreshJob, own: Part, t: Targets) -> tuple[pa.Table, dict, int]:
    """Both sides of the targets' explanations, their fidelity and the work, from the parts of the data
    they need.

    Item side: the target users' histories, all in ``own``. User side: each target item's raters, all in
    the one item part that holds the item, read one part at a time; its attributions from every part are
    gathered as indices and ordered once. Rows come out as the whole-table ``RepresenterExplainer.explain``
    gives them: item side then user side, each by target and importance.

    The work is the number of (target, training row) pairs the exact explanation scores: Σ over targets
    of the user's history length and the item's rater count. It sets the cost, and grows faster than
    |D| when targets favour popular items.
    """
    ex = RepresenterExplainer(own.data, job.pre.with_alpha(own.alpha))
    s = ex.scores(t)
    item_rows = ex.rows(t, s, "item", ex.item_side(t, job.top_k))
    # Σ over every training row of each side, not only the top-k: the item side from the own part, the
    # user side from B (its raters are spread over the item parts).
    item_sum, user_sum = ex.side_sum(t, "item"), ex.side_sum(t, "user")
    columns = []  # per part: target, train user, train item, rating, α, local importance
    pairs = int(own.data.user_degree()[t.user].sum())
    for p in job.parts.item_parts(t.item):
        part = job.parts.read_items(int(p))
        lo, hi = job.parts.item_range(int(p))
        sel = np.flatnonzero((t.item >= lo) & (t.item < hi))
        tp = t.take(sel)
        ex_p = RepresenterExplainer(part.data, job.pre.with_alpha(part.alpha))
        a = ex_p.user_side(tp, job.top_k)
        d = part.data
        pairs += int(d.item_degree()[tp.item].sum())
        columns.append((sel[a.target], d.user[a.train], d.item[a.train], d.rating[a.train],
                        a.global_importance, a.local_importance))
    empty = (np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int32), *[np.empty(0)] * 3)
    user_rows = attribution_rows(t, s, job.pre.mu, "user", job.parts.user_ids, job.parts.item_ids,
                                 *(np.concatenate(c) for c in zip(empty, *columns)))
    return pa.concat_tables([item_rows, user_rows]), fidelity(item_sum, user_sum, s), pairs


def run_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> dict:
    """Explain the shard's users' targets and write ``part-<shard>.parquet``; return its manifest entry.

    ``users`` is a contiguous block. A shard already written by an interrupted run of the same plan
    (file hash verified) is kept.
    """
    done = runs.completed_shard(run_dir, shard)
    if done is not None:
        return {**done, "resumed": True}
    t0 = time.perf_counter()
    own = job.parts.read_users(int(users[0]), int(users[-1]) + 1)
    if job.targets is None:
        t = recommend(job.pre.Ut, job.pre.Vt, own.data, users, job.top_n)
    else:
        t = job.targets.for_users(users)
    t1 = time.perf_counter()
    # Fidelity (Σ attributions vs score, relative) per side; the flow merges it over shards.
    table, fid, pairs = explain_parts(job, own, t)
    t2 = time.perf_counter()
    entry = runs.write_shard(run_dir, shard, table, {
        "users": int(len(users)), "targets": int(len(t)), "pairs_scored": pairs,
        **{f"{stat}_{side}": v for side, stats in fid.items() for stat, v in stats.items()},
        "seconds_recommend": t1 - t0, "seconds_explain": t2 - t1,
    })
    # Known only once the file is written, so in the returned entry (the manifest), not the side file.
    t3 = time.perf_counter()
    entry["seconds_write"], entry["seconds"] = t3 - t2, t3 - t0
    return entry


def run_in_memory(job: RefreshJob, shards: list[np.ndarray], run_dir: str) -> list[dict]:
    """The in-memory twin of ``distributed.refresh.run_on_cluster``: same shards, same files."""
    return [run_shard(job, s, users, run_dir) for s, users in enumerate(shards)]


def summarize(entries: list[dict]) -> dict:
    """Counts, throughput and fidelity of a run, merged from its shard entries."""
    busy = sum(e["seconds"] for e in entries if not e.get("resumed"))
    rows = sum(e["rows"] for e in entries)
    return {
        "users": sum(e["users"] for e in entries), "targets": sum(e["targets"] for e in entries),
        "attributions": rows, "pairs_scored": sum(e.get("pairs_scored", 0) for e in entries),
        "shards": len(entries), "resumed_shards": sum(bool(e.get("resumed")) for e in entries),
        "attributions_per_second": round(rows / max(busy, 1e-9)),  # per shard-second of work
        # Seconds inside the shard tasks per phase, summed over shards (CPU-side split of the stage's wall time).
        "shard_seconds": {p: round(sum(e.get(f"seconds_{p}", 0.0) for e in entries if not e.get("resumed")), 3)
                          for p in ("recommend", "explain", "write")},
        "fidelity_max_rel_error": {s: max((e[f"max_rel_error_{s}"] for e in entries), default=0.0)
                                   for s in ("item", "user")},
        "fidelity_median_rel_error": {s: float(np.median([e[f"median_rel_error_{s}"] for e in entries]))
                                      if entries else 0.0 for s in ("item", "user")},
    }
