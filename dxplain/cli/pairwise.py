"""``dxplain pairwise explain``: Shapley feature importance of a pairwise model's scores (ASIPair, RAIPair)."""

from __future__ import annotations

from ..params import validate
from .common import flow_kwargs, flow_options, print_summary, run_flow


def cmd_explain(a) -> int:
    from ..flows.pairwise import CONSTRAINTS, pairwise_explain, prepare

    kw = flow_kwargs(a)
    validate(CONSTRAINTS, kw)
    prepare(
        kw["data"], kw["out"], kw["label"], kw["model"], kw["method"], kw["seed"], kw["k1"], kw["max_d"], kw["force"]
    )  # data-dependent refusals before Prefect or a cluster starts
    summary = run_flow(pairwise_explain, CONSTRAINTS, a)
    print_summary(
        {
            k: summary[k]
            for k in ("auc", "near_chance", "pairs", "features", "max_relative_efficiency_error", "seconds", "out")
        }
    )
    print(f"\nAttributions: {summary['out']}/attributions.parquet; metrics: {summary['out']}/metrics.json")
    return 0


def register(sub) -> None:
    """``pairwise explain``: one verb today; the sub-subcommand leaves room for ``fit`` / ``mask`` later."""
    from ..flows.pairwise import pairwise_explain

    verbs = sub.add_parser(
        "pairwise", help="feature Shapley values of pairwise models (Huai et al. 2020)"
    ).add_subparsers(dest="verb", required=True)
    e = verbs.add_parser("explain", help="fit OPAUC or LowRank on 80%% of a table and explain test pairs")
    flow_options(
        e,
        pairwise_explain,
        {
            "data": "Parquet or CSV table: every numeric column but the label is a feature",
            "label": "the label column",
            "model": "opauc (ζ = wᵀ(x_i − x_j), positive-negative pairs) or lowrank (metric, random pairs)",
            "method": "asipair (exact, D ≤ --max-d) or raipair (compressed sensing, any D)",
            "pairs": "test pairs to explain",
            "seed": "seed of the split, the model, the pairs and RAIPair's draws",
            "out": "output folder (attributions.parquet, metrics.json); must not exist or be empty",
            "sigma": "σ of the neighbour weights (eq. 5)",
            "eta": "η, the weight mass the K₁ neighbours keep (eq. 7)",
            "k1": "fix K₁ neighbours a side instead of the η rule",
            "permutations": "RAIPair permutations H (default: Theorem 2's order)",
            "measurements": "RAIPair measurements M (default: Theorem 2's order)",
            "max_d": "ASIPair's cap on D (2^D coalitions)",
            "reference_rows": "neighbour candidates per side: a seeded sample of the training rows (0: all)",
            "allow_chance": "explain a model whose test AUC is not above chance (refused by default)",
            "scheduler": "tcp://HOST:PORT of an existing Dask scheduler (default: a LocalCluster)",
            "workers": "LocalCluster worker processes (default 2, or DXPLAIN_WORKERS)",
            "shards": "pair shards (default 4 per worker)",
            "in_memory": "explain in this process (no Dask)",
            "force": "replace a non-empty --out",
        },
    )
    e.set_defaults(func=cmd_explain)
