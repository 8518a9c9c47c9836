"""Prototypes: the m training interactions that together explain a set of predictions (SBQ, Fisher kernel).

load interactions → train (or load) the MF model → targets (a supplied list, or one user's top-N) →
Fisher embeddings of training pairs and targets → SBQ selection (candidates sharded over Dask workers,
or in memory) → write prototypes.parquet, targets.parquet and summary.json.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pyarrow as pa
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.sbq import greedi_on_cluster, greedy_on_cluster
from dxplain.errors import InputError
from dxplain.explain.prototypes import VARIANTS, mf_fisher_embedding, prototype_table, select
from dxplain.explain.targets import recommend
from dxplain.io.interactions import index_of, read_targets
from dxplain.io.prototypes import write_prototypes_run
from dxplain.kernels.fisher import DEFAULT_DAMPING, FISHER_KINDS
from dxplain.kernels.sbq import mean_embedding
from dxplain.models.mf import DEFAULT_K
from flows.refresh import load_data, partition, train_or_load


def check_options(m: int, fisher: str, variant: str, targets: str | None, user: str | None, top_n: int) -> None:
    """Bad options fail before any data is read or written."""
    if m < 1:
        raise InputError(f"-m {m}: give the number of prototypes to select, m ≥ 1 (e.g. 10)")
    if fisher not in FISHER_KINDS:
        raise InputError(f"--fisher {fisher!r}: choose one of {', '.join(FISHER_KINDS)}")
    if variant not in VARIANTS:
        raise InputError(f"--variant {variant!r}: choose one of {', '.join(VARIANTS)}")
    if (targets is None) == (user is None):
        raise InputError("say what to explain: --targets FILE (a Parquet/CSV list of (user, item)) or --user ID "
                         "(that user's top-N recommendations), not both")
    if top_n < 1:
        raise InputError(f"--top-n {top_n}: give the length of the user's list to explain, ≥ 1")


@task(cache_policy=NO_CACHE)
def top_n_of(ds, mf, u: np.ndarray, top_n: int):
    return recommend(mf.U, mf.V, ds.interactions, u, top_n)


@task(cache_policy=NO_CACHE)
def embed(mf, ds, T, fisher: str, damping: float):
    return mf_fisher_embedding(mf, ds.interactions, T, fisher, damping)


@task(cache_policy=NO_CACHE)
def choose_prototypes(Phi, mu, m: int, variant: str, n_shards: int, seed: int, client=None):
    if client is not None and variant == "greedy":
        return greedy_on_cluster(client, Phi, mu, m, n_shards)
    if client is not None and variant == "greedi":
        return greedi_on_cluster(client, Phi, mu, m, n_shards, seed)
    return select(Phi, mu, m, variant, n_shards, seed)


@flow(name="dxplain-prototypes", log_prints=True)
def prototypes(dataset: str = "movielens-100k", model: str | None = None, targets: str | None = None,
               user: str | None = None, top_n: int = 10, m: int = 10, fisher: str = "empirical",
               variant: str = "greedy", damping: float = DEFAULT_DAMPING, out: str | None = None,
               scheduler: str | None = None, workers: int | None = None, shards: int | None = None,
               k: int = DEFAULT_K, lam: float | None = None, seed: int = 0, in_memory: bool = False) -> dict:
    """Select m training interactions whose Fisher embeddings, weighted, best match the targets' mean."""
    t0 = time.perf_counter()
    check_options(m, fisher, variant, targets, user, top_n)
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    ds = load_data(dataset, settings)
    data = ds.interactions
    # Bad targets or an unknown user fail before any training.
    supplied = read_targets(targets, data) if targets else None
    u = None if targets else index_of(pa.array([user]), data.user_ids, "user", "--user").astype(np.int64)
    with contextlib.nullcontext() if in_memory else connect(settings) as client:
        parts = partition(ds, settings.out) if client and not model else None  # what ALS shards read
        mf, model_path = train_or_load(ds, model, settings.out, k, lam, seed, client, parts=parts)
        T = supplied if supplied is not None else top_n_of(ds, mf, u, top_n)
        Phi, Phi_T = embed(mf, ds, T, fisher, damping)
        sel = choose_prototypes(Phi, mean_embedding(Phi_T), m, variant, shards or 4 * settings.workers, seed, client)
    table = prototype_table(sel, data)
    target_table = pa.table({"user": data.user_ids.take(pa.array(T.user)), "item": data.item_ids.take(pa.array(T.item)),
                             "prediction": mf.predict(T.user, T.item)})
    summary = {"dataset": dataset, "model": model_path, "targets": len(T), "candidates": len(data), "m": m,
               "selected": len(sel.index), "fisher": fisher, "variant": variant, "damping": damping,
               "objective_start": float(sel.objective[0]), "objective_end": float(sel.objective[-1]),
               "explained_share": sel.reduction / sel.objective[0] if sel.objective[0] > 0 else 0.0,
               "seconds": round(time.perf_counter() - t0, 2)}
    folder = write_prototypes_run(settings.out, table, target_table, summary)
    summary["folder"] = str(folder)
    get_run_logger().info("prototypes done: %d of %d training pairs explain %d targets (%.1f%% of ‖μ_T‖² matched) "
                          "in %.1fs → %s", len(sel.index), len(data), len(T), 100 * summary["explained_share"],
                          summary["seconds"], folder)
    return summary
