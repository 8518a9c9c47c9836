"""``dxplain prototypes``: the m training interactions that explain a set of predictions (SBQ)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options
from .refresh import IMPLICIT_HELP, LAM_HELP


def cmd_prototypes(a) -> int:
    from ..flows.prototypes import CONSTRAINTS, prototypes

    summary = run_flow(prototypes, CONSTRAINTS, a)
    print_summary(summary)
    print_prototypes(summary["folder"], a.dataset, limit=10)
    return 0


def print_prototypes(folder: str, dataset: str, limit: int) -> None:
    import pyarrow.parquet as pq

    from ..datasets import resolve_dataset
    from ..explain.report import format_prototypes

    ds = resolve_dataset(dataset, fetch=False)
    print()
    print(format_prototypes(pq.read_table(f"{folder}/prototypes.parquet"), pq.read_table(f"{folder}/targets.parquet"),
                            ds.items, limit=limit))


def register(sub) -> None:
    from ..flows.prototypes import prototypes

    pr = sub.add_parser("prototypes", help="the m training interactions that explain a set of predictions (SBQ)")
    flow_options(pr, prototypes, {
        "dataset": "dataset name or path",
        "model": "model Zarr (default: train or reuse ALS-MF as refresh does)",
        "targets": "Parquet/CSV list of (user, item) predictions to explain",
        "user": "explain this user's top-N list instead",
        "top_n": "length of the user's list",
        "m": "number of prototypes",
        "fisher": "Fisher information: empirical, expected, identity (the 'practical' kernel)",
        "variant": "greedy (exact, sharded over the cluster), greedi (two rounds), stochastic, mp (matching pursuit)",
        "damping": "F + δI, δ = damping·tr(F)/p",
        "k": "rank when training",
        "lam": LAM_HELP,
        "seed": "seed of training and of the randomised variants",
        **IMPLICIT_HELP,
    })
    run_options(pr, prototypes, "candidate shards (default 4 per worker)", "select")
    pr.set_defaults(func=cmd_prototypes)
