"""Explain a pairwise model's scores by feature Shapley values (ASIPair / RAIPair, Huai et al. 2020).

read the table → stratified 80/20 split → fit OPAUC or LowRank on the train rows → choose test pairs →
put the model and the reference (train rows) once → explain the pairs sharded over the mapper → test AUC
and the masking curve → ``<out>/attributions.parquet`` and ``<out>/metrics.json``, written whole.
"""

from __future__ import annotations

import json
import time

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..errors import InputError
from ..io.labelled import read_labelled
from ..io.results import check_out_folder, write_folder
from ..pairwise.explain import (
    EFFICIENCY_TOL,
    METHODS,
    check_explain,
    efficiency_gap,
    explain_pairs,
    masking_curve,
    permutation_rankings,
    random_rankings,
    relative_efficiency_gap,
    top_features,
)
from ..pairwise.models import MODELS, auc_lower_bound, two_classes
from ..pairwise.pairs import attributions_table, choose_pairs, split, support_signs
from ..pairwise.shapley import DEFAULT_MAX_D, ETA, MAX_D, SIGMA, check_asipair_size, check_k1, reference
from ..params import CLUSTER, Interval, OneOf, validate
from .common import open_mapper, stage

REFERENCE_ROWS = 512  # neighbour candidates per side (a seeded sample; docs/pairwise.md measures its error)

CONSTRAINTS = {
    "model": OneOf(*MODELS),
    "method": OneOf(*METHODS),
    "pairs": Interval(int, 1, example=100),
    "seed": Interval(int, 0),
    "sigma": Interval(float, 0, open_low=True, example=0.2),
    "eta": Interval(float, 0, 1, open_low=True, example=0.95),
    "k1": Interval(int, 1),
    "permutations": Interval(int, 1),
    "measurements": Interval(int, 1),
    "max_d": Interval(int, 1, MAX_D, example=DEFAULT_MAX_D),
    "reference_rows": Interval(int, 0, example=REFERENCE_ROWS),
    **CLUSTER,
}


def class_sizes(y: np.ndarray) -> tuple[int, int]:
    """The metric AUC's sample sizes for its lower bound, counted in instances (the rows outside the
    largest class, the rows in it) rather than pairs: pairs that share an instance are not independent,
    and counting them would overstate how sure the AUC is."""
    counts = np.sort(np.bincount(np.unique(y, return_inverse=True)[1]))
    return int(counts[:-1].sum()), int(counts[-1])


@task(cache_policy=NO_CACHE)
def fit_model(kind: str, X: np.ndarray, y: np.ndarray, label: str, seed: int):
    return MODELS[kind](seed=seed).fit(X, y, label)


def prepare(
    data: str, out: str, label: str, model: str, method: str, seed: int, k1: int | None, max_d: int, force: bool = False
):
    """Read and check everything that can be checked before any work (the CLI calls this before Prefect
    starts, the flow again for callers that skip the CLI): the table, --out, the label's classes, the
    split, ASIPair's cap and K₁ against the reference size. Returns (table, labels, train rows, test rows)."""
    check_out_folder(out, force)
    table = read_labelled(data, label)
    y = two_classes(table.y, label) if model == "opauc" else table.y
    train, test = split(y, seed)
    if method == "asipair":
        check_asipair_size(table.X.shape[1], max_d)
    check_k1(k1, len(train))
    return table, y, train, test


