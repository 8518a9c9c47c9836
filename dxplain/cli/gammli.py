"""``dxplain gammli fit`` and ``dxplain gammli explain``: the interpretable recommender GAMMLI."""

from __future__ import annotations

from .common import flow_options, print_summary, run_flow, run_options


def cmd_fit(a) -> int:
    from ..flows.gammli import CONSTRAINTS, gammli_fit

    print_summary(run_flow(gammli_fit, CONSTRAINTS, a))
    return 0


def cmd_explain(a) -> int:
    from ..flows.gammli import CONSTRAINTS, gammli_explain

    print_summary(run_flow(gammli_explain, CONSTRAINTS, a))
    return 0


def register(sub) -> None:
    from ..flows.gammli import gammli_explain, gammli_fit

    g = sub.add_parser("gammli", help="GAMMLI: main effects, manifest and latent interactions (explainable)")
    gs = g.add_subparsers(dest="gammli_command", required=True)
    f = gs.add_parser("fit", help="fit on ratings + feature tables; metrics, local table, plots, model at --out")
    flow_options(
        f,
        gammli_fit,
        {
            "dataset": "training interactions R (Parquet/CSV with user, item, rating)",
            "user_features": "user feature table UF (Parquet/CSV with a 'user' column)",
            "item_features": "item feature table IF (Parquet/CSV with an 'item' column)",
            "test": "test interactions T (same columns as R): metrics and the local table",
            "task": "regression (squared loss) or classification (logistic link, 0/1 labels)",
            "categorical": "comma-separated feature columns to treat as categorical (text columns must be listed)",
            "cold_start_missing": "treat ids without a feature row as cold (dropped from training) instead of failing",
            "rank": "rank of the latent interactions",
            "K": "user groups (default: chosen on the validation split)",
            "L": "item groups (default: chosen on the validation split)",
            "lam": "λ of eq. 4 (default: chosen on the validation split)",
            "smooth": "P-spline/ridge penalty per training row (default: chosen on the validation split, 1e-5 to 1e-2)",
            "backfit": "rounds refitting the additive terms on y − latent and the latent part on the new residual",
            "max_sweeps": "cap on the ALS sweeps of each stage-3 fit (it stops earlier at a relative change of 1e-10)",
            "max_pairs": "interactions fitted jointly after screening (s₂ ≤ this)",
            "val_fraction": "share of the training rows held out to choose s₁, s₂, K, L, λ",
            "grid_rounds": "coarse-to-fine rounds of the (K, L, λ) grid (27 points each)",
            "seed": "seed of the split, K-means and the ALS start",
            "top_k": "training ratings per side in the latent attributions",
            "force": "replace a non-empty --out",
        },
    )
    run_options(f, gammli_fit, "interaction parts per side (default 4 per worker)", "fit")
    f.set_defaults(func=cmd_fit)
    e = gs.add_parser("explain", help="local table + latent training-data attributions for pairs, from a model")
    flow_options(
        e,
        gammli_explain,
        {
            "model": "model folder written by fit (O/model)",
            "pairs": "pairs P (Parquet/CSV with user, item)",
            "out": "output folder",
            "top_k": "training ratings per side in the attributions",
            "cold_start_missing": "score ids without a feature row as cold instead of failing",
            "force": "replace a non-empty --out",
        },
    )
    e.set_defaults(func=cmd_explain)
