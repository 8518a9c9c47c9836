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
    METHODS,
    check_explain,
    efficiency_gap,
    explain_pairs,
    masking_curve,
    random_rankings,
    top_features,
)
from ..pairwise.models import MODELS, two_classes
from ..pairwise.pairs import attributions_table, choose_pairs, split
from ..pairwise.shapley import DEFAULT_MAX_D, ETA, MAX_D, SIGMA, check_asipair_size, check_k1, reference
from ..params import CLUSTER, Interval, OneOf, validate
from .common import open_mapper, stage

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
    **CLUSTER,
}


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
    a, b = choose_pairs(yt, pairs, model, seed)
    if len(a) == 0:
        kind = "(positive, negative) pair" if model == "opauc" else "pair"
        raise InputError(
            f"{data}: the {len(test)}-row test split has no {kind} to explain; give a table with more "
            "rows of each class"
        )
    ref = reference(zeta, table.X[train])
    check_explain(ref, Xt[a], Xt[b], method, sigma, eta, k1, max_d)  # refuse before a cluster starts
    logger.info(
        "%s on %s: D=%d, %d train / %d test rows, explaining %d pairs with %s",
        model,
        data,
        ref.D,
        len(train),
        len(test),
        len(a),
        method,
    )
    with stage(seconds, "explain"), open_mapper(settings, in_memory) as mapper:
        phi, zeta_ij = explain_pairs(
            zeta, ref, Xt[a], Xt[b], method, seed, sigma, eta, k1, permutations, measurements, max_d, mapper, shards
        )
    with stage(seconds, "masking"):
        fill = table.X[train].mean(0)
        curve = masking_curve(
            zeta, Xt, yt, fill, {"method": top_features(phi), "random": random_rankings(len(a), ref.D, seed)}
        )
    efficiency = efficiency_gap(phi, zeta_ij, ref.base)
    metrics = {
        "auc": zeta.auc(Xt, yt),
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
