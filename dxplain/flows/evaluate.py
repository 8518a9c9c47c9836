"""Case-deletion evaluation: sparse-model explainers (ℓ1 representer, ℓ2 representer, IF, random) on the
classification sets, and MF explainers (high-dimensional representer, FIA, random) on movielens-100k.

trials (each cached by Prefect: an interrupted evaluation resumes) → per trial: split, fit, importances,
deletion curves retrained as Dask tasks → AUC-DEL± with 95% CIs, ms per explanation → CSV, Markdown, PNG.
"""

from __future__ import annotations

import hashlib
import inspect
import time

import pyarrow as pa
from prefect import flow, get_run_logger, task
from prefect.cache_policies import INPUTS

from ..config import Settings
from ..datasets import resolve_dataset
from ..datasets.tabular import TABULAR, load_tabular
from ..evaluation.deletion import curve_rows, deletion_curves
from ..evaluation.faithfulness import plan, trial_case
from ..evaluation.faithfulness_cf import cf_plan, cf_trial_case
from ..evaluation.report import auc_del_markdown, deletion_plot_png
from ..io.results import csv_bytes, evaluation_cache, write_results
from ..models.two_tower import encode_features
from ..params import CLUSTER, Interval, OneOf, validate
from .common import open_mapper, transient

CF_DATASETS = ("movielens-100k",)
MODEL_TITLES = {"als": "ALS-MF", "sgd": "SGD-MF", "softimpute": "SoftImpute", "two-tower": "two-tower"}
CF_MODELS = ("als", "softimpute", "sgd", "two-tower")
CONSTRAINTS = {
    "dataset": OneOf(*TABULAR, *CF_DATASETS),
    "model": OneOf(*CF_MODELS),
    "trials": Interval(int, 1, example=40),
    "targets": Interval(int, 1, example=40),
    "n_lam": Interval(float, 0, open_low=True, example=1),
    "workers": CLUSTER["workers"],
}


def code_fingerprint() -> str:
    """A hash of the code a trial runs: a cached trial is reused only while that code is unchanged."""
    from ..datasets import tabular
    from ..evaluation import deletion, faithfulness, faithfulness_cf
    from ..explain import representer
    from ..kernels import als, newton, sparse_representers
    from ..models import sgd_mf, softimpute, sparse_logistic, two_tower
    from ..models.als import half_steps, losses, trainer

    mods = (
        tabular,
        deletion,
        faithfulness,
        faithfulness_cf,
        representer,
        als,
        newton,
        trainer,
        half_steps,
        losses,
        sgd_mf,
        softimpute,
        sparse_representers,
        sparse_logistic,
        two_tower,
    )
    return hashlib.sha256("".join(inspect.getsource(m) for m in mods).encode()).hexdigest()[:16]


@task(cache_policy=INPUTS - "mapper", persist_result=True, retries=1, retry_condition_fn=transient)
def evaluate_trial(dataset: str, trial: int, targets: int, n_lam: float, model: str, code: str, mapper) -> dict:
    """One trial's deletion curves; cached on its inputs and the code's fingerprint, so a rerun skips it."""
    if dataset in CF_DATASETS:
        ds = resolve_dataset(dataset)
        features = encode_features(ds.users) if model == "two-tower" else None
        case = cf_trial_case(ds.interactions, trial, targets, model=model, user_features=features)
        jobs, ms = cf_plan(case, seed=trial)
        info = {"grad_norm": case.model.grad_norm}
    else:
        X, y = load_tabular(dataset)
        case = trial_case(X, y, trial, targets, n_lam)
        jobs, ms = plan(case, seed=trial)
        info = {"support": int(len(case.model.support)), "kkt": case.model.kkt_violation}
    base = [case.prediction(t) for t in range(case.n_targets)]
    curves = deletion_curves(mapper, case, jobs, base)
    get_run_logger().info("trial %d: %s, %d deletion curves", trial, info, len(jobs))
    return {"rows": curve_rows(trial, jobs, curves), "ms": ms, **info}


@flow(name="dxplain-evaluate", log_prints=True)
def evaluate(
    dataset: str = "breast-cancer",
    trials: int = 40,
    targets: int = 40,
    n_lam: float = 1.0,
    model: str = "als",
    out: str | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    in_memory: bool = False,
) -> dict:
    """AUC-DEL± of every explainer over trials × targets, written as CSV, Markdown and PNG.

    Parameters
    ----------
    dataset : str
        ℓ1 logistic regression on breast-cancer, digits-4v9, synthetic-sparse (p = 50,000) or
        synthetic-small (these need the bench extra); or ALS-MF on movielens-100k.
    trials : int
        Random splits (the paper: 40).
    targets : int
        Test points per trial (the paper: 40).
    n_lam : float
        n·λ of the ℓ1 model (the paper: 1).
    model : str
        movielens-100k only: als, softimpute, sgd (adds TracInCP) or two-tower.
    out, scheduler, workers, shards, in_memory
        Where results go and where the work runs (``dxplain.cli.common.run_options``).
    """
    validate(CONSTRAINTS, locals())
    t0 = time.perf_counter()
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    cache = str(evaluation_cache(settings.out, settings.data_home))
    # Cache keys live beside the outputs (for a URL out, on this host); the trial results in Prefect's local storage.
    run_trial = evaluate_trial.with_options(cache_policy=(INPUTS - "mapper").configure(key_storage=cache))
    code = code_fingerprint()
    with open_mapper(settings, in_memory) as mapper:
        results = [run_trial(dataset, t, targets, n_lam, model, code, mapper) for t in range(trials)]
    rows = [r for res in results for r in res["rows"]]
    # A method that failed on a trial has no time there (its curves are recorded as failed, with the reason).
    ms = {
        m: (sum(t) / len(t) if (t := [r["ms"][m] for r in results if r["ms"][m] is not None]) else None)
        for m in results[0]["ms"]
    }
    name = f"{dataset} ({MODEL_TITLES[model]})" if dataset in CF_DATASETS else dataset
    title = f"{name}, {trials} trials × {targets} targets"
    summary = {
        "dataset": dataset,
        "model": model if dataset in CF_DATASETS else "l1-logistic",
        "trials": trials,
        "targets": targets,
        "n_lam": n_lam,
        "retrainings": len(rows),
        "ms_per_explanation": ms,
        "models": [{k: v for k, v in r.items() if k not in ("rows", "ms")} for r in results],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    md = auc_del_markdown(rows, ms, title)
    png = deletion_plot_png(rows, title)
    files = {
        "deletions.csv": csv_bytes(pa.Table.from_pylist(rows)),
        "auc_del.md": md,
        **({"deletion_curves.png": png} if png is not None else {}),
    }
    folder = write_results(settings.out, "evaluations", {}, summary, files)
    summary["folder"] = str(folder)
    get_run_logger().info(
        "evaluation done: %d retrainings in %.1fs → %s\n%s", len(rows), summary["seconds"], folder, md
    )
    return summary
