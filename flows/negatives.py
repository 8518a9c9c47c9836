"""Find likely false negatives in implicit feedback (negative-sample aggregation, paper App. C).

load interactions → positives (rating ≥ threshold) → negatives (all unobserved, sampled, or a list) →
train (or reuse) the BCE model → score every negative → keep the lowest p% (scanned over user shards on
Dask when every unobserved pair is a negative) → write the flagged pairs → optionally retrain without them.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.negatives import scan_on_cluster
from dxplain.errors import InputError
from dxplain.explain import negatives as N
from dxplain.io import model_store
from dxplain.io.negatives import pairs_table, read_negatives, write_negatives_run
from dxplain.kernels.bce import DenseTerms, SparseTerms
from dxplain.models.implicit_mf import (DEFAULT_NEG_WEIGHT, ImplicitMF, ImplicitModel, dense_terms, positive_pairs,
                                       sample_negatives, sparse_terms)
from flows.refresh import load_data


def check_options(percent: float, method: str, negatives: str) -> None:
    """Bad options fail before any data is read or written."""
    if not 0 < percent <= 100:
        raise InputError(f"--percent {percent}: give the share of negatives to flag, 0 < P ≤ 100 (e.g. 1)")
    if method not in N.METHODS:
        raise InputError(f"--method {method!r}: choose one of {', '.join(N.METHODS)}")
    if negatives != "all" and not negatives.isdigit() and not Path(negatives).exists():
        raise InputError(f"--negatives {negatives!r}: use 'all' (every unobserved pair), a number of samples "
                         "per positive (e.g. 4), or a Parquet/CSV file of (user, item) negatives")


@task(cache_policy=NO_CACHE)
def build_terms(P, negatives: str, neg_weight: float, seed: int, excluded=None) -> DenseTerms | SparseTerms:
    if negatives == "all":
        return dense_terms(P, neg_weight, excluded)
    nu, ni = read_negatives(negatives, P) if not negatives.isdigit() else sample_negatives(P, int(negatives), seed)
    return sparse_terms(P, nu, ni, neg_weight, excluded)


@task(cache_policy=NO_CACHE)
def train(terms, P, k: int, lam: float | None, seed: int, path: Path):
    logger = get_run_logger()
    m = ImplicitMF(k=k, lam=lam, seed=seed).fit(terms)
    model_store.save_model(path, m, P)
    logger.info("trained implicit MF k=%d λ=%g on |P|=%d, |N|=%d: ‖∇f‖=%.1e after %d L-BFGS + %d Newton steps "
                "in %.1fs → %s", k, m.lam, terms.n_pos, terms.n_neg, m.grad_norm, m.info["lbfgs_iters"],
                m.info["newton_iters"], m.info["seconds"], path)
    return m


@task(cache_policy=NO_CACHE)
def flag_negatives(method: str, m, terms, P, percent: float, seed: int, n_shards: int, client=None):
    score = N.negative_score(method, m, terms, P, seed)
    if client is not None and isinstance(terms, DenseTerms):
        return scan_on_cluster(client, score, terms, N.flag_count(terms, percent), n_shards)
    return N.select_lowest(score, terms, percent)


@flow(name="dxplain-negatives", log_prints=True)
def negatives(dataset: str = "movielens-100k", percent: float = 1.0, method: str = "representer",
              negatives: str = "all", neg_weight: float = DEFAULT_NEG_WEIGHT, positive_threshold: float | None = 4.0,
              k: int = 32, lam: float | None = None, seed: int = 0, out: str | None = None,
              scheduler: str | None = None, workers: int | None = None, shards: int | None = None,
              retrain: bool = False, in_memory: bool = False) -> dict:
    """Flag the p% negatives most likely to be false negatives; write them (and a cleaned set); retrain if asked."""
    t0 = time.perf_counter()
    check_options(percent, method, negatives)
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    logger = get_run_logger()
    ds = load_data(dataset, settings)
    P = positive_pairs(ds.interactions, positive_threshold)
    if len(P) == 0:
        raise InputError(f"no interaction has rating ≥ {positive_threshold}; lower --positive-threshold "
                         "or pass --positive-threshold none to treat every interaction as a positive")
    terms = build_terms(P, negatives, neg_weight, seed)
    name = f"{ds.name}-{P.fingerprint()}-implicit-k{k}-lam{lam if lam is not None else 'default'}-w{neg_weight:g}"
    models = Path(settings.out) / "models"
    reusable = negatives == "all" or negatives.isdigit()  # a supplied file may change under the same name
    base_path = models / f"{name}-n{negatives if reusable else 'file'}-s{seed}.zarr"
    with contextlib.nullcontext() if in_memory else connect(settings) as client:
        if reusable and base_path.exists():
            logger.info("reusing model %s (same positives, negatives and hyperparameters)", base_path)
            m = ImplicitModel.from_stored(model_store.load_model(base_path, P))
        else:
            m = train(terms, P, k, lam, seed, base_path)
        values, users, items = flag_negatives(method, m, terms, P, percent, seed, shards or 4 * settings.workers,
                                              client)
    flagged = N.flagged_table(values, users, items, P, method)
    summary = {"dataset": dataset, "method": method, "percent": percent, "negatives": negatives,
               "neg_weight": neg_weight, "positives": len(P), "negatives_total": terms.n_neg,
               "flagged": len(values), "model": str(base_path), "grad_norm": m.grad_norm, "lam": m.lam}
    cleaned = None
    if isinstance(terms, SparseTerms):  # all-unobserved mode: the cleaned set is "all but flagged.parquet"
        cleaned = pairs_table(P, *sparse_terms(P, *terms.negatives(), neg_weight, (users, items)).negatives())
    if retrain:
        terms2 = build_terms(P, negatives, neg_weight, seed, excluded=(users, items))
        m2 = train(terms2, P, k, lam, seed, models / f"{name}-cleaned-{method}-p{percent:g}-s{seed}.zarr")
        summary["retrained"] = {"objective": m2.info["objective"], "grad_norm": m2.grad_norm,
                                "negatives": terms2.n_neg}
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    folder = write_negatives_run(settings.out, flagged, summary, cleaned)
    summary["folder"] = str(folder)
    logger.info("negatives done: %s flagged %d of %d negatives (%.3g%%) in %.1fs → %s", method, len(values),
                terms.n_neg, percent, summary["seconds"], folder)
    return summary

