"""The nightly explanation refresh.

load interactions → partition them (by user, by item) → train (or load) the model, ALS shards reading
the parts → preprocess (Ũ, Ṽ, α beside the parts) → shard users over Dask: each shard's targets
(recommended or supplied) → the user side per range of items, all shards' targets on them at once → each shard
explains its item side, gathers its user side and writes one Parquet file atomically → manifest →
move LATEST.
"""

from __future__ import annotations

import contextlib
import time
from functools import partial

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dxplain.config import Settings
from dxplain.datasets import resolve_dataset
from dxplain.errors import InputError
from dxplain.distributed.als import ClusterHalfSteps
from dxplain.distributed.cluster import connect, peak_rss_mib
from dxplain.distributed.refresh import run_on_cluster
from dxplain.explain.representer import Preprocessed
from dxplain.explain.shards import RefreshJob, run_in_memory, shard_count, shard_users, summarize
from dxplain.io import model_store, partitions, runs
from dxplain.io.interactions import read_targets
from dxplain.models.mf import ALSMF, DEFAULT_K, default_lam


@task(retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def load_data(dataset: str, settings: Settings):
    ds = resolve_dataset(dataset, settings)
    get_run_logger().info("dataset %s: %d interactions, %d users, %d items", ds.name, len(ds.interactions),
                          ds.interactions.n_users, ds.interactions.n_items)
    return ds


@task(cache_policy=NO_CACHE)
def partition(ds, out: str):
    """The interactions as by-user and by-item Parquet parts: what training and explanation shards read."""
    t = time.perf_counter()
    parts = partitions.write_partitions(partitions.store_path(out, ds.name, ds.interactions), ds.interactions)
    get_run_logger().info("interactions in %d by-user and %d by-item parts at %s (%.1fs)", len(parts.user_cuts) - 1,
                          len(parts.item_cuts) - 1, parts.root, time.perf_counter() - t)
    return parts


@task(cache_policy=NO_CACHE)
def train_or_load(ds, model: str | None, out: str, k: int, lam: float | None, seed: int, client=None,
                  budget: dict | None = None, parts=None):
    """Use --model if given; else reuse the model trained on this exact data, else train and store one
    (ALS half-steps sharded on the cluster when there is one, each shard reading its part of ``parts``).
    ``budget`` caps ALS sweeps and Newton steps (``max_sweeps``, ``polish_iters``); a capped model is
    stored under its own name."""
    logger = get_run_logger()
    data = ds.interactions
    if model:
        logger.info("loading model %s", model)
        return model_store.load_model(model, data), model
    lam = lam if lam is not None else default_lam(len(data))
    budget = budget or {}
    path = model_store.model_path(out, ds.name, data.fingerprint(), k, lam, seed, **budget)
    if model_store.exists(path):
        logger.info("reusing model %s (same data fingerprint and hyperparameters)", path)
        return model_store.load_model(path, data), str(path)
    half_steps = partial(ClusterHalfSteps, client, parts) if client else None
    m = ALSMF(k=k, lam=lam, seed=seed, **budget).fit(data, half_steps=half_steps)
    model_store.save_model(path, m, data)
    logger.info("trained ALS-MF k=%d λ=%g: ‖∇f‖=%.1e after %d sweeps + %d Newton steps in %.1fs → %s",
                k, lam, m.grad_norm, m.info["sweeps"], m.info["newton_iters"], m.info["seconds"], path)
    if m.grad_norm > ALSMF.tol:
        logger.warning("training stopped at ‖∇f‖=%.1e, above %.0e (budget %s): attributions will sum to the "
                       "score only approximately; the run's fidelity error says by how much", m.grad_norm,
                       ALSMF.tol, budget or "default")
    return m, str(path)


@task(cache_policy=NO_CACHE)
def preprocess(m, ds, parts, top_n: int, top_k: int, targets) -> RefreshJob:
    """Balanced factors and α; α written beside the parts for the shards to read."""
    logger = get_run_logger()
    if m.lam is None:
        logger.warning("the model has no λ (imported factors): global importance omits the factor "
                       "1/(λ|D|), so importances are relative — their ranking and signs are unchanged, "
                       "but they do not sum to the score")
    data = ds.interactions
    return RefreshJob.create(data, Preprocessed.from_model(m, data), parts.root, top_n=top_n, top_k=top_k,
                             targets=targets)


@task(cache_policy=NO_CACHE)
def explain_all(job: RefreshJob, ds, n_shards: int, run_dir: str, client=None):
    """Shard entries and the passes' stats (``explain.shards``)."""
    shards = shard_users(ds.interactions, n_shards)
    return run_on_cluster(client, job, shards, run_dir) if client else run_in_memory(job, shards, run_dir)


@task(cache_policy=NO_CACHE)
def publish(out: str, run_dir: str, entries: list[dict], meta: dict) -> dict:
    manifest = {**meta, "shards": entries}
    runs.finish_run(out, run_dir, manifest)
    return manifest


@contextlib.contextmanager
def stage(seconds: dict, name: str):
    """Record the wall seconds of one stage of the refresh (reported in the run's summary)."""
    t = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = round(time.perf_counter() - t, 2)


@flow(name="dxplain-refresh", log_prints=True)
def refresh(dataset: str = "movielens-100k", model: str | None = None, out: str | None = None,
            scheduler: str | None = None, workers: int | None = None, top_n: int = 10, top_k: int = 10,
            targets: str | None = None, shards: int | None = None, k: int = DEFAULT_K, lam: float | None = None,
            seed: int = 0, in_memory: bool = False, max_sweeps: int | None = None,
            newton_steps: int | None = None) -> dict:
    """Explain every user's top-N recommendations (or a supplied target list) and publish the run.

    ``max_sweeps`` / ``newton_steps`` cap training (default: train to ‖∇f‖ ≤ 1e-9). A capped model
    stops short of the optimum, so its attributions sum to the score only approximately: the
    summary's fidelity error says by how much.
    """
    t0, seconds = time.perf_counter(), {}
    for name, value, least in (("max-sweeps", max_sweeps, 1), ("newton-steps", newton_steps, 0)):
        if value is not None and value < least:
            raise InputError(f"--{name} {value}: must be at least {least} (leave it out to train to convergence)")
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    with stage(seconds, "load"):
        ds = load_data(dataset, settings)
        supplied = read_targets(targets, ds.interactions) if targets else None  # bad input fails before any work
    n_targets = len(supplied) if supplied is not None else ds.interactions.n_users * top_n
    n_shards = shards or shard_count(settings.workers, ds.interactions, n_targets, top_k)
    if not in_memory:
        runs.check_shared(settings.out)  # before any work: workers must reach the run folder
    with contextlib.nullcontext() if in_memory else connect(settings) as client:
        with stage(seconds, "partition"):
            parts = partition(ds, settings.out)
        with stage(seconds, "train"):
            budget = {name: v for name, v in (("max_sweeps", max_sweeps), ("polish_iters", newton_steps))
                      if v is not None}
            m, model_path = train_or_load(ds, model, settings.out, k, lam, seed, client, budget, parts)
        with stage(seconds, "preprocess"):
            job = preprocess(m, ds, parts, top_n, top_k, supplied)
        # Same plan, same output: an interrupted run of this plan is resumed rather than started afresh.
        plan = {"data": ds.interactions.fingerprint(), "model": model_path, "grad_norm": m.grad_norm,
                "top_n": top_n, "top_k": top_k, "shards": n_shards,
                "targets": runs.sha256_file(targets) if targets else None}
        run_dir, resumed = runs.start_run(settings.out, plan)
        if resumed:
            get_run_logger().info("resuming interrupted run %s: shards matching their recorded hash are kept", run_dir)
        with stage(seconds, "recommend_explain_write"):  # targets, attributions and shard files, per shard
            entries, passes = explain_all(job, ds, n_shards, str(run_dir), client)
        memory = peak_rss_mib(client)
    summary = {"run": str(run_dir), "dataset": dataset, "model": model_path, **summarize(entries, passes),
               "seconds": round(time.perf_counter() - t0, 2), "stage_seconds": seconds, "peak_rss_mib": memory,
               "grad_norm": m.grad_norm,
               "lam": m.lam, "lam_known": m.lam is not None, "top_n": top_n, "top_k": top_k}
    with stage(seconds, "publish"):
        publish(settings.out, str(run_dir), entries, {"summary": summary})
    get_run_logger().info(
        "refresh done: %d users, %d targets, %d attributions from %d scored pairs in %.1fs (%s; %d "
        "attributions/s in tasks); "
        "fidelity max rel. error item %.1e, user %.1e; peak RSS MiB %s; LATEST → %s",
        summary["users"], summary["targets"],
        summary["attributions"], summary["pairs_scored"], summary["seconds"], ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()),
        summary["attributions_per_second"],
        summary["fidelity_max_rel_error"]["item"], summary["fidelity_max_rel_error"]["user"],
        {"flow": memory["flow"], "workers": sorted(memory["workers"].values())}, run_dir)
    return summary
