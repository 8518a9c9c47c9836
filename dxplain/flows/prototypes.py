"""Prototypes: the m training interactions that together explain a set of predictions (SBQ, Fisher kernel).

load interactions (a prepared dataset by tasks) → by-user and by-item parts → train (or load) the MF model
(a prepared dataset's in row-block files) → targets (a supplied list,
or one user's top-N) → SBQ selection: exact greedy with the by-user parts as candidate shards, each
computing its Fisher embeddings where it is (``explain.prototypes_parts``), or the other variants on the
embeddings of the whole table → write prototypes.parquet, targets.parquet and summary.json.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..errors import InputError
from ..explain.prototypes import VARIANTS, check_fisher, mf_fisher_rows, prototype_table, select
from ..explain.prototypes_parts import select_from_parts
from ..explain.run_rows import predictions
from ..explain.targets import recommend, recommend_from_blocks
from ..interactions import Interactions
from ..io.results import write_results
from ..io.targets import read_targets
from ..io.validation import index_of
from ..kernels.fisher import DEFAULT_DAMPING, FISHER_KINDS
from ..kernels.sbq import mean_embedding
from ..models.als.trainer import DEFAULT_K
from ..models.factor_rows import factor_rows
from ..params import CLUSTER, FACTORS, SAMPLED_NEGATIVES, Interval, OneOf, validate
from .common import load_training, open_mapper, partition, stage, train_or_load

CONSTRAINTS = {
    "m": Interval(int, 1, example=10),
    "fisher": OneOf(*FISHER_KINDS),
    "variant": OneOf(*VARIANTS),
    **FACTORS,
    "top_n": Interval(int, 1, example=10),
    "damping": Interval(float, 0),
    **CLUSTER,
    **SAMPLED_NEGATIVES,
    "max_sweeps": Interval(int, 1, example=8),
    "newton_steps": Interval(int, 0),
}


@task(cache_policy=NO_CACHE)
def top_n_of(parts, mf, u: np.ndarray, top_n: int):
    """The user's top-N unseen items: read from the user's part (a BCE table's sampled negatives stay
    recommendable, as in the refresh); factors kept in row-block files are scored a block of V per task."""
    seen = parts.read_users(int(u[0]), int(u[0]) + 1).data
    seen = seen.subset(seen.rating > 0) if mf.loss == "bce" else seen
    return factor_rows(mf.U).visit(
        lambda U: recommend(U, mf.V, seen, u, top_n),
        lambda U: recommend_from_blocks(U, mf.V, seen, int(u[0]), top_n),
    )


@task(cache_policy=NO_CACHE)
def embed(mf, train, T, fisher: str, damping: float):
    return mf_fisher_rows(mf, train, T, fisher, damping)


@task(cache_policy=NO_CACHE)
def choose_from_parts(mapper, parts, mf, T, m: int, fisher: str, damping: float):
    return select_from_parts(mapper, parts, mf, T, m, fisher, damping)


@task(cache_policy=NO_CACHE)
def choose_prototypes(Phi, mu, m: int, variant: str, n_shards: int, seed: int, mapper):
    return select(Phi, mu, m, variant, n_shards, seed, mapper=mapper)


@flow(name="dxplain-prototypes", log_prints=True)
def prototypes(
    dataset: str = "movielens-100k",
    model: str | None = None,
    targets: str | None = None,
    user: str | None = None,
    top_n: int = 10,
    m: int = 10,
    fisher: str = "empirical",
    variant: str = "greedy",
    damping: float = DEFAULT_DAMPING,
    out: str | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    shards: int | None = None,
    k: int = DEFAULT_K,
    lam: float | None = None,
    seed: int = 0,
    in_memory: bool = False,
    implicit: bool = False,
    neg_samples: int = 4,
    neg_weight: float = 1.0,
    max_sweeps: int | None = None,
    newton_steps: int | None = None,
) -> dict:
    """Select m training interactions whose Fisher embeddings, weighted, best match the targets' mean.

    Implicit feedback (``implicit``, or a single rating value) trains the BCE model the refresh explains
    (positives and sampled negatives) and uses its Bernoulli Fisher kernel.

    Parameters
    ----------
    dataset : str
        Dataset name or path.
    model : str
        Model Zarr (default: train or reuse the model the refresh would).
    targets : str
        Parquet/CSV list of (user, item) predictions to explain.
    user : str
        Explain this user's top-N list instead.
    top_n : int
        Length of the user's list.
    m : int
        Number of prototypes.
    fisher : str
        Fisher information: empirical, expected, identity (the 'practical' kernel).
    variant : str
        greedy (exact, sharded over the cluster), greedi (two rounds), stochastic, mp (matching pursuit).
    damping : float
        F + δI, δ = damping·tr(F)/p.
    k : int
        Rank when training.
    lam : float
        λ when training (default 30/|D|, a ridge of 15 per solve: 3e-4 on ml-100k, chosen on validation).
    seed : int
        Seed of training and of the randomised variants.
    implicit, neg_samples, neg_weight
        Implicit feedback, as for the refresh (``dxplain.flows.refresh.refresh``).
    max_sweeps, newton_steps
        Cap training, as for the refresh (a Fisher kernel needs no stationary point).
    out, scheduler, workers, shards, in_memory
        Where results go and where the work runs (``dxplain.cli.common.run_options``).
    """
    validate(CONSTRAINTS, locals())
    if (targets is None) == (user is None):
        raise InputError(
            "say what to explain: --targets FILE (a Parquet/CSV list of (user, item)) or --user ID "
            "(that user's top-N recommendations), not both"
        )
    t0, seconds, peaks = time.perf_counter(), {}, {}
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    with open_mapper(settings, in_memory) as mapper:
        with stage(seconds, "load", peaks):  # a prepared dataset by tasks: this process keeps ids and degrees
            training = load_training(dataset, settings, mapper, implicit, neg_samples, seed)
            data = training.data
            # Bad targets or an unknown user fail before any training.
            supplied = read_targets(targets, data)[0] if targets else None
            u = None if targets else index_of(pa.array([user]), data.user_ids, "user", "--user").astype(np.int64)
        with stage(seconds, "partition", peaks):  # ALS trains on the parts, and exact greedy selects from them
            parts = partition(training, settings.out, mapper)
        with stage(seconds, "train", peaks):
            # A prepared dataset's factors stay in row-block files beside the parts (a folder or URL prefix the
            # workers share): never whole here.
            blocks = not isinstance(data, Interactions)
            budget = {
                name: v for name, v in (("max_sweeps", max_sweeps), ("newton_steps", newton_steps)) if v is not None
            }
            mf, model_path = train_or_load(
                training.name,
                data,
                model,
                settings.out,
                k,
                lam,
                seed,
                mapper,
                parts,
                budget,
                implicit=training.implicit,
                neg_weight=neg_weight,
                blocks=blocks,
            )
            check_fisher(mf, data)  # a Fisher kernel written for this model (what mf_fisher_rows checks again)
        T = supplied if supplied is not None else top_n_of(parts, mf, u, top_n)
        with stage(seconds, "select", peaks):
            if variant == "greedy":
                sel = choose_from_parts(mapper, parts, mf, T, m, fisher, damping)
            else:  # the other variants take every row's embedding, built here (the model whole too)
                whole = data if isinstance(data, Interactions) else parts.read_users(0, data.n_users).data
                Phi, Phi_T = embed(mf.whole(), whole, T, fisher, damping)
                sel = choose_prototypes(
                    Phi, mean_embedding(Phi_T), m, variant, shards or 4 * settings.workers, seed, mapper
                )
        memory = mapper.peak_rss_mib()
    table = prototype_table(sel, parts)
    target_table = pa.table(
        {
            "user": data.user_ids.take(pa.array(T.user)),
            "item": data.item_ids.take(pa.array(T.item)),
            "prediction": predictions(mf.loss, 0.0, mf.predict(T.user, T.item)),
        }
    )
    summary = {
        "dataset": dataset,
        "model": model_path,
        "loss": mf.loss,
        "targets": len(T),
        "candidates": parts.n_interactions,
        "m": m,
        "selected": len(sel.index),
        "fisher": fisher,
        "variant": variant,
        "damping": damping,
        "objective_start": float(sel.objective[0]),
        "objective_end": float(sel.objective[-1]),
        "explained_share": sel.reduction / sel.objective[0] if sel.objective[0] > 0 else 0.0,
        "seconds": round(time.perf_counter() - t0, 2),
        "stage_seconds": seconds,
        "peak_rss_mib": memory,
        "flow_peak_rss_mib_after_stage": peaks,
    }
    folder = write_results(settings.out, "prototypes", {"prototypes": table, "targets": target_table}, summary)
    summary["folder"] = str(folder)
    get_run_logger().info(
        "prototypes done: %d of %d training pairs explain %d targets (%.1f%% of ‖μ_T‖² matched) in %.1fs → %s",
        len(sel.index),
        parts.n_interactions,
        len(T),
        100 * summary["explained_share"],
        summary["seconds"],
        folder,
    )
    return summary
