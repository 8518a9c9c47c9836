"""``dxplain kolmogorov fit``: a Kolmogorov model (IKM), its rules and influential items (paper: Kolmogorov models)."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow


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
    flow_options(f, kolmogorov_fit, {
        "dataset": "training data: dataset name or path",
        "test": "test pairs (Parquet/CSV with user, item, rating) for rmse_stars and nrmse",
        "dim": "D, the number of elementary events (≥ 2)",
        "solver": "ψ-step: sdr (semidefinite relaxation + randomisation) or exhaustive (D ≤ 16)",
        "out": "output folder (written whole; must be new or empty unless --force)",
        "iterations": "BCD iterations",
        "lam": "λ, ℓ2 on θ (default: chosen on a validation split)",
        "mu": "μ, ℓ1 on ψ (default: chosen on a validation split)",
        "step": "Frank–Wolfe step: pairwise, exact (line search) or simple (2/(k+2))",
        "r_min": "lowest rating of the scale",
        "r_max": "highest rating of the scale (p = rating / R_max)",
        "feedback": "explicit (p = rating / R_max) or implicit (likes as 1, sampled negatives as 0)",
        "negatives": "implicit: sampled negatives per like",
        "like_threshold": "a rating ≥ this is a like (implicit mode, rule support and checks)",
        "skip_unseen": "drop test rows whose user or item is absent from training (default: an error)",
        "check_exhaustive": "with sdr, also run exhaustive search on every ψ-step and report the error rate",
        "max_rules": "rules written at most (the most popular antecedents' first; metrics give the total)",
        "seed": "seed of the initialisation, the randomisation and the splits",
        "force": "replace a non-empty --out",
        "scheduler": "tcp://HOST:PORT of an existing Dask scheduler (default: a LocalCluster)",
        "workers": "LocalCluster worker processes (default 2, or DXPLAIN_WORKERS)",
        "shards": "user and item shards per step (default 2 per worker)",
        "in_memory": "fit in this process (no Dask)",
    })
    f.set_defaults(func=cmd_fit)
