"""GAMMLI: fit the interpretable recommender and explain it (by feature, per prediction, by training data).

fit: read ratings and feature tables → fit the three stages on the mapper (Gram map-reduces, one task
per grid point, the ALS half-steps over parts) → metrics, local table and plots on the test file →
one folder at ``--out``, written whole. explain: a stored model + pairs → the local table and the
latent part's training-data attributions.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..errors import InputError
from ..gammli.fit import Config, RatingsFile, fit_gammli_chunks
from ..gammli.latent import write_training_residuals
from ..gammli.metrics import evaluate_pairs
from ..gammli.model import GAMMLIModel, index_pairs
from ..gammli.plots import effect_tables, plot_pngs
from ..io.atomic import join
from ..io.checkpoints import Checkpoints, files_signature
from ..io.features import read_features
from ..io.gammli_model import load_model, read_training_rows, save_model
from ..io.ratings import check_labels, ratings_chunks, read_ratings
from ..io.results import check_out_folder, staged_folder, write_folder, write_into
from ..io.tables import parquet_bytes
from ..io.targets import read_pairs
from ..params import CLUSTER, Interval, OneOf, Satisfies, validate
from .common import open_mapper

CONSTRAINTS = {
    "task": OneOf("regression", "classification"),
    "rank": Interval(int, 1, example=3),
    "K": Interval(int, 1, example=10),
    "L": Interval(int, 1, example=10),
    "lam": Interval(float, 0, open_low=True, example=5),
    "smooth": Interval(float, 0, open_low=True, example=1e-4),
    "backfit": Interval(int, 0, example=3),
    "max_sweeps": Interval(int, 1, example=500),
    "max_pairs": Interval(int, 0, example=10),
    "val_fraction": Interval(float, 0, 0.9, example=0.1),
    "grid_rounds": Interval(int, 1, 5),
    "seed": Interval(int, 0),
    "top_k": Interval(int, 1, example=10),
    **CLUSTER,
    "categorical": Satisfies(lambda v: all(c.strip() for c in v.split(",")), "a comma-separated list of columns"),
}


def _categorical(spec: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in spec.split(",")) if spec else ()


@task(cache_policy=NO_CACHE)
def read_inputs(dataset, user_features, item_features, test, categorical, task_, cold_start_missing):
    """Feature tables and the training/test pairs as feature-table rows (checked where they enter)."""
    cats = _categorical(categorical)
    users = read_features(user_features, "user", cats)
    items = read_features(item_features, "item", cats)
    for c in cats:
        if c not in users.numeric | users.categorical and c not in items.numeric | items.categorical:
            raise InputError(f"--categorical {c}: not a column of either feature table")
    # The training table is only located here: its chunks are read on the workers (``build_parts``).
    out = {"users": users, "items": items, "train": ratings_chunks(dataset, "--dataset")}
    if test is not None:
        uid, iid, y = read_ratings(test, "--test")
        if task_ == "classification":
            check_labels(y, test)
        u, i = index_pairs(users, items, uid, iid, cold_start_missing)
        out["test"] = {"user_ids": uid, "item_ids": iid, "u": u, "i": i, "y": y}
    return out


@flow(name="dxplain-gammli-fit", log_prints=True)
def gammli_fit(
    dataset: str,
    user_features: str,
    item_features: str,
    out: str,
    test: str | None = None,
    task: str = "regression",
    categorical: str | None = None,
    cold_start_missing: bool = False,
    rank: int = 3,
    K: int | None = None,
    L: int | None = None,
    lam: float | None = None,
    smooth: float | None = None,
    max_pairs: int = 10,
    val_fraction: float = 0.1,
    grid_rounds: int = 2,
    backfit: int = 3,
    max_sweeps: int = 500,
    seed: int = 0,
    top_k: int = 10,
    force: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    shards: int | None = None,
    in_memory: bool = False,
) -> dict:
    """Fit GAMMLI on ``dataset``; write metrics, the local table and plots on ``test``, and the model."""
    validate(CONSTRAINTS, locals())
    t0 = time.perf_counter()
    check_out_folder(out, force)
    logger = get_run_logger()
    data = read_inputs(dataset, user_features, item_features, test, categorical, task, cold_start_missing)
    users, items = data["users"], data["items"]
    for name, v, n, side in (("K", K, len(users), "users"), ("L", L, len(items), "items")):
        if v is not None and v > n:
            raise InputError(f"--{name} {v}: larger than the {n} {side} in the feature table; give at most {n}")
    settings = Settings.from_env(scheduler=scheduler, workers=workers)
    cfg = Config(
        task=task,
        rank=rank,
        smooth=smooth,
        max_pairs=max_pairs,
        val_fraction=val_fraction,
        K=K,
        L=L,
        lam=lam,
        grid_rounds=grid_rounds,
        backfit=backfit,
        max_sweeps=max_sweeps,
        seed=seed,
        n_parts=shards or 4 * settings.workers,
    )
    # A rerun of the same inputs and settings resumes after the stages a failed run finished.
    checkpoints = Checkpoints(
        out,
        {
            "inputs": files_signature(dataset, user_features, item_features),
            "config": dataclasses.asdict(cfg),
            "categorical": categorical,
            "cold_start_missing": cold_start_missing,
        },
        log=logger.info,
    )
    with open_mapper(settings, in_memory) as mapper:
        read = RatingsFile(users, items, task, cold_start_missing, "--dataset")
        model = fit_gammli_chunks(
            users, items, read, data["train"], cfg, mapper, log=logger.info, gather=False, checkpoints=checkpoints
        )
        tables, files = {}, {}
        metrics = {
            "task": task,
            "n_train": model.info["n_train"],
            "dropped_train": model.info["dropped_train"],
            "K": model.info["K"],
            "L": model.info["L"],
            "lam": model.info["lam"],
            "rank": rank,
            "ir": model.info["ir"],
            "kept": {"main": model.info["stage1"]["kept"], "interactions": model.info["stage2"]["kept"]},
            "seconds": model.info["seconds"],
            "resumed": model.info["resumed"],
        }
        if "test" in data:
            te = data["test"]
            metrics.update(evaluate_pairs(model, te["u"], te["i"], te["y"]))
            tables["local"] = model.local_table(te["user_ids"], te["item_ids"], te["u"], te["i"])
        else:
            metrics.update({"n_test": 0, "n_cold": 0, "rmse_cold": None})
        effects = effect_tables(model)
        files.update({f"plots/{k}.parquet": parquet_bytes(v) for k, v in effects.items()})
        files.update({f"plots/{k}": v for k, v in plot_pngs(effects, model.info["ir"]).items()})
        files["plots/ir.json"] = json.dumps(model.info["ir"], indent=1)
        # The workers write the training residuals into the staged folder; the rest is written from here.
        with staged_folder(out, force) as staged:
            n_parts = write_training_residuals(
                mapper, model.train_parts, model.U, model.V, model.lam, join(staged, "model")
            )
            metrics["peak_rss_mib"] = model.info["peak_rss_mib"] = mapper.peak_rss_mib()
            arrays, meta = model.to_arrays()
            meta["train_parts"] = n_parts
            files.update(save_model("model", arrays, meta, users, items))
            metrics["seconds"]["flow"] = round(time.perf_counter() - t0, 2)
            files["metrics.json"] = json.dumps(metrics, indent=1, default=float)
            write_into(staged, tables, files)
    checkpoints.clear()
    logger.info("gammli fit → %s: %s", out, {k: metrics.get(k) for k in ("rmse", "auc", "n_test", "n_cold")})
    return {"out": str(out), **{k: v for k, v in metrics.items() if k != "ir"}}


@flow(name="dxplain-gammli-explain", log_prints=True)
def gammli_explain(
    model: str, pairs: str, out: str, top_k: int = 10, cold_start_missing: bool = False, force: bool = False
) -> dict:
    """The local table and the latent part's training-data attributions for any (user, item) pairs."""
    validate(CONSTRAINTS, locals())
    check_out_folder(out, force)
    arrays, meta, users, items = load_model(model)
    m = GAMMLIModel.from_arrays(arrays, meta, users, items)
    table = read_pairs(pairs)
    uid, iid = table.column("user").combine_chunks(), table.column("item").combine_chunks()
    u, i = m.index(uid, iid, cold_start_missing)
    # Only the training rows these pairs' attributions sum over: their users' and their items'.
    m.train = read_training_rows(model, arrays, np.unique(u[u < len(users)]), np.unique(i[i < len(items)]))
    tables = {"local": m.local_table(uid, iid, u, i), **m.attribution_tables(uid, iid, u, i, top_k)}
    write_folder(out, tables, {}, force)
    return {"out": str(out), "pairs": len(u), "cold": int(m.cold(u, i).sum())}
