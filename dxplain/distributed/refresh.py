"""The refresh's passes on Dask: scatter the job once, one task per shard or item range, retries,
progress in the log."""

from __future__ import annotations

import logging
import time

import numpy as np
from distributed import Client

from ..explain.shards import (RefreshJob, completed_shards, in_shard_order, pass_stats, plan_shard, run_shard,
                              shard_items, user_side_chunk, user_side_tasks)
from ..io import runs
from .cluster import gather_in_order, scatter

log = logging.getLogger(__name__)


def run_on_cluster(client: Client, job: RefreshJob, shards: list[np.ndarray], run_dir: str,
                   retries: int = 2) -> tuple[list[dict], dict]:
    """The three passes of ``explain.shards`` on the cluster; shard entries in shard order and the passes' stats.

    The job (factors, B, where the parts are) is scattered to every worker once, so tasks carry only
    their user block or item part. A task lost with its worker is recomputed elsewhere by the
    scheduler; ``retries`` covers errors raised inside a task. Every file is written atomically, so a
    task that runs twice leaves one complete file. Each pass waits for the one before: user-side tasks
    need every shard's targets, shards every user-side piece of theirs.
    """
    job_f = scatter(client, job, broadcast=True)
    stamp = time.time_ns()

    def run_pass(name: str, fn, args: list[tuple], describe) -> list:
        t0 = time.perf_counter()
        futures = [client.submit(fn, job_f, *a, retries=retries, pure=False,
                                 key=f"dxplain-{name}-{n:05d}-{stamp}") for n, a in enumerate(args)]
        return gather_in_order(futures, lambda done, r: log.info(
            "%s %d/%d done: %s (%.1fs)", name, done, len(futures), describe(r), time.perf_counter() - t0))

    done = completed_shards(len(shards), run_dir)
    pending = [s for s in range(len(shards)) if s not in done]
    plans = run_pass("plan", plan_shard, [(s, shards[s], run_dir) for s in range(len(shards))] if pending else [],
                     lambda r: f"shard {r['shard']}, {r['targets']} targets")
    plan = user_side_tasks(job.parts, plans, pending)
    chunks = run_pass("user-side", user_side_chunk,
                      [(lo, hi, [(s, shards[s]) for s in members], write, run_dir) for lo, hi, members, write in plan],
                      lambda r: f"items {r['items'][0]}:{r['items'][1]}, {r['targets']} targets of {r['shards']} "
                                f"shards, {r['rows']} rows")
    items = shard_items(plan)
    written = run_pass("shard", run_shard, [(s, shards[s], run_dir, items.get(s, [])) for s in pending],
                       lambda r: f"shard {r['shard']}, {r['users']} users, {r['targets']} targets, {r['rows']} rows")
    entries = in_shard_order(done, written)
    runs.clear_stage(run_dir)
    return entries, pass_stats(plans, chunks)
