"""Find likely false negatives in implicit feedback (negative-sample aggregation, paper App. C).

load interactions → positives (rating ≥ threshold) → negatives (all unobserved, sampled, or a list) →
train (or reuse) the BCE model → score every negative → keep the lowest p% → write the flagged pairs →
optionally retrain without them. Every unobserved pair as a negative: trained here, scanned over user
shards on the mapper. Sampled negatives: the training table D = P ∪ N is partitioned, trained by
alternating half-steps over its parts and scored where its by-user parts are, which also write the
cleaned set as a Parquet dataset.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..datasets.registry import resolve_prepared
from ..errors import InputError
from ..explain import negatives as N
from ..explain import negatives_parts as NP
from ..io import model_store
from ..io.atomic import join
from ..io.results import finish_results, staged_results
from ..io.targets import pairs_table, read_negatives
from ..kernels.bce import DenseTerms, SparseTerms
from ..models.base import FactorModel
from ..models.implicit_mf import (
    DEFAULT_NEG_WEIGHT,
    ImplicitMF,
    ImplicitModel,
    dense_terms,
    positive_pairs,
    sample_negatives,
    sparse_terms,
    training_table,
)
from ..models.policy import train_implicit
from ..params import CLUSTER, FACTORS, Interval, OneOf, Satisfies, validate
from .common import Training, load_data, load_training, open_mapper, partition, stage, warn_if_capped

CONSTRAINTS = {
    "percent": Interval(float, 0, 100, open_low=True, example=1),
    "method": OneOf(*N.METHODS),
    "negatives": Satisfies(
        lambda v: v == "all" or v.isdigit() or Path(v).exists(),
        "'all' (every unobserved pair), a number of samples per positive (e.g. 4), or a "
        "Parquet/CSV file of (user, item) negatives",
    ),
    "neg_weight": Interval(float, 0, open_low=True, example=0.05),
    **FACTORS,
    **CLUSTER,
    "max_sweeps": Interval(int, 1, example=30),
    "newton_steps": Interval(int, 0),
}


@task(cache_policy=NO_CACHE)
def build_terms(P, negatives: str, neg_weight: float, seed: int, excluded=None) -> DenseTerms | SparseTerms:
    if negatives == "all":
        return dense_terms(P, neg_weight, excluded)
    nu, ni = read_negatives(negatives, P) if not negatives.isdigit() else sample_negatives(P, int(negatives), seed)
    return sparse_terms(P, nu, ni, neg_weight, excluded)


@task(cache_policy=NO_CACHE)
def train(
    trainer: ImplicitMF,
    path,
    data,
    n_pos: int,
    n_neg: int,
    terms=None,
    mapper=None,
    parted=None,
    reuse: bool = False,
    blocks: bool = False,
):
    """The BCE model stored at ``path`` when ``reuse`` and it is there; else trained and stored: over
    ``parted`` = (training table, its parts) on the mapper when given (sampled negatives), else on
    ``terms`` in this process (every unobserved pair, or a listed set). ``data`` gives the ids it is
    stored with (P, or the training table). With ``blocks`` the factors are row-block files beside the
    parts (``models.blocks``): trained so, stored a block at a time, and a stored model is read back so."""
    logger = get_run_logger()
    if reuse and model_store.exists(path):
        logger.info("reusing model %s (same training data and hyperparameters)", path)
        return ImplicitModel.from_stored(FactorModel.load(path, data, blocks=(mapper, parted[1]) if blocks else None))
    if parted is None:
        m = trainer.fit(terms)
        steps = f"{m.info['lbfgs_iters']} L-BFGS"
    else:
        m = train_implicit(trainer, parted[0], mapper, parted[1], blocks)
        steps = f"{m.info['sweeps']} alternating sweeps over {len(parted[1].user_cuts) - 1} parts"
    m.save(path, data)
    warn_if_capped(trainer, m)
    logger.info(
        "trained implicit MF k=%d λ=%g on |P|=%d, |N|=%d: ‖∇f‖=%.1e after %s + %d Newton steps in %.1fs → %s",
        trainer.k,
        m.lam,
        n_pos,
        n_neg,
        m.grad_norm,
        steps,
        m.info["newton_iters"],
        m.info["seconds"],
        path,
    )
    return m


def parted_table(name: str, P, terms: SparseTerms, out: str, mapper):
    """(D = P ∪ N as one table, its by-user and by-item parts): what sampled negatives train and score on."""
    table = training_table(P, *terms.negatives())
    return table, partition(Training(name, table, True), out, mapper)


@task(cache_policy=NO_CACHE)
def flag_negatives(method: str, m, terms, P, percent: float, seed: int, n_shards: int, mapper):
    return N.select_lowest(N.negative_score(method, m, terms, P, seed), terms, percent, mapper, n_shards)


@task(cache_policy=NO_CACHE)
def flag_in_parts(method: str, m, terms, P, percent: float, seed: int, parts, mapper, cleaned):
    return NP.select_lowest_parts(
        N.negative_score(method, m, terms, P, seed), parts, terms.n_neg, percent, mapper, cleaned
    )


def fit_summary(
    method: str, percent: float, negatives: str, trainer: ImplicitMF, n_pos: int, n_neg: int, flagged: int, m, path
) -> dict:
    """What every run's summary says: what was flagged among how many negatives, and how far the BCE model
    stored at ``path`` was fitted."""
    return {
        "method": method,
        "percent": percent,
        "negatives": negatives,
        "neg_weight": trainer.neg_weight,
        "positives": n_pos,
        "negatives_total": n_neg,
        "flagged": flagged,
        "model": str(path),
        "grad_norm": m.grad_norm,
        "lam": m.lam,
        "solver": m.info.get("solver", "lbfgs"),
        "converged": bool(m.grad_norm <= trainer.rtol * m.lam),
        "sweeps": m.info.get("sweeps"),
        "newton_iters": m.info.get("newton_iters"),
    }


def flag_sampled_in_parts(
    dataset: str,
    settings: Settings,
    mapper,
    per_positive: int,
    trainer: ImplicitMF,
    tags: dict,
    method: str,
    percent: float,
    tmp,
    seconds: dict,
    peaks: dict,
) -> tuple[dict, dict]:
    """The sampled-negatives run with nothing whole in this process: the interactions scanned and parted
    by tasks, each by-user part's negatives sampled and written by a task (``load_training``), D = P ∪ N
    parted, trained over its parts, scored where its by-user parts are (the representer's sums over the
    positives from the parts too), the cleaned set written by the parts into ``tmp``. Its summary and the
    tables to write."""
    with stage(seconds, "load", peaks):  # with the sampling, by tasks
        training = load_training(dataset, settings, mapper, True, per_positive, trainer.seed)
    with stage(seconds, "partition", peaks):
        parts = partition(training, settings.out, mapper)
    D = training.data
    n_pos = int(round(D.rating_mean() * len(D)))
    path = model_store.model_path(settings.out, training.name, D.fingerprint(), **tags, s=trainer.seed)
    with stage(seconds, "train", peaks):
        m = train(trainer, path, D, n_pos, len(D) - n_pos, mapper=mapper, parted=(D, parts), reuse=True, blocks=True)
    with stage(seconds, "flag", peaks):
        scores = NP.part_scores(method, m, parts, trainer.seed)
        values, users, items = NP.select_lowest_parts(
            scores, parts, len(D) - n_pos, percent, mapper, join(tmp, "cleaned-negatives.parquet")
        )
    summary = fit_summary(method, percent, str(per_positive), trainer, n_pos, len(D) - n_pos, len(values), m, path)
    summary |= {"users": D.n_users, "items": D.n_items, "sampled_by": "tasks"}
    return summary, {"flagged": N.flagged_table(values, users, items, D, method)}


def load_whole(
    dataset: str,
    settings: Settings,
    positive_threshold: float | None,
    negatives: str,
    neg_weight: float,
    seed: int,
    seconds: dict,
    peaks: dict,
) -> tuple:
    """(dataset, positives P, training terms) loaded and built in this process; bad input fails here."""
    with stage(seconds, "load", peaks):
        ds = load_data(dataset, settings)
        P = positive_pairs(ds.interactions, positive_threshold)
    if len(P) == 0:
        raise InputError(
            f"no interaction has rating ≥ {positive_threshold}; lower --positive-threshold "
            "or pass --positive-threshold none to treat every interaction as a positive"
        )
    if negatives == "all":
        N.check_all_unobserved(P.n_users, P.n_items)
    with stage(seconds, "sample", peaks):
        terms = build_terms(P, negatives, neg_weight, seed)
    return ds, P, terms


def flag_whole(
    whole: tuple,
    settings: Settings,
    mapper,
    negatives: str,
    trainer: ImplicitMF,
    tags: dict,
    method: str,
    percent: float,
    shards: int | None,
    retrain: bool,
    tmp,
    seconds: dict,
    peaks: dict,
) -> tuple[dict, dict]:
    """The run on a table held here: trained here (every unobserved pair, a list) or over the parts of
    D = P ∪ N (sampled), scored over user shards or where D's by-user parts are; retrained if asked.
    Its summary and the tables to write."""
    ds, P, terms = whole
    seed, neg_weight = trainer.seed, trainer.neg_weight
    reusable = negatives == "all" or negatives.isdigit()  # a supplied file may change under the same name
    base_path = model_store.model_path(
        settings.out, ds.name, P.fingerprint(), **tags, n=negatives if reusable else "file", s=seed
    )
    sampled = negatives.isdigit()
    with stage(seconds, "partition", peaks):
        # Sampled negatives: trained, scored and cleaned where the training table's parts are.
        parted = parted_table(ds.name, P, terms, settings.out, mapper) if sampled else None
    with stage(seconds, "train", peaks):
        m = train(trainer, base_path, P, terms.n_pos, terms.n_neg, terms, mapper, parted, reuse=reusable)
    with stage(seconds, "flag", peaks):
        if sampled:
            values, users, items = flag_in_parts(
                method, m, terms, P, percent, seed, parted[1], mapper, join(tmp, "cleaned-negatives.parquet")
            )
        else:
            values, users, items = flag_negatives(
                method, m, terms, P, percent, seed, shards or 4 * settings.workers, mapper
            )
    summary = fit_summary(method, percent, negatives, trainer, len(P), terms.n_neg, len(values), m, base_path)
    tables = {"flagged": N.flagged_table(values, users, items, P, method)}
    if isinstance(terms, SparseTerms) and not sampled:  # a listed set; all-unobserved: "all but flagged"
        tables["cleaned-negatives"] = pairs_table(
            P, *sparse_terms(P, *terms.negatives(), neg_weight, (users, items)).negatives()
        )
    if retrain:
        with stage(seconds, "retrain", peaks):
            terms2 = build_terms(P, negatives, neg_weight, seed, excluded=(users, items))
            path2 = model_store.model_path(
                settings.out, ds.name, P.fingerprint(), **tags, cleaned=f"-{method}-p{percent:g}", s=seed
            )
            m2 = train(
                trainer,
                path2,
                P,
                terms2.n_pos,
                terms2.n_neg,
                terms2,
                mapper,
                parted_table(ds.name, P, terms2, settings.out, mapper) if sampled else None,
            )
        summary["retrained"] = {"objective": m2.info["objective"], "grad_norm": m2.grad_norm, "negatives": terms2.n_neg}
    return summary, tables


@flow(name="dxplain-negatives", log_prints=True)
def negatives(
    dataset: str = "movielens-100k",
    percent: float = 1.0,
    method: str = "representer",
    negatives: str = "all",
    neg_weight: float = DEFAULT_NEG_WEIGHT,
    positive_threshold: float | None = 4.0,
    k: int = 32,
    lam: float | None = None,
    seed: int = 0,
    out: str | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    shards: int | None = None,
    retrain: bool = False,
    in_memory: bool = False,
    max_sweeps: int | None = None,
    newton_steps: int | None = None,
) -> dict:
    """Flag the p% negatives most likely to be false negatives; write them (and a cleaned set); retrain if asked.

    Parameters
    ----------
    dataset : str
        Dataset name or path.
    percent : float
        Share of the negatives to flag, in %.
    method : str
        representer, fia, loss or random.
    negatives : str
        'all' unobserved pairs, a number of uniform samples per positive, or a Parquet/CSV file of
        (user, item) negatives.
    neg_weight : float
        Weight w of the negative terms (paper: 0.05).
    positive_threshold : float
        Ratings ≥ this are positives; 'none' = every interaction is a positive.
    k : int
        Rank.
    lam : float
        λ (default 3/|D|, chosen on validation recall@20 on ml-100k).
    seed : int
        Seed of the initialisation and of sampled negatives.
    retrain : bool
        Retrain without the flagged negatives and store it.
    max_sweeps : int
        Cap training: alternating sweeps over the parts (sampled negatives), or L-BFGS iterations (default
        500); the summary's grad_norm says how far from stationary the model stopped.
    newton_steps : int
        Cap the Newton polish after them (default 100).
    out, scheduler, workers, shards, in_memory
        Where results go and where the work runs (``dxplain.cli.common.run_options``).
    """
    validate(CONSTRAINTS, locals())
    t0, seconds, peaks = time.perf_counter(), {}, {}
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    logger = get_run_logger()
    caps = (("max_sweeps", max_sweeps), ("lbfgs_steps", max_sweeps), ("newton_steps", newton_steps))
    budget = {name: v for name, v in caps if v is not None}
    trainer = ImplicitMF(k=k, lam=lam, neg_weight=neg_weight, seed=seed, **budget)
    # A capped model is stored under its own name, never reused as an uncapped one.
    tags = {
        "implicit-k": k,
        "lam": "default" if lam is None else lam,
        "w": neg_weight,
        "sweeps": max_sweeps,
        "newton": newton_steps,
    }
    # Every interaction a positive, sampled negatives, a prepared dataset: nothing whole in this process.
    in_parts = (
        negatives.isdigit()
        and positive_threshold is None
        and method != "fia"
        and not retrain
        and resolve_prepared(dataset, settings) is not None
    )
    # Otherwise the table is loaded here first, so that bad input fails before a cluster starts.
    whole = (
        None
        if in_parts
        else load_whole(dataset, settings, positive_threshold, negatives, neg_weight, seed, seconds, peaks)
    )
    with open_mapper(settings, in_memory) as mapper, staged_results(settings.out, "negatives") as (tmp, folder):
        if in_parts:
            summary, tables = flag_sampled_in_parts(
                dataset, settings, mapper, int(negatives), trainer, tags, method, percent, tmp, seconds, peaks
            )
        else:
            summary, tables = flag_whole(
                whole, settings, mapper, negatives, trainer, tags, method, percent, shards, retrain, tmp, seconds, peaks
            )
        summary = {
            "dataset": dataset,
            **summary,
            "stage_seconds": seconds,
            "peak_rss_mib": mapper.peak_rss_mib(),
            "flow_peak_rss_mib_after_stage": peaks,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        finish_results(tmp, folder, tables, summary)
    summary["folder"] = str(folder)
    logger.info(
        "negatives done: %s flagged %d of %d negatives (%.3g%%) in %.1fs → %s",
        method,
        summary["flagged"],
        summary["negatives_total"],
        percent,
        summary["seconds"],
        folder,
    )
    return summary
