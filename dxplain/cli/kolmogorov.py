"""``dxplain kolmogorov fit``: a Kolmogorov model (IKM), its rules and influential items (paper: Kolmogorov models)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options


def cmd_fit(a) -> int:
    from ..flows.kolmogorov import CONSTRAINTS, kolmogorov_fit

    summary = run_flow(kolmogorov_fit, CONSTRAINTS, a)
    summary.pop("trace", None)
    summary.pop("validation", None)
    print_summary(summary)
    return 0


def register(sub) -> None:
    from ..flows.kolmogorov import kolmogorov_fit

    k = sub.add_parser("kolmogorov", help="Kolmogorov models: P[u likes i] = θ_uᵀψ_i, rules and influential items")
    verbs = k.add_subparsers(dest="verb", required=True)
    f = verbs.add_parser("fit", help="fit by IKM; write metrics.json, rules.parquet, influence.parquet, model/")
    flow_options(f, kolmogorov_fit, [
        "dataset", "test", "dim", "solver", "iterations", "lam", "mu", "step", "r_min", "r_max", "feedback",
        "negatives", "like_threshold", "skip_unseen", "check_exhaustive", "max_rules", "seed", "force",
        "out"
    ])
    run_options(f, kolmogorov_fit, "user and item shards per step (default 2 per worker)", "fit", out=False)
    f.set_defaults(func=cmd_fit)
