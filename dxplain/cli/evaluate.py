"""``dxplain evaluate``: case-deletion faithfulness of explainers (AUC-DEL±)."""

from __future__ import annotations

from ..io.atomic import join, read_text
from .common import flow_options, print_summary, run_flow, run_options


def cmd_evaluate(a) -> int:
    from ..datasets.tabular import check_available
    from ..flows.evaluate import CONSTRAINTS, evaluate

    def check(kw):  # said before Prefect and the cluster start
        check_available(kw["dataset"])  # scikit-learn's datasets need it

    summary = run_flow(evaluate, CONSTRAINTS, a, check=check)
    print_summary(summary)
    print()
    print(read_text(join(summary["folder"], "auc_del.md")))
    return 0


def register(sub) -> None:
    from ..flows.evaluate import evaluate

    ev = sub.add_parser("evaluate", help="case-deletion evaluation of sparse-model explainers (AUC-DEL±)")
    flow_options(ev, evaluate, ["dataset", "trials", "targets", "n_lam", "model"])
    run_options(ev, evaluate, None, "retrain")
    ev.set_defaults(func=cmd_evaluate)
