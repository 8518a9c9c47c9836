"""Case-deletion evaluation: sparse-model explainers (ℓ1 representer, ℓ2 representer, IF, random) on the
classification sets, and MF explainers (high-dimensional representer, FIA, random) on movielens-100k.

trials (each cached by Prefect: an interrupted evaluation resumes) → per trial: split, fit, importances,
deletion curves retrained as Dask tasks → AUC-DEL± with 95% CIs, ms per explanation → CSV, Markdown, PNG.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import time

import pyarrow as pa
from prefect import flow, get_run_logger, task
from prefect.cache_policies import INPUTS

from dxplain.config import Settings
from dxplain.datasets import resolve_dataset
from dxplain.datasets.tabular import TABULAR, load_tabular
from dxplain.distributed.cluster import connect
from dxplain.distributed.evaluate import run_in_memory, run_on_cluster
from dxplain.errors import InputError
from dxplain.explain.faithfulness import curve_rows, plan, trial_case
from dxplain.explain.faithfulness_cf import cf_plan, cf_trial_case
from dxplain.explain.report import auc_del_markdown, deletion_plot_png
from dxplain.io.evaluation import cache_dir, write_evaluation
from dxplain.models.two_tower import encode_features


def code_fingerprint() -> str:
    """A hash of the code a trial runs: a cached trial is reused only while that code is unchanged."""
    from dxplain.datasets import tabular
    from dxplain.explain import deletion, faithfulness, faithfulness_cf, representer
    from dxplain.kernels import als, newton, sparse_representers
    from dxplain.models import mf, sgd_mf, softimpute, sparse_logistic, two_tower

    mods = (tabular, deletion, faithfulness, faithfulness_cf, representer, als, newton, mf, sgd_mf, softimpute,
            sparse_representers, sparse_logistic, two_tower)
    return hashlib.sha256("".join(inspect.getsource(m) for m in mods).encode()).hexdigest()[:16]


CF_DATASETS = ("movielens-100k",)
CF_MODELS = ("als", "softimpute", "sgd", "two-tower")


@task(cache_policy=INPUTS - "client", persist_result=True, retries=1)
def evaluate_trial(dataset: str, trial: int, targets: int, n_lam: float, model: str, code: str,
                   client=None) -> dict:
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
    curves = run_on_cluster(client, case, jobs, base) if client else run_in_memory(case, jobs, base)
    get_run_logger().info("trial %d: %s, %d deletion curves", trial, info, len(jobs))
    return {"rows": curve_rows(trial, jobs, curves), "ms": ms, **info}


@flow(name="dxplain-evaluate", log_prints=True)
def evaluate(dataset: str = "breast-cancer", trials: int = 40, targets: int = 40, n_lam: float = 1.0,
             model: str = "als", out: str | None = None, scheduler: str | None = None, workers: int | None = None,
             in_memory: bool = False) -> dict:
    """AUC-DEL± of every explainer over trials × targets, written as CSV, Markdown and PNG."""
    if dataset not in TABULAR + CF_DATASETS:
        raise InputError(f"--dataset {dataset!r}: choose one of {', '.join(TABULAR + CF_DATASETS)}")
    if model not in CF_MODELS:
        raise InputError(f"--model {model!r}: for movielens-100k choose als (ALS-MF), softimpute, sgd "
                         "(SGD-MF, adds TracInCP) or two-tower (YoutubeNet-style)")
    if trials < 1 or targets < 1:
        raise InputError(f"--trials {trials} --targets {targets}: both must be ≥ 1 (the paper uses 40 × 40)")
    t0 = time.perf_counter()
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    cache = str(cache_dir(settings.out))
    # Cache keys live beside the outputs; the cached trial results in Prefect's local result storage.
    run_trial = evaluate_trial.with_options(cache_policy=(INPUTS - "client").configure(key_storage=cache))
    code = code_fingerprint()
    with contextlib.nullcontext() if in_memory else connect(settings) as client:
        results = [run_trial(dataset, t, targets, n_lam, model, code, client) for t in range(trials)]
    rows = [r for res in results for r in res["rows"]]
    ms = {m: sum(res["ms"][m] for res in results) / len(results) for m in results[0]["ms"]}
    name = f"{dataset} ({ {'als': 'ALS-MF', 'sgd': 'SGD-MF', 'softimpute': 'SoftImpute', 'two-tower': 'two-tower'}[model]})" \
        if dataset in CF_DATASETS else dataset
    title = f"{name}, {trials} trials × {targets} targets"
    summary = {"dataset": dataset, "model": model if dataset in CF_DATASETS else "l1-logistic", "trials": trials,
               "targets": targets, "n_lam": n_lam, "retrainings": len(rows), "ms_per_explanation": ms,
               "models": [{k: v for k, v in r.items() if k not in ("rows", "ms")} for r in results],
               "seconds": round(time.perf_counter() - t0, 1)}
    md = auc_del_markdown(rows, ms, title)
    folder = write_evaluation(settings.out, pa.Table.from_pylist(rows), md, summary, deletion_plot_png(rows, title))
    summary["folder"] = str(folder)
    get_run_logger().info("evaluation done: %d retrainings in %.1fs → %s\n%s", len(rows), summary["seconds"], folder,
                          md)
    return summary
