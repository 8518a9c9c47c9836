"""``dxplain prototypes``: the m training interactions that explain a set of predictions (SBQ)."""

from __future__ import annotations

from .common import flow_options, param_docs, print_summary, run_flow, run_options


def cmd_prototypes(a) -> int:
    from ..flows.prototypes import CONSTRAINTS, prototypes

    summary = run_flow(prototypes, CONSTRAINTS, a, interactions=True)
    print_summary(summary)
    print_prototypes(summary["folder"], a.dataset, limit=10)
    return 0


def print_prototypes(folder: str, dataset: str, limit: int) -> None:
    from ..datasets import resolve_dataset
    from ..datasets.registry import resolve_prepared
    from ..explain.report import format_prototypes
    from ..io.atomic import join
    from ..io.tables import read_table

    # The item catalogue only: a prepared folder's items.parquet, not its interactions.
    prepared = resolve_prepared(dataset)
    items = read_table(join(prepared, "items.parquet")) if prepared else resolve_dataset(dataset, fetch=False).items
    print()
    print(
        format_prototypes(
            read_table(join(folder, "prototypes.parquet")), read_table(join(folder, "targets.parquet")), items, limit
        )
    )


def register(sub) -> None:
    from ..flows.prototypes import prototypes
    from ..flows.refresh import refresh

    pr = sub.add_parser("prototypes", help="the m training interactions that explain a set of predictions (SBQ)")
    implicit = ("implicit", "neg_samples", "neg_weight")
    flow_options(
        pr,
        prototypes,
        [
            "dataset",
            "model",
            "targets",
            "user",
            "top_n",
            "m",
            "fisher",
            "variant",
            "damping",
            "k",
            "lam",
            "seed",
            "max_sweeps",
            "newton_steps",
        ]
        + list(implicit),
        helps={n: param_docs(refresh)[n] for n in implicit + ("max_sweeps", "newton_steps")},
    )
    run_options(pr, prototypes, "candidate shards (default 4 per worker)", "select")
    pr.set_defaults(func=cmd_prototypes)
