"""``dxplain evaluate``: case-deletion faithfulness of explainers (AUC-DEL±)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options


def cmd_evaluate(a) -> int:
    from ..flows.evaluate import CONSTRAINTS, evaluate

    summary = run_flow(evaluate, CONSTRAINTS, a)
    print_summary(summary)
    print()
    print(open(f"{summary['folder']}/auc_del.md").read())
    return 0


def register(sub) -> None:
    from ..flows.evaluate import evaluate

    ev = sub.add_parser("evaluate", help="case-deletion evaluation of sparse-model explainers (AUC-DEL±)")
    flow_options(ev, evaluate, {
        "dataset": "ℓ1 logistic regression on breast-cancer, digits-4v9, synthetic-sparse (p = 50,000) or "
                   "synthetic-small (these need the bench extra); or ALS-MF on movielens-100k",
        "trials": "random splits (the paper: 40)",
        "targets": "test points per trial (the paper: 40)",
        "n_lam": "n·λ of the ℓ1 model (the paper: 1)",
        "model": "movielens-100k only: als, softimpute, sgd (adds TracInCP) or two-tower",
    })
    run_options(ev, evaluate, None, "retrain")
    ev.set_defaults(func=cmd_evaluate)