@flow(name="dxplain-pairwise", log_prints=True)
def pairwise_explain(
    data: str,
    out: str,
    label: str = "label",
    model: str = "opauc",
    method: str = "asipair",
    pairs: int = 100,
    seed: int = 0,
    sigma: float = SIGMA,
    eta: float = ETA,
    k1: int | None = None,
    permutations: int | None = None,
    measurements: int | None = None,
    max_d: int = DEFAULT_MAX_D,
    reference_rows: int = REFERENCE_ROWS,
    allow_chance: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    shards: int | None = None,
    in_memory: bool = False,
    force: bool = False,
) -> dict:
    """Fit ``model`` on 80% of ``data`` and explain ``pairs`` test pairs with ``method``; write ``out``."""
    validate(CONSTRAINTS, locals())
    t0, seconds = time.perf_counter(), {}
    logger = get_run_logger()
    settings = Settings.from_env(scheduler=scheduler, workers=workers)
    table, y_all, train, test = prepare(data, out, label, model, method, seed, k1, max_d, force)
    with stage(seconds, "fit"):
        zeta = fit_model(model, table.X[train], y_all[train], label, seed)
    Xt, yt = table.X[test], y_all[test]
    auc = zeta.auc(Xt, yt)
    n_pos, n_neg = (int((yt == 1).sum()), int((yt == 0).sum())) if model == "opauc" else class_sizes(yt)
    auc_low = auc_lower_bound(auc, n_pos, n_neg)
    if auc_low <= 0.5:
        message = (
            f"{model} on {data}: test AUC {auc:.3f} (97.5% lower bound {auc_low:.3f} ≤ 0.5) ranks no better "
            "than chance, so its Shapley values would explain noise"
        )
        if not allow_chance:
            raise InputError(f"{message}; check the label column and the features, or give --allow-chance")
        logger.warning("%s; explaining it anyway (--allow-chance)", message)
    a, b = choose_pairs(yt, pairs, model, seed)
    if len(a) == 0:
        kind = "(positive, negative) pair" if model == "opauc" else "pair"
        raise InputError(
            f"{data}: the {len(test)}-row test split has no {kind} to explain; give a table with more "
            "rows of each class"
        )
    ref = reference(zeta, table.X[train], rows=reference_rows or None, seed=seed)
    check_explain(ref, Xt[a], Xt[b], method, sigma, eta, k1, max_d)  # refuse before a cluster starts
    logger.info(
        "%s on %s: D=%d (%d through the log), %s, test AUC %.3f (lower bound %.3f); %d train / %d test rows, "
        "neighbours from %d reference rows; explaining %d pairs with %s",
        model,
        data,
        ref.D,
        int(zeta.features.logged.sum()),
        zeta.describe(),
        auc,
        auc_low,
        len(train),
        len(test),
        len(ref.Ri),
        len(a),
        method,
    )
    with stage(seconds, "explain"), open_mapper(settings, in_memory) as mapper:
        phi, zeta_ij = explain_pairs(
            zeta, ref, Xt[a], Xt[b], method, seed, sigma, eta, k1, permutations, measurements, max_d, mapper, shards
        )
    with stage(seconds, "masking"):
        fill = table.X[train].mean(0)
        signs = support_signs(model, yt[a], yt[b])
        rankings = {
            "method": top_features(signs[:, None] * phi),
            "permutation": permutation_rankings(zeta, Xt[a], Xt[b], seed, signs=signs),
            "random": random_rankings(len(a), ref.D, seed),
        }
        curve = masking_curve(zeta, Xt, yt, fill, rankings)
    efficiency = efficiency_gap(phi, zeta_ij, ref.base)
    relative = relative_efficiency_gap(phi, zeta_ij, ref.base)
    if relative > EFFICIENCY_TOL:
        logger.warning(
            "efficiency missed: Σφ differs from ζ − base by up to %.2e of |ζ − base| (tolerance %.0e)",
            relative,
            EFFICIENCY_TOL,
        )
    metrics = {
        "auc": auc,
        "auc_lower_bound": auc_low,
        "near_chance": auc_low <= 0.5,
        "masking": curve,
        "model": model,
        "method": method,
        "data": str(data),
        "label": label,
        "features": ref.D,
        "train_rows": len(train),
        "test_rows": len(test),
        "pairs": len(a),
        "seed": seed,
        "sigma": sigma,
        "eta": eta,
        "k1": k1,
        "base": ref.base,
        "permutations": permutations,
        "measurements": measurements,
        "max_efficiency_error": efficiency,
        "max_relative_efficiency_error": relative,
        "efficiency_tol": EFFICIENCY_TOL,
        "efficiency_met": relative <= EFFICIENCY_TOL,
        "lam": zeta.lam,
        "shrinkage": getattr(zeta, "shrinkage", None),  # LowRank's discriminant; OPAUC has only λ
        "estimator": zeta.describe(),
        "log_features": [f for f, on in zip(table.features, zeta.features.logged) if on],
        "reference_rows": len(ref.Ri),
        "reference_sampled_from": len(train),
        "masking_baseline": "permutation importance of each explained pair's score (values from other explained pairs)",
        "masked_value": "the training mean of each masked feature, in every test instance",
        "seconds": seconds,
    }
    write_folder(
        out,
        {"attributions": attributions_table(test[a], test[b], table.features, phi, zeta_ij, ref.base)},
        {"metrics.json": json.dumps(metrics, indent=2)},
        force=force,
    )
    metrics["seconds"]["total"] = round(time.perf_counter() - t0, 2)
    logger.info(
        "pairwise done: AUC %.3f, %d pairs in %.1fs → %s", metrics["auc"], len(a), metrics["seconds"]["total"], out
    )
    return {**metrics, "out": str(out)}
