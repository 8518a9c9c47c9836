"""The ``dxplain`` command: argument parsing and printing only."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from .errors import DxplainError
from .models.mf import DEFAULT_K


LAM_HELP = "λ when training (default 30/|D|, a ridge of 15 per solve: 3e-4 on ml-100k, chosen on validation)"


def _columns(spec: str | None) -> dict | None:
    if not spec:
        return None
    try:
        return dict(kv.split("=", 1) for kv in spec.split(","))
    except ValueError:
        raise DxplainError(f"--columns {spec!r}: use dxplain=file pairs, e.g. user=reviewerID,item=asin,"
                           "rating=overall") from None


def cmd_refresh(a) -> int:
    from flows.refresh import refresh

    summary = refresh(dataset=a.dataset, model=a.model, out=a.out, scheduler=a.scheduler, workers=a.workers,
                      top_n=a.top_n, top_k=a.top_k, targets=a.targets, shards=a.shards, k=a.k, lam=a.lam,
                      in_memory=a.in_memory, max_sweeps=a.max_sweeps, newton_steps=a.newton_steps)
    print(json.dumps(summary, indent=2, default=str))
    print(f"\nResults: {summary['run']} (LATEST in {a.out or 'dxplain-out'} points here)")
    from .io import runs

    table = runs.open_run(summary["run"]).head(1)
    if table.num_rows:
        first = table.to_pylist()[0]
        print(f"\nExample — dxplain explain --run {summary['run']} --user {first['user']} --item {first['item']}\n")
        _print_explanation(summary["run"], str(first["user"]), str(first["item"]), a.dataset, limit=5)
    return 0


def _print_explanation(run_path: str, user: str, item: str, dataset: str | None, limit: int) -> None:
    import pyarrow.dataset as pads

    from .datasets import resolve_dataset
    from .explain.report import format_explanation
    from .io import runs
    from .io.interactions import index_of

    run = runs.resolve_run(run_path)
    dset = runs.open_run(run)
    name = dataset or runs.read_manifest(run)["summary"]["dataset"]
    ds = resolve_dataset(name, fetch=False)
    import pyarrow as pa

    u = ds.users.column("id").take(pa.array(index_of(pa.array([user]), ds.interactions.user_ids, "user", "--user")))
    i = ds.items.column("id").take(pa.array(index_of(pa.array([item]), ds.interactions.item_ids, "item", "--item")))
    rows = dset.to_table(filter=(pads.field("user") == u[0].as_py()) & (pads.field("item") == i[0].as_py()))
    print(format_explanation(rows, ds.items, ds.users, limit=limit))


def cmd_explain(a) -> int:
    _print_explanation(a.run, a.user, a.item, a.dataset, a.limit)
    return 0


def cmd_datasets(a) -> int:
    from .config import Settings

    settings = Settings.from_env()
    if a.action == "fetch":
        from .datasets import registry

        if a.name not in registry.ALIASES:
            raise DxplainError(f"unknown dataset {a.name!r}; known: movielens-100k")
        ds = registry.resolve_dataset(a.name, settings)
        print(f"{a.name}: {len(ds.interactions)} interactions, {ds.interactions.n_users} users, "
              f"{ds.interactions.n_items} items (prepared under {settings.data_home}/datasets)")
    elif a.action == "synth":
        from .datasets.synthetic import generate

        print(json.dumps(generate(a.out, a.interactions, n_users=a.users, n_items=a.items, seed=a.seed)))
    elif a.action == "import":
        from .io.interactions import read_table, write_dataset

        ds = write_dataset(a.out, read_table(a.path, _columns(a.columns)), source=a.path)
        print(f"{a.out}: {len(ds.interactions)} interactions, {ds.interactions.n_users} users, "
              f"{ds.interactions.n_items} items")
    return 0


def cmd_train(a) -> int:
    from .datasets import resolve_dataset
    from .io.model_store import save_model
    from .models.mf import ALSMF

    ds = resolve_dataset(a.dataset)
    m = ALSMF(k=a.k, lam=a.lam, seed=a.seed).fit(ds.interactions)
    save_model(a.out, m, ds.interactions)
    print(f"{a.out}: ALS-MF k={a.k} λ={m.lam:g}, ‖∇f‖={m.grad_norm:.1e}")
    return 0


def cmd_import_embeddings(a) -> int:
    from .datasets import resolve_dataset
    from .io.model_store import import_embeddings

    ds = resolve_dataset(a.dataset)
    import_embeddings(a.out, ds.interactions, a.user_factors, a.item_factors, a.user_ids, a.item_ids,
                      lam=a.lam, mu=a.mu)
    print(f"{a.out}: imported factors for {ds.interactions.n_users} users and {ds.interactions.n_items} items")
    return 0


def _threshold(raw: str) -> float | None:
    return None if raw.lower() == "none" else float(raw)


def cmd_negatives(a) -> int:
    from flows.negatives import negatives

    summary = negatives(dataset=a.dataset, percent=a.percent, method=a.method, negatives=a.negatives,
                        neg_weight=a.neg_weight, positive_threshold=a.positive_threshold, k=a.k, lam=a.lam,
                        seed=a.seed, out=a.out, scheduler=a.scheduler, workers=a.workers, shards=a.shards,
                        retrain=a.retrain, in_memory=a.in_memory)
    print(json.dumps(summary, indent=2, default=str))
    print(f"\nFlagged negatives: {summary['folder']}/flagged.parquet")
    return 0


def cmd_prototypes(a) -> int:
    from flows.prototypes import prototypes

    summary = prototypes(dataset=a.dataset, model=a.model, targets=a.targets, user=a.user, top_n=a.top_n, m=a.m,
                         fisher=a.fisher, variant=a.variant, damping=a.damping, out=a.out, scheduler=a.scheduler,
                         workers=a.workers, shards=a.shards, k=a.k, lam=a.lam, seed=a.seed, in_memory=a.in_memory)
    print(json.dumps(summary, indent=2, default=str))
    _print_prototypes(summary["folder"], a.dataset, limit=10)
    return 0


def cmd_evaluate(a) -> int:
    from flows.evaluate import evaluate

    summary = evaluate(dataset=a.dataset, trials=a.trials, targets=a.targets, n_lam=a.n_lam, model=a.model, out=a.out,
                       scheduler=a.scheduler, workers=a.workers, in_memory=a.in_memory)
    print(json.dumps(summary, indent=2, default=str))
    print()
    print(open(f"{summary['folder']}/auc_del.md").read())
    return 0


def _print_prototypes(folder: str, dataset: str, limit: int) -> None:
    import pyarrow.parquet as pq

    from .datasets import resolve_dataset
    from .explain.report import format_prototypes

    ds = resolve_dataset(dataset, fetch=False)
    print()
    print(format_prototypes(pq.read_table(f"{folder}/prototypes.parquet"), pq.read_table(f"{folder}/targets.parquet"),
                            ds.items, limit=limit))


def _run_options(p: argparse.ArgumentParser, shards: str | None, in_memory: str) -> None:
    """Where results go and where the work runs: the same for every flow."""
    p.add_argument("--out", help="output folder (default dxplain-out, or DXPLAIN_OUT)")
    p.add_argument("--scheduler", help="tcp://HOST:PORT of an existing Dask scheduler (default: a LocalCluster)")
    p.add_argument("--workers", type=int, help="LocalCluster worker processes (default 2)")
    if shards:
        p.add_argument("--shards", type=int, help=shards)
    p.add_argument("--in-memory", action="store_true", help=f"{in_memory} in this process (no Dask)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dxplain", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("refresh", help="explain every user's top-N recommendations and publish a run")
    r.add_argument("--dataset", default="movielens-100k", help="dataset name or path (prepared folder, Parquet, CSV)")
    r.add_argument("--model", help="a model store (.zarr); default: train ALS-MF (reused while the data is unchanged)")
    r.add_argument("--top-n", type=int, default=10, help="recommendations explained per user")
    r.add_argument("--top-k", type=int, default=10, help="top positive and negative attributions per target; 0 = all")
    r.add_argument("--targets", help="Parquet/CSV of (user, item) to explain instead of the top-N")
    r.add_argument("--k", type=int, default=DEFAULT_K, help="rank when training")
    r.add_argument("--lam", type=float, help=LAM_HELP)
    r.add_argument("--max-sweeps", type=int, help="cap ALS sweeps when training (default: up to 60, until they stall)")
    r.add_argument("--newton-steps", type=int,
                   help="cap the Newton polish after ALS (default: up to 200, until ‖∇f‖ ≤ 1e-9); 0 = ALS only")
    _run_options(r, "user shards (default 4 per worker, or more so that no shard holds over 8M output rows)",
                 "run the shards")
    r.set_defaults(func=cmd_refresh)

    e = sub.add_parser("explain", help="print one target's explanation from a run")
    e.add_argument("--run", required=True, help="a run folder, or an output folder (follows LATEST)")
    e.add_argument("--user", required=True)
    e.add_argument("--item", required=True)
    e.add_argument("--dataset", help="dataset for titles and features (default: the run's)")
    e.add_argument("--limit", type=int, default=10, help="rows shown per side")
    e.set_defaults(func=cmd_explain)

    d = sub.add_parser("datasets", help="fetch, generate or import datasets")
    dsub = d.add_subparsers(dest="action", required=True)
    f = dsub.add_parser("fetch", help="download and prepare a named dataset")
    f.add_argument("name")
    s = dsub.add_parser("synth", help="generate a synthetic Zipf-degree rating set to Parquet")
    s.add_argument("--interactions", type=int, required=True)
    s.add_argument("--users", type=int)
    s.add_argument("--items", type=int)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    im = dsub.add_parser("import", help="import a CSV/Parquet interaction file as a prepared dataset")
    im.add_argument("path")
    im.add_argument("--out", required=True)
    im.add_argument("--columns", help="column mapping, e.g. user=reviewerID,item=asin,rating=overall")
    d.set_defaults(func=cmd_datasets)

    n = sub.add_parser("negatives", help="flag likely false negatives in implicit feedback (paper App. C)")
    n.add_argument("--dataset", default="movielens-100k", help="dataset name or path")
    n.add_argument("--percent", type=float, default=1.0, help="share of the negatives to flag, in %% (default 1)")
    n.add_argument("--method", default="representer", help="representer (default), fia, loss or random")
    n.add_argument("--negatives", default="all",
                   help="'all' unobserved pairs (default), a number of uniform samples per positive, or a "
                        "Parquet/CSV file of (user, item) negatives")
    n.add_argument("--neg-weight", type=float, default=0.05, help="weight w of the negative terms (paper: 0.05)")
    n.add_argument("--positive-threshold", type=_threshold, default=4.0,
                   help="ratings ≥ this are positives (default 4); 'none' = every interaction is a positive")
    n.add_argument("--k", type=int, default=32, help="rank")
    n.add_argument("--lam", type=float, help="λ (default 3/|D|, chosen on validation recall@20 on ml-100k)")
    n.add_argument("--seed", type=int, default=0)
    n.add_argument("--retrain", action="store_true", help="retrain without the flagged negatives and store it")
    _run_options(n, "user shards of the scan (default 4 per worker)", "scan")
    n.set_defaults(func=cmd_negatives)

    pr = sub.add_parser("prototypes", help="the m training interactions that explain a set of predictions (SBQ)")
    pr.add_argument("--dataset", default="movielens-100k", help="dataset name or path")
    pr.add_argument("--model", help="model Zarr (default: train or reuse ALS-MF as refresh does)")
    pr.add_argument("--targets", help="Parquet/CSV list of (user, item) predictions to explain")
    pr.add_argument("--user", help="explain this user's top-N list instead")
    pr.add_argument("--top-n", type=int, default=10, help="length of the user's list (default 10)")
    pr.add_argument("-m", type=int, default=10, help="number of prototypes (default 10)")
    pr.add_argument("--fisher", default="empirical", help="Fisher information: empirical (default), expected, "
                                                          "identity (the 'practical' kernel)")
    pr.add_argument("--variant", default="greedy", help="greedy (default; exact, sharded over the cluster), "
                                                        "greedi (two rounds), stochastic, mp (matching pursuit)")
    pr.add_argument("--damping", type=float, default=1e-3, help="F + δI, δ = damping·tr(F)/p (default 1e-3)")
    pr.add_argument("--k", type=int, default=DEFAULT_K, help="rank when training")
    pr.add_argument("--lam", type=float, help=LAM_HELP)
    pr.add_argument("--seed", type=int, default=0)
    _run_options(pr, "candidate shards (default 4 per worker)", "select")
    pr.set_defaults(func=cmd_prototypes)

    ev = sub.add_parser("evaluate", help="case-deletion evaluation of sparse-model explainers (AUC-DEL±)")
    ev.add_argument("--dataset", default="breast-cancer",
                    help="ℓ1 logistic regression on breast-cancer (default), digits-4v9, synthetic-sparse "
                         "(p = 50,000) or synthetic-small; or ALS-MF on movielens-100k")
    ev.add_argument("--trials", type=int, default=40, help="random splits (default 40, as the paper)")
    ev.add_argument("--targets", type=int, default=40, help="test points per trial (default 40)")
    ev.add_argument("--n-lam", type=float, default=1.0, help="n·λ of the ℓ1 model (default 1, as the paper)")
    ev.add_argument("--model", default="als", help="movielens-100k only: als (default), softimpute, sgd (adds TracInCP) or two-tower")
    _run_options(ev, None, "retrain")
    ev.set_defaults(func=cmd_evaluate)

    t = sub.add_parser("train", help="train ALS-MF and store it")
    t.add_argument("--dataset", default="movielens-100k")
    t.add_argument("--out", required=True)
    t.add_argument("--k", type=int, default=DEFAULT_K)
    t.add_argument("--lam", type=float, help=LAM_HELP)
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(func=cmd_train)

    ie = sub.add_parser("import-embeddings", help="store factors trained elsewhere as a dxplain model")
    ie.add_argument("--dataset", required=True)
    ie.add_argument("--user-factors", required=True)
    ie.add_argument("--item-factors", required=True)
    ie.add_argument("--user-ids")
    ie.add_argument("--item-ids")
    ie.add_argument("--lam", type=float, help="λ if known (else the 1/(λ|D|) factor is dropped)")
    ie.add_argument("--mu", type=float, default=0.0, help="global offset added to scores")
    ie.add_argument("--out", required=True)
    ie.set_defaults(func=cmd_import_embeddings)
    return p


def main(argv: list[str] | None = None) -> int:
    # Cluster chatter at INFO hides dxplain's progress lines; dask reads this before distributed loads.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # Prefect's ephemeral server otherwise sends a telemetry heartbeat that, offline or when it races the
    # flow for the local SQLite file, prints a traceback ("database is locked") in the middle of a good run.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    a = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "asyncio"):  # request chatter hides the progress lines
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return a.func(a)
    except DxplainError as exc:
        print(f"dxplain: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
