"""Fit a Kolmogorov model (IKM) and write its metrics, rules, influence scores and θ, ψ.

options → load the training data (and the test split) → p_ui → λ, μ on validation (unless given) →
IKM on the mapper (ψ-step by item shards, θ-step by user shards) → test RMSE, rules, influence → one
folder at ``--out``, written whole.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..datasets import resolve_dataset
from ..interactions import Interactions
from ..io import kolmogorov as kio
from ..io.atomic import is_local
from ..io.results import check_out_folder
from ..kolmogorov import report
from ..kolmogorov.data import FEEDBACK, check_options, probabilities
from ..kolmogorov.fit import SOLVERS, STEPS, fit_ikm, select_regularisers
from ..params import CLUSTER, Interval, OneOf, validate
from .common import open_mapper

CONSTRAINTS = {
    "dim": Interval(int, 2, example=8),
    "solver": OneOf(*SOLVERS),
    "iterations": Interval(int, 1, example=5),
    "lam": Interval(float, 0, example=1),
    "mu": Interval(float, 0, example=0.5),
    "step": OneOf(*STEPS),
    "r_min": Interval(float, example=1),
    "r_max": Interval(float, 0, open_low=True, example=5),
    "feedback": OneOf(*FEEDBACK),
    "negatives": Interval(int, 1, example=1),
    "like_threshold": Interval(float),
    "max_rules": Interval(int, 0, example=2_000_000),
    "seed": Interval(int, 0),
    **CLUSTER,
}
LAM_GRID, MU_GRID = (0.0, 1.0, 4.0), (0.0, 0.5, 2.0)


@task(cache_policy=NO_CACHE)
def load(dataset: str, feedback: str, like_threshold: float, settings: Settings):
    """A named dataset through the registry; a path through io (implicit data may lack ratings)."""
    from ..datasets.registry import ALIASES

    if dataset.lower() in ALIASES or (feedback == "explicit" and not is_local(dataset)):
        return resolve_dataset(dataset, settings)
    return kio.read_table_for(dataset, feedback, like_threshold)


@flow(name="dxplain-kolmogorov-fit", log_prints=True)
def kolmogorov_fit(
    dataset: str,
    dim: int,
    out: str,
    test: str | None = None,
    solver: str = "sdr",
    iterations: int = 5,
    lam: float | None = None,
    mu: float | None = None,
    step: str = "pairwise",
    r_min: float = 1.0,
    r_max: float = 5.0,
    feedback: str = "explicit",
    negatives: int = 1,
    like_threshold: float = 4.0,
    skip_unseen: bool = False,
    check_exhaustive: bool = False,
    max_rules: int = 2_000_000,
    seed: int = 0,
    force: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    shards: int | None = None,
    in_memory: bool = False,
) -> dict:
    """Fit P[u likes i] = θ_uᵀψ_i by IKM; write metrics.json, rules.parquet, influence.parquet, model/.

    Parameters
    ----------
    dataset
        Training data: dataset name or path.
    test
        Test pairs (Parquet/CSV with user, item, rating) for rmse_stars and nrmse.
    dim
        D, the number of elementary events (≥ 2).
    solver
        Ψ-step: sdr (semidefinite relaxation + randomisation) or exhaustive (D ≤ 16).
    out
        Output folder (written whole; must be new or empty unless --force).
    iterations
        BCD iterations.
    lam
        Λ, ℓ2 on θ (default: chosen on a validation split).
    mu
        Μ, ℓ1 on ψ (default: chosen on a validation split).
    step
        Frank–Wolfe step: pairwise, exact (line search) or simple (2/(k+2)).
    r_min
        Lowest rating of the scale.
    r_max
        Highest rating of the scale (p = rating / R_max).
    feedback
        Explicit (p = rating / R_max) or implicit (likes as 1, sampled negatives as 0).
    negatives
        Implicit: sampled negatives per like.
    like_threshold
        A rating ≥ this is a like (implicit mode, rule support and checks).
    skip_unseen
        Drop test rows whose user or item is absent from training (default: an error).
    check_exhaustive
        With sdr, also run exhaustive search on every ψ-step and report the error rate.
    max_rules
        Rules written at most (the most popular antecedents' first; metrics give the total).
    seed
        Seed of the initialisation, the randomisation and the splits.
    force
        Replace a non-empty --out.
    scheduler, workers, shards, in_memory
        Where the work runs: an existing Dask scheduler, LocalCluster workers, user and item shards per step
        (default 2 per worker), or this process.
    """
    validate(CONSTRAINTS, locals())
    check_options(dim, solver, check_exhaustive, r_min, r_max)
    check_out_folder(out, force)
    t0 = time.perf_counter()
    logger = get_run_logger()
    settings = Settings.from_env(scheduler=scheduler, workers=workers)
    ds = load(dataset, feedback, like_threshold, settings)
    train = ds.interactions
    if feedback == "explicit":
        kio.check_ratings(train.rating, r_min, r_max, str(dataset))
    if test is not None:
        tu, ti, ty, skipped = kio.read_test(test, train, skip_unseen)
        if feedback == "explicit":
            kio.check_ratings(ty, r_min, r_max, str(test))
    P = probabilities(train, feedback, r_max, like_threshold, negatives, seed)
    fit_opts = dict(solver=solver, step=step, seed=seed)
    metrics = {
        "dataset": dataset,
        "dim": dim,
        "solver": solver,
        "iterations": iterations,
        "feedback": feedback,
        "n_train": len(P),
    }
    with open_mapper(settings, in_memory) as mapper:
        if lam is None or mu is None:
            lam, mu, grid = select_regularisers(
                P,
                dim,
                (lam,) if lam is not None else LAM_GRID,
                (mu,) if mu is not None else MU_GRID,
                mapper=mapper,
                shards=shards,
                **fit_opts,
            )
            metrics["validation"] = grid
            logger.info(
                "λ = %g, μ = %g chosen on a 10%% validation split (RMSE of p %.4f)",
                lam,
                mu,
                min(g["rmse_p"] for g in grid),
            )
        m = fit_ikm(
            P,
            dim,
            iterations,
            lam=lam,
            mu=mu,
            check=check_exhaustive and solver == "sdr",
            mapper=mapper,
            shards=shards,
            log=logger.info,
            **fit_opts,
        )
        metrics["peak_rss_mib"] = mapper.peak_rss_mib()
    metrics.update(
        lam=lam, mu=mu, train_objective=m.info["train_objective"], trace=m.info["trace"], fit_seconds=m.info["seconds"]
    )
    for key in ("sdr_vs_exhaustive_error", "sdr_rounded_vs_exhaustive_error"):
        if key in m.info:
            metrics[key] = m.info[key]
    if test is not None:
        held = Interactions.from_indices(tu, ti, ty, train.user_ids, train.item_ids)
        metrics.update(
            n_test=len(held),
            skipped_unseen=int(skipped),
            **report.test_metrics(m, held, feedback, r_max, like_threshold),
        )
        metrics["rule_check"] = report.held_out_rules(m, train, held, like_threshold, seed, max_rules)
    rules, metrics["rules_total"] = report.rules_table(m, train, ds.items, like_threshold, max_rules)
    tables = {"rules": rules, "influence": report.influence_table(m, train, ds.items)}
    metrics.update(
        rules=rules.num_rows,
        maximal=int(tables["influence"].column("maximal").to_numpy().sum()),
        seconds=round(time.perf_counter() - t0, 2),
    )
    meta = {
        "kind": "kolmogorov",
        "loss": "squared",
        "lam": lam,
        "mu": mu,
        "n_train": len(P),
        "r_max": r_max,
        "r_min": r_min,
        "feedback": feedback,
        "solver": solver,
        "info": {"train_objective": m.info["train_objective"]},
    }
    kio.write_fit(out, m.theta, m.psi, meta, train, tables, metrics, force)
    logger.info(
        "Kolmogorov model D=%d written to %s (%d rules, %d maximal items) in %.1fs",
        dim,
        out,
        metrics["rules"],
        metrics["maximal"],
        metrics["seconds"],
    )
    return {**metrics, "out": out}
