"""One shard of the refresh: recommend (or take supplied targets), explain, write — the unit Dask maps."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..interactions import Interactions
from ..io import runs
from .representer import Preprocessed, RepresenterExplainer, fidelity
from ..interactions import Targets
from .targets import recommend


@dataclass
class RefreshJob:
    """Read-only state every shard needs; scattered to each worker once."""

    data: Interactions
    pre: Preprocessed
    top_n: int = 10
    top_k: int = 10
    targets: Targets | None = None  # supplied targets; None = every user's top-n unseen items


def shard_users(data: Interactions, n_shards: int) -> list[np.ndarray]:
    """Contiguous user blocks of about equal interaction count (the explanation cost follows it)."""
    n_shards = max(1, min(n_shards, data.n_users))
    work = np.cumsum(data.user_degree() + 1)
    cuts = np.searchsorted(work, np.linspace(0, work[-1], n_shards + 1)[1:-1])
    return [b for b in np.split(np.arange(data.n_users), cuts) if len(b)]


def run_shard(job: RefreshJob, shard: int, users: np.ndarray, run_dir: str) -> dict:
    """Explain the shard's users' targets and write ``part-<shard>.parquet``; return its manifest entry.

    A shard already written by an interrupted run of the same plan (file hash verified) is kept.
    """
    done = runs.completed_shard(run_dir, shard)
    if done is not None:
        return {**done, "resumed": True}
    t0 = time.perf_counter()
    if job.targets is None:
        t = recommend(job.pre.Ut, job.pre.Vt, job.data, users, job.top_n)
    else:
        t = job.targets.for_users(users)
    t1 = time.perf_counter()
    ex = RepresenterExplainer(job.data, job.pre)
    table = ex.explain(t, job.top_k)
    # Fidelity (Σ attributions vs score, relative) per side; the flow merges it over shards.
    fid = fidelity(*ex.side_sums(t), ex.scores(t))
    t2 = time.perf_counter()
    entry = runs.write_shard(run_dir, shard, table, {
        "users": int(len(users)), "targets": int(len(t)),
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
        "attributions": rows, "shards": len(entries), "resumed_shards": sum(bool(e.get("resumed")) for e in entries),
        "attributions_per_second": round(rows / max(busy, 1e-9)),  # per shard-second of work
        # Seconds inside the shard tasks per phase, summed over shards (CPU-side split of the stage's wall time).
        "shard_seconds": {p: round(sum(e.get(f"seconds_{p}", 0.0) for e in entries if not e.get("resumed")), 3)
                          for p in ("recommend", "explain", "write")},
        "fidelity_max_rel_error": {s: max((e[f"max_rel_error_{s}"] for e in entries), default=0.0)
                                   for s in ("item", "user")},
        "fidelity_median_rel_error": {s: float(np.median([e[f"median_rel_error_{s}"] for e in entries]))
                                      if entries else 0.0 for s in ("item", "user")},
    }
